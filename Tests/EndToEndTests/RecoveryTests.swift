import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Crashes and reconciliation (docs/protocol.md §7): an exchange whose answer was
/// lost is never retried; it is settled with the server.
@Suite("Crash recovery and reconciliation", .dedicatedThread)
struct RecoveryTests {
    /// Delivers the callback with the CLI in the background and kills the
    /// broker with SIGKILL once the attempt is `exchanging` (the server holds
    /// its answer back), before the answer arrives.
    func crashWhileExchanging(_ h: Harness) throws -> String {
        let (attempt, callback) = try h.startAndAuthorize()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let finisher = try SpawnedProcess(
            [binDirectory + "/browser-login", "--socket", h.socketPath, "finish", callback],
            environment: ProcessInfo.processInfo.environment, log: "/dev/null")
        // Reaped below; killed only when the test fails before that.
        defer { finisher.stop(SIGKILL) }
        let rpc = try h.rpc()
        try waitUntil(10, "the attempt to be exchanging") {
            try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])["state"] == "exchanging"
        }
        // "Exchanging" is committed before the request is sent: wait for the server's commit (its
        // answer is held back by the test delay), so the answer is lost however slow the machine is.
        let serverDatabase = h.dir + "/server/server.sqlite"
        if FileManager.default.fileExists(atPath: serverDatabase) {
            try waitUntil(30, "the server to commit the exchange") {
                let count = try runProgram(
                    "/usr/bin/sqlite3",
                    ["-readonly", serverDatabase, "SELECT count(*) FROM attempts WHERE state = 'completed'"], timeout: 10)
                return count.out.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
            }
        }
        h.broker?.stop(SIGKILL)
        finisher.reap()
        return id
    }

    @Test func aLostExchangeAnswerIsRevokedThenAcknowledged() throws {
        let h = try Harness()
        try h.startServer(exchangeDelayMs: 2500)
        h.writeClient()
        try h.startBroker()
        let id = try crashWhileExchanging(h)
        // Wait until the server has committed the exchange, then stop it: the
        // restarted broker finds the attempt uncertain and cannot reconcile yet.
        usleep(3_000_000)
        h.stopServer()
        try h.startBroker()
        let rpc = try h.rpc()
        let uncertain = try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": true])
        #expect(uncertain["state"] == "uncertain")
        #expect(uncertain["reconciled"] == false)
        #expect(try errorCode(rpc, "login.acknowledge", ["attemptId": .string(id)]) == "ACK_NOT_RECONCILED")
        let table = try h.cli(["status"])
        #expect(table.out.contains("uncertain"))
        #expect(table.out.contains(id))

        // The server is back: reconciliation finds a completed attempt whose
        // session the vault does not hold, revokes it by proof, and retires the
        // attempt on its own (§7): nothing is left for anyone to acknowledge.
        try h.launchServer()
        let settled = try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": true])
        #expect(settled["state"] == "acknowledged")
        #expect(settled["reconciled"] == true)
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
        try waitUntil(10, "the proofs to leave the keyring") {
            h.keyringLookup(["kind": "attempt", "client": "com.example.notes", "attempt": id]) == nil
        }
        #expect(!(try h.cli(["status"]).out.contains(id)))
        // Acknowledging it again is harmless.
        let acked = try h.cli(["acknowledge", id])
        #expect(acked.status == 0, "\(acked.err)")
    }

    @Test func aSessionInTheVaultIsVerifiedAndAdoptedAfterACrash() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "after-session-in-vault"
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let id = try #require(attempt["attemptId"]?.stringValue)
        _ = try? h.cli(["finish", callback])
        try waitUntil(10, "the broker to die at the fault point") { h.broker?.isRunning == false }
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = nil
        try h.startBroker()
        let rpc = try h.rpc()
        try waitUntil(15, "the attempt to be adopted") {
            try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": true])["state"] == "completed"
        }
        let session = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"]?.stringValue == h.testEmail)
    }

    @Test func anUncertainAttemptIsReconciledAtStartUp() throws {
        let h = try Harness()
        try h.startServer(exchangeDelayMs: 1500)
        h.writeClient()
        try h.startBroker()
        let id = try crashWhileExchanging(h)
        try h.startBroker()
        let rpc = try h.rpc()
        try waitUntil(20, "start-up reconciliation") {
            try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])["reconciled"] == true
        }
        #expect(try rpc.call("login.acknowledge", params: ["attemptId": .string(id)])["state"] == "acknowledged")
    }
}

@Suite("Keyring and peers", .dedicatedThread)
struct KeyringAndPeerTests {
    @Test func aMissingKeyringIsVaultUnavailableAndTheDaemonKeepsServing() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(h.dir)/no-bus"
        try h.startBroker()
        let rpc = try h.rpc()
        #expect(try errorCode(rpc, "login.start", ["client": "com.example.notes", "openBrowser": false]) == "VAULT_UNAVAILABLE")
        #expect(try rpc.call("broker.info")["vaultAvailable"] == false)
        #expect(try rpc.call("login.list", params: [:]).arrayValue?.isEmpty == true)
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
    }

    @Test func aLockedKeyringIsVaultLocked() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        // A private session bus with its own keyring, which the test locks.
        let bus = try PrivateKeyring(dir: h.dir + "/keyring")
        defer { bus.stop() }
        try bus.lock()
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        try h.startBroker()
        let rpc = try h.rpc()
        let error = try errorCode(rpc, "login.start", ["client": "com.example.notes", "openBrowser": false])
        #expect(error == "VAULT_LOCKED")
        #expect(try rpc.call("broker.info")["vaultLocked"] == true)
        #expect(try rpc.call("broker.info")["protocol"] == 1)
    }

    @Test(.enabled(if: getuid() == 0, "needs root to run a client as another uid"))
    func aPeerOfAnotherUIDIsRefusedBeforeAnythingIsRead() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        // Let uid 65534 reach the socket, so only the broker's own check stops it.
        chmod(h.dir, 0o755)
        chmod(h.dir + "/run", 0o755)
        chmod(h.dir + "/run/browser-login", 0o755)
        chmod(h.socketPath, 0o666)
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            s.settimeout(5)
            try:
                s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"broker.info"}\\n')
            except OSError:
                pass
            try:
                data = s.recv(4096)
            except OSError:
                data = b''
            print("GOT:" + data.decode())
            """
        let text = try runProgram(
            "/usr/bin/setpriv",
            ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, h.socketPath]
        ).out
        #expect(text.contains("GOT:"))
        #expect(!text.contains("protocol"))
        #expect(h.broker?.output.contains("peerRefused") == true)
        // The daemon still serves its own user.
        #expect(try h.rpc().call("broker.info")["protocol"] == 1)
    }
}
