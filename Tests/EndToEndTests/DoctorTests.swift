import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import DesktopEntry
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `browser-login doctor` against real parts: the broker on a private
/// session bus with a headless gnome-keyring, xdg-mime and xdg-settings on
/// temporary XDG directories, and keyrings broken the ways users' are.
@Suite("browser-login doctor, end to end", .dedicatedThread)
struct DoctorTests {
    /// Every check a healthy desktop with one custom-scheme client reports.
    static let allChecks = [
        "socket", "session-bus", "dbus-name:org.browserlogin.Broker", "dbus-name:org.browserlogin.Broker1",
        "secret-service", "keyring-default", "keyring-unlocked", "vault", "client-files",
        "handler:com.example.notes", "xdg-open", "default-browser", "server:com.example.notes",
    ]

    @Test func aHealthyDesktopIsAllOkThenAnotherHandlerIsAProblemAndAFlatpakBrowserAWarning() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        h.brokerEnvironment["BROWSER"] = ""
        try installApplication(h, "test-browser.desktop", exec: "/bin/true %u", types: ["http", "https"])
        try xdgMime(h, ["default", "test-browser.desktop", "x-scheme-handler/http", "x-scheme-handler/https"])
        try h.startBroker()
        #expect(try h.cli(["install-handler"]).status == 0)

        let healthy = try h.cli(["doctor", "--json"])
        let findings = try parse(healthy.out)
        #expect(healthy.status == 0, "\(healthy.out)")
        #expect(findings.map(\.check) == Self.allChecks)
        for f in findings {
            #expect(f.status == "ok", "\(f)")
            #expect(!f.message.isEmpty && !f.message.contains("\n"), "\(f)")
            #expect(f.fix == nil, "\(f)")
        }
        #expect(try h.cli(["doctor"]).out.hasSuffix("no problems found\n"))

        // Another application takes the scheme: a problem, fixed by install-handler.
        try installApplication(h, "other.desktop", exec: "/bin/true %u", types: ["com.example.notes"])
        try xdgMime(h, ["default", "other.desktop", "x-scheme-handler/com.example.notes"])
        let taken = try h.cli(["doctor", "--json"])
        #expect(taken.status == 1)
        let handler = try #require(try parse(taken.out).first { $0.check == "handler:com.example.notes" })
        #expect(handler.status == "problem")
        #expect(handler.message.contains("other.desktop"), "\(handler)")
        #expect(handler.fix == "browser-login install-handler")
        let text = try h.cli(["doctor"])
        #expect(text.out.contains("problem handler:com.example.notes: "), "\(text.out)")
        #expect(text.out.contains("        fix: browser-login install-handler\n"), "\(text.out)")
        #expect(try h.cli(["install-handler"]).status == 0)
        #expect(try h.cli(["doctor", "--json"]).status == 0)

