import BrowserLoginTestSupport
import BrowserLoginTestTraits
import DesktopEntry
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A new private directory for one test.
func temporaryDirectory() throws -> String { try makeTemporaryDirectory("bld") }

/// Runs a program; answers its status and its output (standard output, then standard error).
func runTool(_ argv: [String], environment: [String: String] = [:], directory: String? = nil) throws -> (
    status: Int32, output: String
) {
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    let result = try runProgram("/usr/bin/env", argv, environment: env, directory: directory)
    return (result.status, result.out + result.err)
}

@Suite("make install, units, desktop file", .dedicatedThread)
struct InstallTests {
    @Test func makeInstallWithDestdirAndPrefixLaysOutTheTree() throws {
        let dest = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dest) }
        let make = try runTool(
            ["make", "-s", "install", "DESTDIR=\(dest)", "PREFIX=/usr", "BINDIR_SRC=\(binDirectory)"],
            directory: repositoryRoot)
        #expect(make.status == 0, "\(make.output)")
        let expected = [
            "usr/bin/browser-login", "usr/bin/browser-login-broker", "usr/bin/browser-login-server",
            "usr/lib/systemd/user/browser-login-broker.service", "usr/lib/systemd/user/browser-login-broker.socket",
            "usr/share/dbus-1/services/org.browserlogin.Broker.service",
            "usr/share/dbus-1/interfaces/org.browserlogin.Broker.org.freedesktop.Application.xml",
            "usr/share/browser-login/org.browserlogin.Broker.desktop.in", "usr/share/doc/browser-login/desktop.md",
            "usr/share/doc/browser-login/README.md", "usr/share/man/man1/browser-login.1",
            "usr/share/man/man1/browser-login-server.1", "usr/share/man/man8/browser-login-broker.8",
            // The D-Bus API (docs/dbus.md), the app developer's guide and the completions.
            "usr/share/dbus-1/services/org.browserlogin.Broker1.service",
            "usr/share/dbus-1/interfaces/org.browserlogin.Broker1.xml", "usr/share/doc/browser-login/apps.md",
            "usr/share/doc/browser-login/apps/python.md", "usr/share/doc/browser-login/dbus.md",
            "usr/share/bash-completion/completions/browser-login", "usr/share/zsh/vendor-completions/_browser-login",
            "usr/share/fish/vendor_completions.d/browser-login.fish",
        ]
        for path in expected { #expect(FileManager.default.fileExists(atPath: dest + "/" + path), "\(path)") }
        for program in ["browser-login", "browser-login-broker", "browser-login-server"] {
            #expect(access(dest + "/usr/bin/" + program, X_OK) == 0)
        }
        let service = try String(
            contentsOfFile: dest + "/usr/lib/systemd/user/browser-login-broker.service", encoding: .utf8)
        #expect(service.contains("ExecStart=/usr/bin/browser-login-broker\n"))
        let dbus = try String(
            contentsOfFile: dest + "/usr/share/dbus-1/services/org.browserlogin.Broker.service", encoding: .utf8)
        #expect(dbus.contains("Exec=/usr/bin/browser-login-broker\n"))
        #expect(dbus.contains("Name=\(DesktopEntry.applicationId)\n"))
        #expect(dbus.contains("SystemdService=browser-login-broker.service\n"))
        let api = try String(
            contentsOfFile: dest + "/usr/share/dbus-1/services/org.browserlogin.Broker1.service", encoding: .utf8)
        #expect(api.contains("Name=org.browserlogin.Broker1\n"))
        #expect(api.contains("Exec=/usr/bin/browser-login-broker\n"))
        #expect(api.contains("SystemdService=browser-login-broker.service\n"))
        #expect(!service.contains("@bindir@") && !dbus.contains("@bindir@") && !api.contains("@bindir@"))
        // The man pages are real pages: groff renders them without warnings.
        for page in ["man1/browser-login.1", "man8/browser-login-broker.8", "man1/browser-login-server.1"] {
            let rendered = try runTool(["groff", "-man", "-Tutf8", "-P-cbou", "-ww", dest + "/usr/share/man/" + page])
            #expect(rendered.status == 0)
            #expect(rendered.output.contains("SYNOPSIS") && rendered.output.contains("EXIT STATUS"))
            #expect(!rendered.output.contains("warning:"), "\(page): \(rendered.output.prefix(400))")
        }
    }

    @Test func theInstalledUnitsPassSystemdAnalyzeVerify() throws {
        // Installed to a real prefix, so ExecStart= and the man pages exist.
        let prefix = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let make = try runTool(
            ["make", "-s", "install", "PREFIX=\(prefix)", "BINDIR_SRC=\(binDirectory)"], directory: repositoryRoot)
        #expect(make.status == 0, "\(make.output)")
        try FileManager.default.createDirectory(atPath: prefix + "/run", withIntermediateDirectories: true)
        chmod(prefix + "/run", 0o700)
        let units = prefix + "/lib/systemd/user/"
        let verify = try runTool(
            [
                "systemd-analyze", "verify", "--user", units + "browser-login-broker.socket",
                units + "browser-login-broker.service",
            ], environment: ["XDG_RUNTIME_DIR": prefix + "/run", "MANPATH": prefix + "/share/man"])
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.output.isEmpty, "\(verify.output)")
    }

    @Test func theShippedUnitsHaveTheRequiredSettings() throws {
        let service = try String(
            contentsOfFile: repositoryRoot + "/systemd/browser-login-broker.service", encoding: .utf8)
        for line in [
            "Type=notify", "WatchdogSec=30s", "NoNewPrivileges=yes", "StateDirectory=browser-login",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "LockPersonality=yes",
            "BusName=\(DesktopEntry.applicationId)",
        ] {
            #expect(service.contains(line + "\n"), "\(line)")
        }
        let socket = try String(contentsOfFile: repositoryRoot + "/systemd/browser-login-broker.socket", encoding: .utf8)
        for line in ["ListenStream=%t/browser-login/broker.sock", "SocketMode=0600", "DirectoryMode=0700"] {
            #expect(socket.contains(line + "\n"), "\(line)")
        }
    }

    @Test func theGeneratedAndTheInstalledDesktopFilesPassDesktopFileValidate() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let generated = dir + "/" + DesktopEntry.fileName
        let text = DesktopEntry.text(exec: "/usr/bin/browser-login", schemes: ["com.example.notes", "org.example.mail"])
        try Data(text.utf8).write(to: URL(fileURLWithPath: generated))
        let validate = try runTool(["desktop-file-validate", generated])
        #expect(validate.status == 0, "\(validate.output)")
        #expect(validate.output.isEmpty, "\(validate.output)")
        // A file name that is not the bus name would be refused with DBusActivatable=true.
        let misnamed = dir + "/browser login.desktop"
        try Data(text.utf8).write(to: URL(fileURLWithPath: misnamed))
        #expect(try runTool(["desktop-file-validate", misnamed]).status != 0)
    }

    @Test func theInterfaceXMLIsTheOneTheDaemonRegisters() throws {
        let xml = try String(contentsOfFile: repositoryRoot + "/dbus/org.freedesktop.Application.xml", encoding: .utf8)
        for method in ["Activate", "Open", "ActivateAction"] { #expect(xml.contains("<method name=\"\(method)\">")) }
        #expect(xml.contains("<arg type=\"as\" name=\"uris\" direction=\"in\"/>"))
    }
}
