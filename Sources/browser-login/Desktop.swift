import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import DesktopEntry
import Foundation
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// This program's absolute path (the URL handler the desktop file runs).
func ownExecutable() -> String { ProcFS.executable() ?? CommandLine.arguments[0] }

/// The daemon binary: `$BROWSER_LOGIN_BROKER`, else next to this program, else on `PATH`.
func brokerExecutable(_ env: [String: String]) -> String? {
    if let path = env["BROWSER_LOGIN_BROKER"], !path.isEmpty { return path }
    let sibling = URL(fileURLWithPath: ownExecutable()).deletingLastPathComponent()
        .appendingPathComponent("browser-login-broker").path
    if FileManager.default.isExecutableFile(atPath: sibling) { return sibling }
    return Subprocess.findProgram("browser-login-broker", environment: env)
}

/// The schemes of the broker's clients (the scheme of each `returnUrl`). A
/// loopback redirect (`http://127.0.0.1/…`, docs/providers.md) needs no URL
/// handler: the broker listens for it itself.
func clientSchemes(_ broker: BrowserLoginClient) async throws -> [(client: String, scheme: String)] {
    let list = try await broker.clients()
    return list.compactMap { c in
        DesktopEntry.scheme(ofURL: c.returnUrl).flatMap { $0 == "http" || $0 == "https" ? nil : (c.id, $0) }
    }
}

let installHandlerCommand = Subcommand(
    "install-handler", summary: "register the URL handler for the clients' schemes",
    options: [
        .value("scheme", "SCHEME", "register this scheme (repeatable) instead of asking the broker", repeatable: true),
        .flag("uninstall", "remove the desktop file and its defaults from mimeapps.list"),
        .flag("json", "print {\"steps\": [...], \"problems\": [...], \"schemes\": [...]}"),
    ],
    help: """
        Writes $XDG_DATA_HOME/applications/\(DesktopEntry.fileName), the desktop
        file that makes the browser hand each client's return URL back to the broker
        (MimeType=x-scheme-handler/SCHEME; DBusActivatable=true, so desktops call the
        broker's org.freedesktop.Application.Open; Exec= runs 'browser-login finish %u'
        elsewhere). Then runs update-desktop-database on that directory, when it is
        installed, and 'xdg-mime default \(DesktopEntry.fileName)
        x-scheme-handler/SCHEME' for each scheme. Running it again changes nothing;
        schemes already in the file are kept.

        Without --scheme, the schemes come from the broker's clients (clients.list),
        so the broker must be running.
        """,
    run: { args, broker in
        let env = ProcessInfo.processInfo.environment
        let installer = HandlerInstaller(environment: env)
        let report: HandlerInstaller.Report
        if args.has("uninstall") {
            report = installer.uninstall()
        } else {
            var schemes = args.all("scheme")
            for scheme in schemes where !DesktopEntry.isValidScheme(scheme) {
                throw CLIError(
                    "USAGE", "'\(scheme)' is not a URL scheme (lower-case letters, digits, '+', '-', '.')", .usage)
            }
            if schemes.isEmpty {
                schemes = try await clientSchemes(broker).map(\.scheme)
                if schemes.isEmpty {
                    throw CLIError(
                        "NO_SCHEMES",
                        "the broker has no clients, so there is no scheme to register; add a client file or pass --scheme",
                        .config)
                }
            }
            report = installer.install(schemes: schemes, exec: ownExecutable())
        }
        if args.has("json") {
            printJSON([
                "steps": .array(report.steps.map { .string($0) }),
                "problems": .array(report.problems.map { .string($0) }),
                "schemes": .array(report.schemes.map { .string($0) }),
            ])
            return report.problems.isEmpty ? .ok : .failure
        }
        for step in report.steps { print(step) }
        for problem in report.problems { writeError(problem) }
        if !args.has("uninstall") { print("handles: " + report.schemes.map { $0 + ":" }.joined(separator: " ")) }
        return report.problems.isEmpty ? .ok : .failure
    })

/// One check of `browser-login doctor`.
struct Finding: Sendable {
    var check: String
    var ok: Bool
    var detail: String
    /// The exact command that fixes it (when not ok).
    var fix: String?