        // A Flatpak browser as the default: a warning with its reason; warnings exit 0.
        // (xdg-mime skips a default whose program is not installed: a stand-in `flatpak`.)
        try FileManager.default.createDirectory(atPath: h.dir + "/bin", withIntermediateDirectories: true)
        try Data("#!/bin/sh\nexit 0\n".utf8).write(to: URL(fileURLWithPath: h.dir + "/bin/flatpak"))
        chmod(h.dir + "/bin/flatpak", 0o755)
        h.brokerEnvironment["PATH"] = h.dir + "/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        try installApplication(
            h, "org.mozilla.firefox.desktop",
            exec: "flatpak run --branch=stable --arch=x86_64 --command=firefox org.mozilla.firefox @@u %u @@",
            types: ["http", "https"])
        try xdgMime(
            h, ["default", "org.mozilla.firefox.desktop", "x-scheme-handler/http", "x-scheme-handler/https"])
        let flatpak = try h.cli(["doctor", "--json"])
        #expect(flatpak.status == 0, "a warning is not a problem: \(flatpak.out)")
        let browser = try #require(try parse(flatpak.out).first { $0.check == "default-browser" })
        #expect(browser.status == "warning")
        #expect(browser.message.contains("org.mozilla.firefox.desktop is a Flatpak"), "\(browser)")
        #expect(browser.fix?.contains("xdg-settings set default-web-browser") == true, "\(browser)")
    }

    @Test func aLockedKeyringAndAStoppedBrokerAreProblemsWithTheirFixes() throws {
        let h = try Harness()
        defer { h.stopAll() }
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        try h.startKeyringIfNeeded()
        let keyring = try #require(h.keyring)
        try keyring.lock()

        let result = try h.cli(["doctor", "--json"])
        #expect(result.status == 1)
        let found = Dictionary(uniqueKeysWithValues: try parse(result.out).map { ($0.check, $0) })
        let socket = try #require(found["socket"])
        #expect(socket.status == "problem")
        // Said once, with the path once, and a fix that starts what the message says is not running.
        #expect(socket.message.hasPrefix("the broker is not running: nothing listens at "), "\(socket)")
        #expect(socket.message.components(separatedBy: "broker.sock").count == 2, "\(socket)")
        #expect(socket.fix?.contains("browser-login-broker") == true, "\(socket)")
        // The bus cannot start the broker (no service files on this bus).
        #expect(found["dbus-name:org.browserlogin.Broker1"]?.status == "problem")
        #expect(found["keyring-default"]?.status == "ok")
        let locked = try #require(found["keyring-unlocked"])
        #expect(locked.status == "problem")
        #expect(locked.message.contains("/org/freedesktop/secrets/collection/login is locked"), "\(locked)")
        #expect(locked.fix?.contains("Unlock") == true, "\(locked)")
        #expect(found["handlers"]?.status == "problem")
    }

    @Test func aKeyringWithoutADefaultCollectionIsAProblem() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let keyring = try BareKeyring(dir: h.dir + "/bare")
        defer { keyring.stop() }
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = keyring.address
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"

        let result = try h.cli(["doctor", "--json"])
        #expect(result.status == 1)
        let found = Dictionary(uniqueKeysWithValues: try parse(result.out).map { ($0.check, $0) })
        #expect(found["secret-service"]?.status == "ok")
        let missing = try #require(found["keyring-default"])
        #expect(missing.status == "problem")
        #expect(missing.message.contains("No such secret collection"), "\(missing)")
        #expect(missing.fix?.contains("seahorse") == true, "\(missing)")
        #expect(found["keyring-unlocked"] == nil, "nothing to unlock")
    }

    @Test func xdgOpenBefore12IsFoundWhenASchemeHasADigitAndItReallyFails() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient(returnURL: "org.example.app2:/callback")
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        for name in ["XDG_CURRENT_DESKTOP", "DESKTOP_SESSION", "KDE_FULL_SESSION", "GNOME_DESKTOP_SESSION_ID"] {
            h.brokerEnvironment[name] = ""
        }
        try h.startBroker()
        #expect(try h.cli(["install-handler"]).status == 0)
        let version = try runProgram("/usr/bin/xdg-open", ["--version"], environment: h.environment()).out
        let numbers = version.split(separator: " ").last?.split(separator: ".").compactMap { Int($0) } ?? []
        let old = numbers.count >= 2 && (numbers[0], numbers[1]) < (1, 2)

        let finding = try #require(try parse(try h.cli(["doctor", "--json"]).out).first { $0.check == "xdg-open" })
        guard old else {
            #expect(finding.status == "ok", "\(version): \(finding)")
            return
        }
        #expect(finding.status == "problem", "\(finding)")
        #expect(finding.message.contains("org.example.app2:"), "\(finding)")
        #expect(finding.fix?.contains("xdg-utils to 1.2") == true, "\(finding)")
        // What the finding says is what happens: xdg-open takes the URL for a file.
        let opened = try runProgram(
            "/usr/bin/xdg-open", ["org.example.app2:/callback"], environment: h.environment(), timeout: 20)
        #expect(opened.status != 0)
        #expect(opened.err.contains("does not exist"), "\(opened)")
        // On GNOME xdg-open hands URLs to gio first: only a warning.
        h.brokerEnvironment["XDG_CURRENT_DESKTOP"] = "GNOME"
        let gnome = try #require(try parse(try h.cli(["doctor", "--json"]).out).first { $0.check == "xdg-open" })
        #expect(gnome.status == "warning", "\(gnome)")
    }

    @Test func aSessionBusThatNeverAnswersIsAProblemNotAHang() throws {
        let h = try Harness()
        defer { h.stopAll() }
        // A socket that listens and never accepts: connecting works, nothing answers.
        let path = h.dir + "/run/silent-bus"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (i, byte) in path.utf8.enumerated() { buffer[i] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0 && listen(fd, 64) == 0)
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=" + path
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"

        let started = ContinuousClock.now
        let result = try h.cli(["doctor", "--json"])
        #expect(ContinuousClock.now - started < .seconds(90))
        #expect(result.status == 1)
        let bus = try #require(try parse(result.out).first { $0.check == "session-bus" })
        #expect(bus.status == "problem")
        #expect(bus.message.contains("does not answer"), "\(bus)")
    }

    // MARK: Helpers

    struct Finding: CustomStringConvertible {
        var check: String
        var status: String
        var message: String
        var fix: String?
        var description: String { "\(check) \(status): \(message) / fix: \(fix ?? "-")" }
    }

    /// `doctor --json`: one array of objects with exactly check, status, message and fix.
    func parse(_ json: String) throws -> [Finding] {
        let value = try JSONValue.parse(json)
        let list = try #require(value.arrayValue, "not an array: \(json)")
        return try list.map { item in
            let object = try #require(item.objectValue, "\(item)")
            #expect(Set(object.keys) == ["check", "status", "message", "fix"], "\(item)")
            #expect(["ok", "warning", "problem"].contains(object["status"]?.stringValue ?? ""), "\(item)")
            return Finding(
                check: object["check"]?.stringValue ?? "", status: object["status"]?.stringValue ?? "",
                message: object["message"]?.stringValue ?? "", fix: object["fix"]?.stringValue)
        }
    }

    /// A desktop file in the harness's `$XDG_DATA_HOME/applications`.
    func installApplication(_ h: Harness, _ name: String, exec: String, types: [String]) throws {
        let dir = h.dir + "/data-home/applications"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let mime = types.map { "x-scheme-handler/\($0);" }.joined()
        let text = "[Desktop Entry]\nType=Application\nName=\(name)\nExec=\(exec)\nMimeType=\(mime)\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: dir + "/" + name))
    }

    func xdgMime(_ h: Harness, _ args: [String]) throws {
        let result = try runProgram("/usr/bin/xdg-mime", args, environment: h.environment(), timeout: 20)
        #expect(result.status == 0, "xdg-mime \(args): \(result.err)")
    }
}

