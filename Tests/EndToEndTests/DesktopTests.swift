import BrokerRPC
import BrowserLoginProtocol
import DesktopEntry
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A private session bus with an unlocked headless keyring, for one test:
/// `dbus-run-session` runs a script that starts gnome-keyring, publishes the
/// bus address in a file and waits for a stop file.
final class PrivateSession: @unchecked Sendable {
    // Safe: owned and used by one test.
    let process: SpawnedProcess
    let address: String
    let dir: String

    init(dir: String, environment: [String: String]) throws {
        self.dir = dir
        let script = """
            printf '%s' test-keyring-pass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
            gdbus wait --session --timeout 10 org.freedesktop.secrets
            echo "$DBUS_SESSION_BUS_ADDRESS" > '\(dir)/bus.tmp' && mv '\(dir)/bus.tmp' '\(dir)/bus'
            while [ ! -e '\(dir)/stop' ]; do sleep 0.1; done
            """
        var env = environment
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        process = try SpawnedProcess(
            ["/usr/bin/dbus-run-session", "--", "/bin/sh", "-c", script], environment: env, log: dir + "/session.log")
        try waitUntil(20, "the private session bus") { FileManager.default.fileExists(atPath: dir + "/bus") }
        address = try String(contentsOfFile: dir + "/bus", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `gdbus call` on the bus daemon; answers its output.
    func busCall(_ method: String, _ argument: String, environment: [String: String]) throws -> String {
        var env = environment
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        return try spawnAndWait(
            [
                "/usr/bin/gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus." + method, argument,
            ], environment: env)
    }

    func stop() {
        _ = FileManager.default.createFile(atPath: dir + "/stop", contents: nil)
        process.stop()
    }
}

@Suite("Desktop integration end to end")
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
        _ = try spawnAndWait(["/usr/bin/gio", "open", callback], environment: h.environment())
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
