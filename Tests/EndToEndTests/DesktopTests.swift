import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import DesktopEntry
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A private session bus with an unlocked headless keyring, for one test:
/// `dbus-run-session` runs a script that starts gnome-keyring, publishes the
/// bus address in a file and waits for a stop file; then it stops the
/// keyring, and dbus-run-session stops the bus. Its socket is in `dir`.
final class PrivateSession: @unchecked Sendable {
    // Safe: owned and used by one test.
    let process: SpawnedProcess
    let address: String
    let dir: String
    private var stopped = false

    init(dir: String, environment: [String: String]) throws {
        self.dir = dir
        try writeSessionBusConfiguration(at: dir + "/session-bus.conf", socketDirectory: dir)
        // The keyring daemonizes away from dbus-run-session, which would leave
        // it running: the script stops it itself before it ends.
        let script = """
            printf '%s' test-keyring-pass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
            gdbus wait --session --timeout 10 org.freedesktop.secrets
            keyring=$(gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \\
              --method org.freedesktop.DBus.GetConnectionUnixProcessID org.freedesktop.secrets | tr -dc '0-9 ' | awk '{print $NF}')
            stop_keyring() {
              [ -n "$keyring" ] || return 0
              kill "$keyring" 2>/dev/null || return 0
              i=0; while kill -0 "$keyring" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
            }
            trap stop_keyring EXIT
            echo "$DBUS_SESSION_BUS_ADDRESS" > '\(dir)/bus.tmp' && mv '\(dir)/bus.tmp' '\(dir)/bus'
            while [ ! -e '\(dir)/stop' ]; do sleep 0.1; done
            """
        var env = environment
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        process = try SpawnedProcess(
            ["/usr/bin/dbus-run-session", "--config-file=\(dir)/session-bus.conf", "--", "/bin/sh", "-c", script],
            environment: env, log: dir + "/session.log")
        do {
            try waitUntil(20, "the private session bus") { FileManager.default.fileExists(atPath: dir + "/bus") }
            address = try String(contentsOfFile: dir + "/bus", encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines)
        } catch {
            _ = FileManager.default.createFile(atPath: dir + "/stop", contents: nil)
            if !process.waitForExit(10) { process.stop() }
            throw error
        }
    }

    deinit { stop() }

    /// `gdbus call` on the bus daemon; answers its output.
    func busCall(_ method: String, _ argument: String, environment: [String: String]) throws -> String {
        var env = environment
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        return try spawnAndWait(
            [
                "/usr/bin/gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus." + method, argument,
            ], environment: env
        ).stdout
    }

    /// Stops what the bus activated, then the keyring and the bus (the script
    /// ends, dbus-run-session stops the bus and exits). Idempotent.
    func stop() {
        if stopped { return }
        stopped = true
        // Services the bus started (the activated daemon) are the bus daemon's children.
        for bus in childProcesses(of: process.pid) where processName(bus) == "dbus-daemon" {
            for service in childProcesses(of: bus) { terminate(service) }
        }
        _ = FileManager.default.createFile(atPath: dir + "/stop", contents: nil)
        // Not SIGTERM at once: dbus-run-session killed by a signal leaves its bus running.
        if !process.waitForExit(15) { process.stop() }
    }
}

@Suite("Desktop integration end to end", .dedicatedThread)
struct DesktopTests {
    @Test func gioOpenActivatesTheStoppedDaemonOverDBusAndCompletesTheSignIn() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        let dataHome = h.dir + "/data-home"
        try FileManager.default.createDirectory(atPath: dataHome + "/dbus-1/services", withIntermediateDirectories: true)
        let service = """
            [D-BUS Service]
            Name=\(DesktopEntry.applicationId)
            Exec=\(binDirectory)/browser-login-broker --log-level debug

            """
        _ = FileManager.default.createFile(
            atPath: dataHome + "/dbus-1/services/\(DesktopEntry.applicationId).service", contents: Data(service.utf8))
        h.brokerEnvironment["XDG_DATA_HOME"] = dataHome
        let session = try PrivateSession(dir: h.dir, environment: h.environment())
        defer { session.stop() }
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = session.address

        // The URL handler, as a user installs it.
        let installed = try h.cli(["install-handler", "--scheme", "com.example.notes"])
        #expect(installed.status == 0, "\(installed.err)")

        // A first daemon starts the sign-in, then stops before the callback comes.
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let attemptId = try #require(attempt["attemptId"]?.stringValue)
        h.broker?.stop()
        #expect(try session.busCall("NameHasOwner", DesktopEntry.applicationId, environment: h.environment()).contains("false"))

        // The desktop hands the callback to the handler: D-Bus starts the daemon and calls Open.
        _ = try spawnAndWait(["/usr/bin/gio", "open", callback], environment: h.environment()).stdout
        try waitUntil(20, "the daemon to be activated on the bus") {
            try session.busCall("NameHasOwner", DesktopEntry.applicationId, environment: h.environment()).contains("true")
        }
        var signedIn = false
        try waitUntil(20, "the sign-in to complete") {
            let rpc = try h.rpc(timeout: .seconds(5))
            signedIn = try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn"
            return signedIn
        }
        let rpc = try h.rpc()
        let status = try rpc.call("login.status", params: ["attemptId": .string(attemptId), "reconcile": false])
        #expect(status["state"] == "completed")