/// A dbus-daemon and a gnome-keyring started with a fresh data directory and
/// no password: nothing creates the `login` collection, so the Secret
/// Service has no default collection (`ReadAlias("default")` answers "/").
final class BareKeyring: @unchecked Sendable {
    // Safe: owned and stopped by one test.
    let address: String
    let busPid: Int32
    var keyringPid: Int32 = 0
    private var stopped = false

    init(dir: String) throws {
        for sub in ["run", "data"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        chmod(dir + "/run", 0o700)
        try writeSessionBusConfiguration(at: dir + "/bus.conf", socketDirectory: dir + "/run", services: false)
        let launch = try runWithEnvironment(
            "/usr/bin/dbus-daemon", ["--config-file=\(dir)/bus.conf", "--fork", "--print-address=1", "--print-pid=1"],
            env: [:])
        let lines = launch.split(separator: "\n").map(String.init)
        guard lines.count >= 2, let pid = Int32(lines[1]) else { throw HarnessError("dbus-daemon did not start: \(launch)") }
        address = lines[0]
        busPid = pid
        do {
            let owner = try runWithEnvironment(
                "/bin/sh",
                [
                    "-c",
                    """
                    gnome-keyring-daemon --daemonize --components=secrets </dev/null >/dev/null
                    gdbus wait --session --timeout 10 org.freedesktop.secrets
                    gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
                      --method org.freedesktop.DBus.GetConnectionUnixProcessID org.freedesktop.secrets
                    """,
                ],
                env: [
                    "DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": dir + "/run", "XDG_DATA_HOME": dir + "/data",
                ])
            keyringPid = Int32(owner.split(whereSeparator: { !$0.isNumber }).last ?? "") ?? 0
            guard keyringPid > 0 else { throw HarnessError("gnome-keyring did not start: \(owner)") }
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    func stop() {
        if stopped { return }
        stopped = true
        terminate(keyringPid)
        terminate(busPid)
    }
}