    var json: JSONValue {
        [
            "check": .string(check), "ok": .bool(ok), "detail": .string(detail),
            "fix": fix.map { .string($0) } ?? .null,
        ]
    }
}

func busNameQuery(_ method: String, _ argument: String?, _ env: [String: String]) -> String? {
    var argv = [
        "gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
        "--method", "org.freedesktop.DBus." + method,
    ]
    if let argument { argv.append(argument) }
    guard let result = Subprocess.run(argv, environment: env), result.status == 0 else { return nil }
    return result.output
}

func doctorFindings(_ client: BrowserLoginClient) async -> [Finding] {
    let env = ProcessInfo.processInfo.environment
    var findings: [Finding] = []
    func pass(_ check: String, _ detail: String) { findings.append(Finding(check: check, ok: true, detail: detail)) }
    func fail(_ check: String, _ detail: String, fix: String) {
        findings.append(Finding(check: check, ok: false, detail: detail, fix: fix))
    }

    // The socket and the daemon.
    var broker: BrowserLoginClient?
    var info: BrokerInfo?
    let startFix =
        env["INVOCATION_ID"] == nil
            && Subprocess.run(["systemctl", "--user", "is-system-running"], environment: env)?.status == nil
        ? "browser-login-broker &" : "systemctl --user enable --now browser-login-broker.socket"
    if let path = client.socketPath {
        do {
            info = try await client.info()
            broker = client
            pass("daemon", "browser-login-broker \(info?.version ?? "?") answers at \(path)")
        } catch {
            fail("daemon", "nothing answers at \(path): the broker is not running", fix: startFix)
        }
    } else {
        fail(
            "socket", "XDG_RUNTIME_DIR is not set, so the broker's socket cannot be found; pass --socket PATH",
            fix: "export XDG_RUNTIME_DIR=/run/user/$(id -u)")
    }

    // The session bus and the Secret Service.
    let (keyringFix, busFix) = ("gnome-keyring-daemon --start --components=secrets", "dbus-run-session -- $SHELL")
    if (env["DBUS_SESSION_BUS_ADDRESS"] ?? "").isEmpty {
        let why = "DBUS_SESSION_BUS_ADDRESS is not set: no session bus, so no keyring and no D-Bus activation"
        fail("session-bus", why, fix: busFix)
    } else if let owned = busNameQuery("NameHasOwner", "org.freedesktop.secrets", env) {
        pass("session-bus", "the session bus answers")
        let activatable = busNameQuery("ListActivatableNames", nil, env)?.contains("'org.freedesktop.secrets'") ?? false
        if owned.contains("true") || activatable {
            pass(
                "secret-service",
                owned.contains("true") ? "org.freedesktop.secrets is running" : "org.freedesktop.secrets is activatable")
        } else {
            fail("secret-service", "no Secret Service (org.freedesktop.secrets) on the session bus", fix: keyringFix)
        }
    } else {
        fail("session-bus", "the session bus does not answer (or gdbus is not installed)", fix: busFix)
    }
    if let info {
        if info.vaultLocked {
            fail(
                "keyring-unlocked", "the keyring is locked",
                fix:
                    "gdbus call --session --dest org.freedesktop.secrets --object-path /org/freedesktop/secrets --method org.freedesktop.Secret.Service.Unlock \"['/org/freedesktop/secrets/collection/login']\""
            )
        } else if info.vaultAvailable {
            pass("keyring-unlocked", "the broker can use the keyring")
        } else {
            fail("keyring-unlocked", "the broker cannot use the keyring: \(info.vaultDetail)", fix: keyringFix)
        }
    }

    // The client files (checked by the daemon binary itself).
    let brokerProgram = brokerExecutable(env)
    if let brokerProgram {
        let result = Subprocess.run(program: brokerProgram, arguments: ["--check-config"], environment: env)
        let lines = result.output.split(separator: "\n").map(String.init)
        let errors = lines.filter { $0.contains(": error: ") }
        if result.status == 0 {
            pass("client-files", lines.last ?? "valid")
        } else {
            let files = Set(errors.compactMap { $0.split(separator: ":").first.map(String.init) }).sorted()
            fail(
                "client-files", errors.joined(separator: "\n"),
                fix: "${EDITOR:-vi} \(files.joined(separator: " ")) && browser-login-broker --check-config")
        }
    } else {
        fail(
            "client-files", "browser-login-broker is not installed next to browser-login or on PATH", fix: "make install")
    }

    // The URL handler of each client's scheme.
    if let broker, let schemes = try? await clientSchemes(broker) {
        let installer = HandlerInstaller(environment: env)
        let installed = Set(installer.installedSchemes())
        for (client, scheme) in schemes {
            let type = DesktopEntry.mimeType(scheme: scheme)
            let answer = Subprocess.run(["xdg-mime", "query", "default", type], environment: env)
            let handler = answer?.output.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            if !installed.contains(scheme) {
                fail(
                    "handler:\(scheme)", "\(installer.desktopFilePath) does not handle \(type) (client \(client))",
                    fix: "browser-login install-handler")
            } else if answer != nil && handler != DesktopEntry.fileName {
                fail(
                    "handler:\(scheme)",
                    "the default handler of \(type) is '\(handler.isEmpty ? "none" : handler)', not \(DesktopEntry.fileName)",
                    fix: "xdg-mime default \(DesktopEntry.fileName) \(type)")
            } else {
                pass("handler:\(scheme)", "\(type) opens \(DesktopEntry.fileName)")
            }
        }
    } else if broker == nil {
        fail("handlers", "not checked: the clients' schemes come from the running broker", fix: startFix)
    }

    // Each server's reachability (probed by the daemon binary, which has the HTTP client).
    if let brokerProgram {
        let result = Subprocess.run(program: brokerProgram, arguments: ["--check-servers", "--json"], environment: env)
        if let data = result.output.data(using: .utf8),
            let list = try? JSONSerialization.jsonObject(with: data) as? [[String: Any]]
        {
            for r in list {
                let client = r["client"] as? String ?? "?"
                let server = r["server"] as? String ?? "?"
                let file = r["file"] as? String ?? "the client file"
                if let kind = r["protocol"] as? String, kind != "browser-login" {
                    // An OAuth 2.0 / OpenID Connect provider: its metadata (docs/providers.md).
                    if r["ok"] as? Bool == true {
                        pass("server:\(client)", "\(server) publishes its \(kind) metadata")
                    } else {
                        fail(
                            "server:\(client)", "\(server): \(r["problem"] as? String ?? "no answer")",
                            fix: "check Issuer= (and the *Endpoint keys) in \(file); see docs/providers.md")
                    }
                } else if r["ok"] as? Bool == true {
                    pass("server:\(client)", "\(server) speaks the protocol")
                } else {
                    fail(
                        "server:\(client)", "\(server): \(r["problem"] as? String ?? "no answer")",
                        fix:
                            "curl -sS -X POST -H 'Content-Type: application/json' -d '{}' \(server)/native/attempts/probe/status  # then fix Server= in \(r["file"] as? String ?? "the client file")"
                    )
                }
            }
        }
    }
    return findings
}