        // The activated daemon logged the delivery without the callback URL.
        let pidText = try session.busCall("GetConnectionUnixProcessID", DesktopEntry.applicationId, environment: h.environment())
        let pid = Int32(pidText.filter(\.isNumber).dropFirst(pidText.hasPrefix("(uint32") ? 2 : 0)) ?? 0
        #expect(pid > 0)
        if pid > 0 { kill(pid, SIGTERM) }
        try waitUntil(10, "the activated daemon to stop") { pid <= 0 || kill(pid, 0) != 0 }
        let log = session.process.output
        #expect(log.contains("callback delivered over D-Bus"))
        #expect(!log.contains(callback))
        let code = try #require(URLComponents(string: callback)?.queryItems?.first { $0.name == "code" }?.value)
        #expect(!log.contains(code))
    }
}

/// `binDirectory` with symbolic links resolved (the handler's `Exec=` is the CLI's real path).
let resolvedBinDirectory = URL(fileURLWithPath: binDirectory).resolvingSymlinksInPath().path

@Suite("systemd and the desktop, end to end", .dedicatedThread)
struct SystemdDesktopTests {
    @Test func theFirstConnectionStartsTheSocketActivatedDaemonWhichReportsToSystemd() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        let socket = h.dir + "/a.sock"
        let notify = try NotifySocket(path: h.dir + "/notify")
        try h.startKeyringIfNeeded()
        var env = h.environment()
        env["NOTIFY_SOCKET"] = notify.path
        env["WATCHDOG_USEC"] = "200000"
        // No --socket and no path of its own: the daemon must take the socket from LISTEN_FDS.
        env["XDG_RUNTIME_DIR"] = h.dir + "/elsewhere"
        // systemd-socket-activate passes on only the variables named with -E.
        let passed = [
            "HOME", "PATH", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_DATA_DIRS", "BROWSER",
            "DBUS_SESSION_BUS_ADDRESS", "NOTIFY_SOCKET", "WATCHDOG_USEC",
        ].compactMap { name in env[name].map { "-E\(name)=\($0)" } }
        let activator = try Child(
            "/usr/bin/systemd-socket-activate",
            ["-l", socket, "--fdname=rpc"] + passed + [
                binDirectory + "/browser-login-broker", "--no-dbus", "--log-level", "debug",
            ],
            environment: env, log: h.brokerLog)
        h.broker = activator
        try waitUntil(10, "the activation socket") { FileManager.default.fileExists(atPath: socket) }
        usleep(300_000)
        // Nothing started yet: no database, and no message to the service manager.
        #expect(!FileManager.default.fileExists(atPath: h.databasePath))
        #expect(notify.receive() == nil)

        let rpc = try RPCClient(socketPath: socket, timeout: .seconds(20))
        let info = try rpc.call("broker.info")
        #expect(info["protocol"] == 1)
        #expect(FileManager.default.fileExists(atPath: h.databasePath))
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(activator.pid)/exe")
        #expect(exe.hasSuffix("/browser-login-broker"))

