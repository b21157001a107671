import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import DesktopEntry
import Foundation
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// One finding of `browser-login doctor`: a check, how it went, one line
/// saying why, and (unless all is well) the one command that fixes it.
struct Finding: Sendable {
    enum Status: String, Sendable {
        case ok, warning, problem
    }

    var check: String
    var status: Status
    var message: String
    var fix: String?

    var json: JSONValue {
        [
            "check": .string(check), "status": .string(status.rawValue), "message": .string(message),
            "fix": fix.map { .string($0) } ?? .null,
        ]
    }
}

/// Runs `argv` (its program found on `PATH`) for at most `seconds`: nil when
/// the program is not installed or did not finish in time (it is then
/// killed). A bus or keyring that does not answer must never hang doctor;
/// its standard error is dropped, its standard output answered.
func runBounded(_ argv: [String], _ env: [String: String], seconds: Int = 8) -> (status: Int32, output: String)? {
    guard let program = Subprocess.findProgram(argv[0], environment: env) else { return nil }
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { return nil }
    let child = Subprocess.spawn(program: program, arguments: Array(argv.dropFirst()), environment: env, stdout: fds[1])
    close(fds[1])
    defer { close(fds[0]) }
    guard let child else { return nil }
    let deadline = ContinuousClock.now + .seconds(seconds)
    func millisecondsLeft() -> Int32 {
        let left = deadline - .now
        return left <= .zero ? 0 : Int32(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
    }
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    var finished = false
    while !finished {
        var descriptor = pollfd(fd: fds[0], events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, millisecondsLeft())
        if ready < 0 && errno == EINTR { continue }
        if ready <= 0 { break }
        let n = chunk.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { finished = true } else { output += chunk[..<n] }
    }
    // Standard output is closed (or time is up): the exit status, while time is left.
    while finished {
        if let status = child.poll() { return (status, String(decoding: output, as: UTF8.self)) }
        if millisecondsLeft() == 0 { break }
        usleep(10_000)
    }
    kill(child.pid, SIGKILL)
    _ = child.wait()
    return nil
}

/// `gdbus call` on the session bus, bounded (the call's own timeout, then ours).
func busCall(
    _ destination: String, _ path: String, _ method: String, _ arguments: [String] = [], _ env: [String: String]
) -> (status: Int32, output: String)? {
    runBounded(
        [
            "gdbus", "call", "--session", "--timeout", "5", "--dest", destination, "--object-path", path, "--method",
            method,
        ] + arguments, env)
}

/// Whether `name` has an owner on the session bus, or the bus can start one
/// (a `.service` file); nil when the bus does not answer.
func busNameState(_ name: String, _ env: [String: String]) -> (owned: Bool, activatable: Bool)? {
    let bus = ("org.freedesktop.DBus", "/org/freedesktop/DBus")
    guard let owned = busCall(bus.0, bus.1, "org.freedesktop.DBus.NameHasOwner", [name], env), owned.status == 0
    else { return nil }
    let activatable = busCall(bus.0, bus.1, "org.freedesktop.DBus.ListActivatableNames", [], env)
    return (owned.output.contains("true"), activatable?.output.contains("'\(name)'") ?? false)
}

/// What `browser-login doctor` found, in order: the broker, the session bus
/// and its names, the keyring, the client files, the URL handlers, xdg-open,
/// the default browser, and each server.
func doctorFindings(_ client: BrowserLoginClient) async -> [Finding] {
    let env = ProcessInfo.processInfo.environment
    var findings: [Finding] = []
    func add(_ check: String, _ status: Finding.Status, _ message: String, fix: String? = nil) {
        findings.append(Finding(check: check, status: status, message: message, fix: status == .ok ? nil : fix))
    }

    // The socket and the daemon.
    var info: BrokerInfo?
    let manager = runBounded(["systemctl", "--user", "is-system-running"], env, seconds: 3)?.output ?? ""
    let underSystemd = ["running", "degraded", "starting", "initializing", "maintenance"].contains {
        manager.hasPrefix($0)
    }
    let startFix =
        underSystemd ? "systemctl --user enable --now browser-login-broker.socket" : "browser-login-broker &"
    let restartFix = underSystemd ? "systemctl --user restart browser-login-broker.service" : "browser-login-broker &"
    if let path = client.socketPath {
        do {
            let answer: BrokerInfo = try await client.call(.brokerInfo, nil as ClientParams?, timeout: .seconds(10))
            info = answer
            add("socket", .ok, "browser-login-broker \(answer.version) answers at \(path)")
        } catch {
            // One statement of what is wrong, with the path once, and the fix that goes with it.
            if error.code == .brokerNotRunning {
                add("socket", .problem, "the broker is not running: nothing listens at \(path)", fix: startFix)
            } else {
                let message = error.message.contains(path) ? error.message : "the broker at \(path): \(error.message)"
                add("socket", .problem, message + " (a broker that is stuck must be restarted)", fix: restartFix)
            }
        }
    } else {
        add(
            "socket", .problem, "XDG_RUNTIME_DIR is not set, so the broker's socket cannot be found",
            fix: "export XDG_RUNTIME_DIR=/run/user/$(id -u)")
    }

    // The session bus, the broker's names and the Secret Service. With the
    // file vault (Vault=file: servers over SSH, minimal sessions) the
    // Secret Service is not used and a missing session bus costs only
    // D-Bus activation and the D-Bus API.
    let fileVault = info?.vault == "file"
    let busFix = "dbus-run-session -- $SHELL"
    let keyringFix = "gnome-keyring-daemon --start --components=secrets"
    if (env["DBUS_SESSION_BUS_ADDRESS"] ?? "").isEmpty && (env["XDG_RUNTIME_DIR"] ?? "").isEmpty {
        add(
            "session-bus", fileVault ? .warning : .problem,
            fileVault
                ? "no session bus (DBUS_SESSION_BUS_ADDRESS is not set): no D-Bus activation or D-Bus API; the file vault does not need one"
                : "no session bus (DBUS_SESSION_BUS_ADDRESS is not set): no keyring, no activation",
            fix: busFix)
    } else if let secrets = busNameState("org.freedesktop.secrets", env) {
        add("session-bus", .ok, "the session bus answers")
        for name in [DesktopEntry.applicationId, "org.browserlogin.Broker1"] {
            let state = busNameState(name, env) ?? (false, false)
            if state.owned {
                add("dbus-name:\(name)", .ok, "\(name) is owned on the session bus")
            } else if state.activatable {
                add("dbus-name:\(name)", .ok, "\(name) is activatable: the bus starts the broker on first use")
            } else if info != nil {
                add(
                    "dbus-name:\(name)", .problem,
                    "the broker runs but not on this session bus, so \(name) has no owner",
                    fix: underSystemd
                        ? "systemctl --user import-environment DBUS_SESSION_BUS_ADDRESS && systemctl --user restart browser-login-broker.service"
                        : "restart browser-login-broker from this session")
            } else {
                add(
                    "dbus-name:\(name)", .problem,
                    "\(name) has no owner and no D-Bus service file: the handler's D-Bus activation fails",
                    fix: startFix)
            }
        }
        if fileVault {
            add(
                "secret-service", .ok,
                "not needed: the broker keeps its secrets in the file vault (Vault=file in broker.conf)")
        } else if secrets.owned || secrets.activatable {
            let how = secrets.owned ? "is running" : "is activatable"
            add("secret-service", .ok, "the Secret Service (org.freedesktop.secrets) \(how)")
        } else {
            add("secret-service", .problem, "no Secret Service (org.freedesktop.secrets) on the session bus", fix: keyringFix)
        }
        if !fileVault && (secrets.owned || secrets.activatable) { findings += keyringFindings(env) }
    } else {
        add(
            "session-bus", fileVault ? .warning : .problem, "the session bus does not answer (or gdbus is not installed)",
            fix: busFix)
    }
    if let info, info.vault == "file" {
        // The detail says where the vault is and whether its key is in the kernel keyring.
        if info.vaultLocked {
            // Sealed with a passphrase, and not unlocked since the restart: nothing is lost.
            add(
                "vault", .warning, "the broker's file vault is locked. \(info.vaultDetail)",
                fix: "browser-login vault unlock  # docs/vault.md")
        } else if info.vaultAvailable {
            add("vault", .ok, "the broker keeps sessions in the file vault. \(info.vaultDetail)")
        } else {
            add(
                "vault", .problem, "the broker cannot use its file vault: \(info.vaultDetail)",
                fix: "keyctl show @u  # the broker's key must be readable there; see docs/operations.md, \"The file vault\"")
        }
    } else if let info {
        if info.vaultAvailable && !info.vaultLocked {
            add("vault", .ok, "the broker keeps sessions in the \(info.vault) vault")
        } else if info.vaultLocked {
            add("vault", .warning, "the broker finds its \(info.vault) vault locked", fix: unlockFix)
        } else {
            add("vault", .problem, "the broker cannot use its \(info.vault) vault: \(info.vaultDetail)", fix: keyringFix)
        }
    }

    // The client files (checked by the daemon binary itself).
    let brokerProgram = brokerExecutable(env)
    if let brokerProgram {
        if let result = runBounded([brokerProgram, "--check-config"], env, seconds: 20) {
            let lines = result.output.split(separator: "\n").map(String.init)
            let errors = lines.filter { $0.contains(": error: ") }
            if result.status == 0 {
                add("client-files", .ok, lines.last ?? "valid")
            } else {
                let files = Set(errors.compactMap { $0.split(separator: ":").first.map(String.init) }).sorted()
                add(
                    "client-files", .problem, errors.joined(separator: "; "),
                    fix: "${EDITOR:-vi} \(files.joined(separator: " ")) && browser-login-broker --check-config")
            }
        } else {
            add(
                "client-files", .problem, "browser-login-broker --check-config did not finish",
                fix: "browser-login-broker --check-config")
        }
    } else {
        add(
            "client-files", .problem, "browser-login-broker is not installed next to browser-login or on PATH",
            fix: "make install")
    }

    // The URL handler of each client's scheme, and the xdg-open that browsers hand it to.
    if info != nil, let schemes = try? await clientSchemes(client) {
        findings += handlerFindings(schemes, env)
        if !schemes.isEmpty { findings.append(xdgOpenFinding(schemes.map(\.scheme), env)) }
    } else if info == nil {
        add("handlers", .problem, "not checked: the clients' schemes come from the running broker", fix: startFix)
    }
    findings.append(defaultBrowserFinding(env))

    // Each server's reachability (probed by the daemon binary, which has the HTTP client).
    if let brokerProgram, let result = runBounded([brokerProgram, "--check-servers", "--json"], env, seconds: 60),
        let data = result.output.data(using: .utf8),
        let list = try? JSONSerialization.jsonObject(with: data) as? [[String: Any]]
    {
        for r in list {
            let client = r["client"] as? String ?? "?"
            let server = r["server"] as? String ?? "?"
            let file = r["file"] as? String ?? "the client file"
            let problem = r["problem"] as? String ?? "no answer"
            if let kind = r["protocol"] as? String, kind != "browser-login" {
                // An OAuth 2.0 / OpenID Connect provider: its metadata (docs/providers.md).
                if r["ok"] as? Bool == true {
                    add("server:\(client)", .ok, "\(server) publishes its \(kind) metadata")
                } else {
                    add(
                        "server:\(client)", .problem, "\(server): \(problem)",
                        fix: "check Issuer= (and the *Endpoint keys) in \(file); see docs/providers.md")
                }
            } else if r["ok"] as? Bool == true {
                add("server:\(client)", .ok, "\(server) speaks the protocol")
            } else {
                add(
                    "server:\(client)", .problem, "\(server): \(problem)",
                    fix:
                        "curl -sS -X POST -H 'Content-Type: application/json' -d '{}' \(server)/native/attempts/probe/status  # then fix Server= in \(file)"
                )
            }
        }
    }
    return findings
}

let unlockFix = "seahorse  # Passwords and Keys: right-click the default keyring, Unlock"

/// The Secret Service's default collection: there is one (else storing a
/// secret fails with "No such secret collection at path:
/// /org/freedesktop/secrets/aliases/default"), and it is unlocked.
func keyringFindings(_ env: [String: String]) -> [Finding] {
    let service = ("org.freedesktop.secrets", "/org/freedesktop/secrets")
    guard let alias = busCall(service.0, service.1, "org.freedesktop.Secret.Service.ReadAlias", ["default"], env),
        alias.status == 0
    else {
        return [
            Finding(
                check: "keyring-default", status: .problem, message: "the Secret Service does not answer ReadAlias",
                fix: "gnome-keyring-daemon --replace --components=secrets")
        ]
    }
    // "(objectpath '/org/freedesktop/secrets/collection/login',)"
    let path = alias.output.split(separator: "'").dropFirst().first.map(String.init) ?? "/"
    guard path != "/" else {
        return [
            Finding(
                check: "keyring-default", status: .problem,
                message:
                    "the keyring has no default collection: storing fails with \"No such secret collection at path: /org/freedesktop/secrets/aliases/default\"",
                fix: "seahorse  # Passwords and Keys: File > New > Password Keyring, then Set as Default")
        ]
    }
    var findings = [Finding(check: "keyring-default", status: .ok, message: "the default collection is \(path)")]
    let locked = busCall(
        service.0, path, "org.freedesktop.DBus.Properties.Get", ["org.freedesktop.Secret.Collection", "Locked"], env)
    switch locked {
    case let answer? where answer.status == 0 && answer.output.contains("false"):
        findings.append(Finding(check: "keyring-unlocked", status: .ok, message: "\(path) is unlocked"))
    case let answer? where answer.status == 0:
        findings.append(
            Finding(
                check: "keyring-unlocked", status: .problem,
                message: "\(path) is locked: the broker can neither read nor store sessions", fix: unlockFix))
    default:
        findings.append(
            Finding(
                check: "keyring-unlocked", status: .problem, message: "\(path) does not say whether it is locked",
                fix: "gnome-keyring-daemon --replace --components=secrets"))
    }
    return findings
}

/// Whether the broker's desktop file handles each scheme and is its default
/// (the `mimeapps.list` lookup of `xdg-mime query default`, DesktopSetup: the
/// check the broker makes before it picks a return URL).
func handlerFindings(_ schemes: [(client: String, scheme: String)], _ env: [String: String]) -> [Finding] {
    let installer = HandlerInstaller(environment: env)
    let installed = Set(installer.installedSchemes())
    let setup = DesktopSetup(environment: env)
    let fix = "browser-login install-handler"
    return schemes.map { client, scheme in
        let check = "handler:\(scheme)"
        let type = DesktopEntry.mimeType(scheme: scheme)
        guard installed.contains(scheme) else {
            return Finding(
                check: check, status: .problem,
                message: "\(installer.desktopFilePath) does not handle \(type) (client \(client))", fix: fix)
        }
        let handler = setup.defaultApplication(for: type) ?? ""
        guard handler == DesktopEntry.fileName else {
            let other = handler.isEmpty ? "no application" : handler
            return Finding(
                check: check, status: .problem,
                message: "\(type) opens \(other), not \(DesktopEntry.fileName): the callback never reaches the broker",
                fix: fix)
        }
        return Finding(check: check, status: .ok, message: "\(type) opens \(DesktopEntry.fileName)")
    }
}

/// xdg-utils before 1.2 (Debian 12 ships 1.1.3) decides that its argument
/// is a file unless it starts with `[[:alpha:]+.-]+:`: a scheme with a
/// digit (`app2:`) is taken for a file name and fails with "file does not
/// exist". Browsers that hand custom schemes to xdg-open (Chromium, Chrome)
/// then never deliver the callback. On GNOME, Cinnamon, MATE, Xfce, KDE and
/// Deepin xdg-open hands the URL to the desktop's opener first, which is right.
/// The version is read from the xdg-open script, as the broker reads it (DesktopSetup).
func xdgOpenFinding(_ schemes: [String], _ env: [String: String]) -> Finding {
    let check = "xdg-open"
    let setup = DesktopSetup(environment: env)
    guard Subprocess.findProgram("xdg-open", environment: env) != nil else {
        return Finding(
            check: check, status: .warning,
            message: "xdg-open is not installed: Chromium-based browsers hand custom schemes to it",
            fix: "sudo apt install xdg-utils")
    }
    let version = setup.xdgOpenVersion()
    let affected = schemes.filter { $0.contains(where: \.isNumber) }
    guard DesktopSetup.isOldXdgOpen(version), !affected.isEmpty else {
        return Finding(check: check, status: .ok, message: "xdg-open \(version ?? "?") opens the clients' schemes")
    }
    let list = affected.map { $0 + ":" }.joined(separator: " ")
    let message =
        "xdg-open \(version ?? "?") takes \(list) URLs for file names (a digit in the scheme): Chromium's callback fails"
        + " (clients that also list a loopback return URL sign in over loopback)"
    let fix = "upgrade xdg-utils to 1.2 or later (or open such URLs with 'gio open URL')"
    return Finding(
        check: check, status: setup.desktopOpensURLsItself() ? .warning : .problem, message: message, fix: fix)
}

/// The default browser is known, and not a Flatpak or Snap package: those
/// hand a custom scheme back to the desktop only through a portal or
/// snapd, which ask the user or fail in sessions without them. (The broker
/// then uses a client's loopback return URL, and opens a Flatpak browser
/// with `flatpak run`: docs/desktop.md.)
func defaultBrowserFinding(_ env: [String: String]) -> Finding {
    let check = "default-browser"
    let setFix = "xdg-settings set default-web-browser firefox-esr.desktop  # or another installed browser"
    guard let browser = DesktopSetup(environment: env).defaultBrowser() else {
        return Finding(
            check: check, status: .warning, message: "no default browser is set (xdg-settings, xdg-mime)", fix: setFix)
    }
    let id = browser.id
    if let sandbox = browser.sandboxWords {
        return Finding(
            check: check, status: .warning,
            message:
                "\(id) is \(sandbox): it hands the callback back only through the desktop portal (or snapd), which may ask or fail; clients with a loopback return URL use it instead",
            fix: setFix)
    }
    if browser.path == nil {
        return Finding(check: check, status: .ok, message: "the default browser is \(id) (its desktop file was not found)")
    }
    return Finding(check: check, status: .ok, message: "the default browser is \(id)")
}

let doctorCommand = Subcommand(
    "doctor", summary: "check the broker, the desktop and the servers; say how to fix what is wrong",
    options: [.flag("json", "print one JSON array of {check, status, message, fix}")],
    help: """
        Checks, in order: the broker's socket; the session bus, and that the
        names org.browserlogin.Broker and org.browserlogin.Broker1 have an
        owner or are activatable; the Secret Service, its default collection
        and that it is unlocked (not with the file vault, Vault=file in
        broker.conf, where a missing session bus is only a warning); the
        broker's vault (which one; for the file vault, whether its key is in
        the kernel user keyring); the client files; for each
        client's custom scheme, that the broker's desktop file is the default
        handler (xdg-mime query default); that xdg-open handles the schemes
        (xdg-utils 1.1.3 takes a scheme with a digit for a file); that the
        default browser is known and not a Flatpak or Snap; each server.

        Each finding is ok, warning or problem, with a one-line message and
        the command that fixes it. Every command waits at most a few seconds:
        a bus or keyring that does not answer is a problem, never a hang.
        Exit status 0 when there is no problem (warnings allowed), 1 otherwise.
        """,
    run: { args, broker in
        let findings = await doctorFindings(broker)
        let problems = findings.filter { $0.status == .problem }.count
        let warnings = findings.filter { $0.status == .warning }.count
        if args.has("json") {
            printJSON(.array(findings.map(\.json)))
        } else {
            for f in findings {
                print(f.status.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0) + f.check + ": " + f.message)
                if let fix = f.fix { print("        fix: " + fix) }
            }
            print(problems == 0 && warnings == 0 ? "\nno problems found" : "\n\(problems) problem(s), \(warnings) warning(s)")
        }
        return problems == 0 ? .ok : .failure
    })