let doctorCommand = Subcommand(
    "doctor", summary: "check the broker, the desktop and the servers; say how to fix what is wrong",
    options: [.flag("json", "print {\"ok\": BOOL, \"checks\": [{check, ok, detail, fix}]}")],
    help: """
        Checks, in order: the broker's socket and daemon; the session bus; the
        Secret Service (present, and unlocked for the broker); the client files;
        the URL handler of each client's scheme (desktop file and xdg-mime
        default; not for loopback redirects, which need none); each login
        server's reachability (it must answer a status request with a protocol
        error), or each OAuth 2.0 / OpenID Connect provider's metadata. Each
        problem is printed with the exact command that fixes it. Exit status 0
        when everything is right, 1 otherwise.
        """,
    run: { args, broker in
        let findings = await doctorFindings(broker)
        let ok = findings.allSatisfy(\.ok)
        if args.has("json") {
            printJSON(["ok": .bool(ok), "checks": .array(findings.map(\.json))])
        } else {
            for f in findings {
                print((f.ok ? "ok    " : "FAIL  ") + f.check + ": " + f.detail.replacingOccurrences(of: "\n", with: "\n      "))
                if let fix = f.fix, !f.ok { print("      fix: " + fix) }
            }
            print(ok ? "\nno problems found" : "\n\(findings.filter { !$0.ok }.count) problem(s) found")
        }
        return ok ? .ok : .failure
    })