        var messages: [String] = []
        try waitUntil(10, "READY=1 and a watchdog ping") {
            if let m = notify.receive() { messages.append(m) }
            return messages.contains { $0.contains("READY=1") } && messages.contains("WATCHDOG=1")
        }
        let ready = try #require(messages.firstIndex { $0.contains("READY=1") })
        #expect(messages[..<ready].contains { $0.hasPrefix("STATUS=opening and migrating the state database") })
        #expect(messages[ready].contains("STATUS=serving 1 client(s)"))
        let signedOut = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(signedOut["status"] == "signedOut")
    }

    @Test func installHandlerIsIdempotentAndUninstallRemovesIt() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        try h.startBroker()
        let path = h.dir + "/data-home/applications/\(DesktopEntry.fileName)"
        let first = try h.cli(["install-handler"])
        #expect(first.status == 0, "\(first.err)")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.contains("MimeType=x-scheme-handler/com.example.notes;\n"))
        #expect(text.contains("Exec=\(resolvedBinDirectory)/browser-login finish %u\n"))
        let mimeapps = try String(contentsOfFile: h.dir + "/config/mimeapps.list", encoding: .utf8)
        #expect(mimeapps.contains("x-scheme-handler/com.example.notes=\(DesktopEntry.fileName)"))
        #expect(FileManager.default.fileExists(atPath: h.dir + "/data-home/applications/mimeinfo.cache"))

        let second = try h.cli(["install-handler"])
        #expect(second.status == 0)
        #expect(second.out.contains("is up to date"))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == text)
        #expect(try String(contentsOfFile: h.dir + "/config/mimeapps.list", encoding: .utf8) == mimeapps)
        let validate = try spawnAndWait(["/usr/bin/desktop-file-validate", path], environment: h.environment()).stdout
        #expect(validate.isEmpty, "\(validate)")

        let removed = try h.cli(["install-handler", "--uninstall"])
        #expect(removed.status == 0)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(!(try String(contentsOfFile: h.dir + "/config/mimeapps.list", encoding: .utf8)).contains(DesktopEntry.fileName))
    }

    @Test func aClientFileWithInstallHandlerRegistersTheSchemeAtStartUp() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient(extra: "InstallHandler=true")
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        try h.startBroker()
        let text = try String(
            contentsOfFile: h.dir + "/data-home/applications/\(DesktopEntry.fileName)", encoding: .utf8)
        #expect(text.contains("MimeType=x-scheme-handler/com.example.notes;\n"))
        #expect(text.contains("Exec=\(resolvedBinDirectory)/browser-login finish %u\n"))
    }

    @Test func aBrowserThatFailsAnswersBrowserFailedAndLeavesTheAttemptWaitingWithItsLink() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient(extra: "Browser=/nonexistent/browser %u")
        try h.startBroker()
        let rpc = try h.rpc()
        var attemptId: String?
        do {
            _ = try rpc.call("login.start", params: ["client": "com.example.notes"])
            Issue.record("login.start succeeded with a failing browser")
        } catch let error as RPCError {
            #expect(error.applicationCode == "BROWSER_FAILED")
            attemptId = error.data?["attemptId"]?.stringValue
        }
        let id = try #require(attemptId)
        let resumed = try rpc.call("login.resume", params: ["attemptId": .string(id), "openBrowser": false])
        #expect(resumed["state"] == "waiting")
        #expect(resumed["authorizeUrl"]?.stringValue?.hasPrefix(h.serverOrigin) == true)
        // The CLI prints the link to open by hand.
        _ = try rpc.call("login.cancel", params: ["attemptId": .string(id)])
        let cli = try h.cli(["start", "com.example.notes"])
        #expect(cli.status == 69)
        #expect(cli.err.contains("BROWSER_FAILED"))
        #expect(cli.out.contains("open this link in your browser to sign in:\n  \(h.serverOrigin)"))
    }

    @Test func doctorNamesEachProblemOfABrokenSetupWithTheCommandThatFixesIt() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        // A client whose server does not answer, and a file that is refused.
        h.writeClient(
            file: "mail.conf", id: "org.example.mail", appName: "Mail", returnURL: "org.example.mail:/callback")
        let mail = h.dir + "/config/browser-login/clients.d/mail.conf"
        let text = try String(contentsOfFile: mail, encoding: .utf8).replacingOccurrences(
            of: h.serverOrigin, with: "http://127.0.0.1:9")
        try Data(text.utf8).write(to: URL(fileURLWithPath: mail))
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/broken.conf", contents: Data("[Client]\nId=x\n".utf8))
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"

        // Broker not running: the finding says how to start it.
        let stopped = try h.cli(["doctor", "--json"])
        #expect(stopped.status == 1)
        let stoppedChecks = try checks(stopped.out)
        #expect(stoppedChecks["socket"]?["status"] == "problem")
        #expect(stoppedChecks["socket"]?["fix"]?.stringValue?.contains("browser-login-broker") == true)

        try h.startBroker()
        let result = try h.cli(["doctor", "--json"])
        #expect(result.status == 1)
        let found = try checks(result.out)
        #expect(found["socket"]?["status"] == "ok")
        #expect(found["session-bus"]?["status"] == "ok")
        #expect(found["secret-service"]?["status"] == "ok")
        #expect(found["keyring-unlocked"]?["status"] == "ok")
        #expect(found["client-files"]?["status"] == "problem")
        #expect(found["client-files"]?["message"]?.stringValue?.contains("broken.conf") == true)
        #expect(found["client-files"]?["fix"]?.stringValue?.contains("browser-login-broker --check-config") == true)
        #expect(found["handler:com.example.notes"]?["status"] == "problem")
        #expect(found["handler:com.example.notes"]?["fix"] == "browser-login install-handler")
        #expect(found["server:com.example.notes"]?["status"] == "ok")
        #expect(found["server:org.example.mail"]?["status"] == "problem")
        #expect(found["server:org.example.mail"]?["fix"]?.stringValue?.contains("mail.conf") == true)

        // The fixes work: after install-handler, the handler findings are gone.
        #expect(try h.cli(["install-handler"]).status == 0)
        let fixed = try checks(try h.cli(["doctor", "--json"]).out)
        #expect(fixed["handler:com.example.notes"]?["status"] == "ok")
        #expect(fixed["handler:org.example.mail"]?["status"] == "ok")

        // The text form prints each fix.
        let human = try h.cli(["doctor"])
        #expect(human.out.contains("problem client-files: "))
        #expect(human.out.contains("fix: "))
    }

    func checks(_ json: String) throws -> [String: JSONValue] {
        let value = try JSONValue.parse(json)
        var result: [String: JSONValue] = [:]
        for c in value.arrayValue ?? [] {
            if let name = c["check"]?.stringValue { result[name] = c }
        }
        return result
    }
}
