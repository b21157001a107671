import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Faults of the outside world, on the server's side (issue 14): the real
/// broker against the real reference server behind a hostile proxy. Each
/// fault gets a clear error code, loses nothing, never makes the broker send
/// a state-changing request twice, and is recovered from once it ends.
@Suite("Faults of the outside world: the login server", .dedicatedThread)
struct ServerFaultTests {
    static let client: JSONValue = .string(FaultClient.id)

    @Test func aCreateThatGetsNoProtocolAnswerFailsCleanlyAndTheNextOneWorks() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        for mode in ["500", "garbage", "truncated", "html", "redirect"] {
            proxy.fault(["create": mode])
            let before = proxy.count("create")
            let error = try rpcFailure(rpc, "login.start", ["client": Self.client, "openBrowser": false])
            #expect(error.applicationCode == "SERVER_PROTOCOL_ERROR", "\(mode): \(error)")
            // What to check: the client's server for a broken answer; later, for a failing server.
            #expect(error.message.contains(mode == "500" ? "try again" : "Server="), "\(mode): \(error.message)")
            let id = try #require(error.data?["attemptId"]?.stringValue, "\(mode)")
            // Sent once, never again; the attempt failed, its proofs are gone.
            #expect(proxy.count("create") == before + 1, "\(mode)")
            #expect(try attemptState(rpc, id) == "failed", "\(mode)")
            #expect(h.keyringLookup(["kind": "attempt", "client": FaultClient.id, "attempt": id]) == nil, "\(mode)")
            #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedOut")
        }
        // The fault ends: the next sign-in works, through the same proxy.
        proxy.fault([:])
        let (_, callback) = try h.authorizeFaultClient(rpc)
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(done["state"] == "completed")
        #expect(done["session"]?["status"] == "signedIn")
        #expect(proxy.count("exchange") == 1)
        #expect(h.broker?.isRunning == true)
    }

    /// Every way an exchange can go wrong without a definite answer makes the
    /// attempt `uncertain` (EXCHANGE_UNCERTAIN); it is never exchanged again,
    /// and is reconciled with the server on its own: cancelled there when the
    /// exchange never reached it, its session revoked by proof when it did.
    @Test func anExchangeWithoutADefiniteAnswerIsUncertainNeverRepeatedAndReconciled() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        // mode → whether the request reached the server.
        let modes: [(String, Bool)] = [
            ("500", false), ("500-after", true), ("garbage", false), ("truncated", true), ("html", false),
            ("redirect", false), ("reset", false), ("reset-after", true),
        ]
        for (mode, reached) in modes {
            let (id, callback) = try h.authorizeFaultClient(rpc)
            let exchanges = proxy.count("exchange")
            let revokes = proxy.count("revoke")
            let cancels = proxy.count("cancel")
            proxy.fault(["exchange": mode])
            let error = try rpcFailure(rpc, "login.finish", ["url": .string(callback)])
            #expect(error.applicationCode == "EXCHANGE_UNCERTAIN", "\(mode): \(error)")
            #expect(error.data?["attemptId"]?.stringValue == id)
            // The same callback again is refused, never a second exchange.
            let again = try rpcFailure(rpc, "login.finish", ["url": .string(callback)])
            #expect(again.applicationCode == "ATTEMPT_NOT_WAITING", "\(mode): \(again)")
            // Reconciled on its own (status is not faulted): retired.
            try waitUntil(20, "\(mode): the attempt to be reconciled") {
                try attemptState(rpc, id) == "acknowledged"
            }
            proxy.fault([:])
            #expect(proxy.count("exchange") == exchanges + 1, "\(mode)")
            if reached {
                // The server issued a session the broker never got: revoked by proof, once.
                #expect(proxy.count("revoke") == revokes + 1, "\(mode)")
                #expect(proxy.count("cancel") == cancels, "\(mode)")
            } else {
                // The server still held the attempt authorized: cancelled there, once.
                #expect(proxy.count("cancel") == cancels + 1, "\(mode)")
                #expect(proxy.count("revoke") == revokes, "\(mode)")
            }
            #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedOut")
            try waitUntil(10, "\(mode): the proofs to leave the keyring") {
                h.keyringLookup(["kind": "attempt", "client": FaultClient.id, "attempt": id]) == nil
            }
        }
        // After all that, a sign-in works.
        let (_, callback) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
        #expect(h.broker?.isRunning == true)
    }

    /// While the server keeps failing, an uncertain attempt stays uncertain
    /// and unreconciled (nothing is dropped, nothing acknowledged); once it
    /// answers again, reconciliation finishes.
    @Test func anUncertainAttemptWaitsForTheServerToComeBack() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (id, callback) = try h.authorizeFaultClient(rpc)
        proxy.fault(["exchange": "500-after", "status": "500", "revoke": "500", "cancel": "500"])
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "EXCHANGE_UNCERTAIN")
        let uncertain = try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": true])
        #expect(uncertain["state"] == "uncertain")
        #expect(uncertain["reconciled"] == false)
        #expect(try errorCode(rpc, "login.acknowledge", ["attemptId": .string(id)]) == "ACK_NOT_RECONCILED")
        #expect(h.keyringLookup(["kind": "attempt", "client": FaultClient.id, "attempt": id]) != nil)
        // The server is back: reconciliation revokes the session it issued, once.
        proxy.fault([:])
        try waitUntil(20, "the attempt to be reconciled") {
            try attemptState(rpc, id, reconcile: true) == "acknowledged"
        }
        #expect(proxy.count("exchange") == 1)
        #expect(proxy.count("revoke") == 1)
        #expect(proxy.count("cancel") == 0)
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedOut")
    }

    /// A server that accepts the connection and then dribbles its answer, or
    /// never answers, is cut off by the broker's own timeout (15 s).
    @Test func slowLorisAndSilentServersAreCutOffByTheTimeout() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        proxy.fault(["create": "slow"])
        var began = Date()
        let error = try rpcFailure(rpc, "login.start", ["client": Self.client, "openBrowser": false])
        #expect(error.applicationCode == "SERVER_UNREACHABLE", "\(error)")
        #expect(Date().timeIntervalSince(began) < 45)
        let failedId = try #require(error.data?["attemptId"]?.stringValue)
        #expect(try attemptState(rpc, failedId) == "failed")
        #expect(proxy.count("create") == 1)

        proxy.fault([:])
        let (id, callback) = try h.authorizeFaultClient(rpc)
        proxy.fault(["exchange": "hang"])
        began = Date()
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "EXCHANGE_UNCERTAIN")
        #expect(Date().timeIntervalSince(began) < 45)
        // The broker keeps serving meanwhile, and reconciles: the server never got the exchange.
        try waitUntil(20, "the attempt to be reconciled") { try attemptState(rpc, id) == "acknowledged" }
        #expect(proxy.count("exchange") == 1)
        #expect(proxy.count("cancel") == 1)
        proxy.fault([:])
        let (_, second) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(second)])["state"] == "completed")
    }

    /// A server that refuses connections: nothing was sent, so nothing is
    /// uncertain — a create fails, an exchange leaves the attempt waiting
    /// (the same callback can be delivered again), a sign-out's revoke is
    /// owed and sent once when the server is back.
    @Test func aServerThatRefusesConnectionsIsUnreachableAndNothingIsLost() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        proxy.stop()
        let error = try rpcFailure(rpc, "login.start", ["client": Self.client, "openBrowser": false])
        #expect(error.applicationCode == "SERVER_UNREACHABLE")
        #expect(error.message.contains("check"), "\(error.message)")
        let failedId = try #require(error.data?["attemptId"]?.stringValue)
        #expect(try attemptState(rpc, failedId) == "failed")
        #expect(h.keyringLookup(["kind": "attempt", "client": FaultClient.id, "attempt": failedId]) == nil)

        try proxy.start()
        let (id, callback) = try h.authorizeFaultClient(rpc)
        proxy.stop()
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "SERVER_UNREACHABLE")
        #expect(try attemptState(rpc, id) == "waiting")
        #expect(proxy.count("exchange") == 0)
        try proxy.start()
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(done["state"] == "completed")
        #expect(proxy.count("exchange") == 1)

        // Sign-out while the server refuses: signed out locally, the revoke owed.
        proxy.stop()
        #expect(try rpc.call("session.signOut", params: ["client": Self.client])["status"] == "signedOut")
        #expect(proxy.count("revoke") == 0)
        try proxy.start()
        try waitUntil(20, "the owed revoke to be sent") { proxy.count("revoke") == 1 }
        try waitUntil(10, "the owed revoke to be settled") {
            h.keyringLookup(["kind": "revoke", "client": FaultClient.id]) == nil
        }
        usleep(1_500_000)
        #expect(proxy.count("revoke") == 1)
    }

    /// A sign-out whose revoke may have reached the server (a 5xx) is never
    /// sent again; the session is gone locally either way.
    @Test func aSignOutRevokeThatFailsIsNotRepeated() throws {
        let h = try Harness()
        let proxy = try h.startBehindProxy()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (_, callback) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
        proxy.fault(["revoke": "500-after"])
        #expect(try rpc.call("session.signOut", params: ["client": Self.client])["status"] == "signedOut")
        usleep(2_000_000)
        #expect(proxy.count("revoke") == 1)
        #expect(h.keyringLookup(["kind": "revoke", "client": FaultClient.id]) == nil)
        #expect(h.keyringLookup(["kind": "session", "client": FaultClient.id]) == nil)
        #expect(h.broker?.output.contains("it is not sent again") == true)
    }

    /// A refresh that fails (5xx, garbage) keeps the session signed in — the
    /// app's request fails with a clear code — and the next refresh, once the
    /// server answers, works.
    @Test func aFailedRefreshKeepsTheSessionAndRecovers() throws {
        let h = try Harness()
        // Access tokens live 12 s: every app request refreshes first (15 s margin).
        let proxy = try h.startBehindProxy(accessTokenMs: 12_000)
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (_, callback) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
        let request: JSONValue = ["client": Self.client, "method": "GET", "path": "/api/me"]
        for mode in ["500", "garbage", "html"] {
            proxy.fault(["refresh": mode])
            let before = proxy.count("refresh")
            #expect(try errorCode(rpc, "http.request", request) == "SERVER_PROTOCOL_ERROR", "\(mode)")
            // (The broker's own timer may have tried once more meanwhile.)
            #expect(proxy.count("refresh") >= before + 1, "\(mode)")
            #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedIn", "\(mode)")
        }
        proxy.fault([:])
        #expect(try rpc.call("http.request", params: request)["status"] == 200)
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedIn")
    }

    /// An https server whose certificate the broker does not trust: the
    /// handshake fails before any byte of the request is written, so it is
    /// SERVER_UNREACHABLE with what to check, and nothing changes; with the
    /// right `CAFile=` the same server works.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func anUntrustedCertificateIsUnreachableAndTheRightCAFileWorks() throws {
        let h = try Harness()
        defer { h.removeAll() }
        let key = h.dir + "/server/key.pem"
        let certificate = h.dir + "/server/cert.pem"
        _ = try spawnAndWait(
            [
                "/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", certificate, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
        #expect(FileManager.default.fileExists(atPath: certificate))
        try h.startServer(clients: FaultClient.clients)
        h.stopServer()
        h.serverArguments += ["--tls-cert", certificate, "--tls-key", key]
        try h.launchServer()
        #expect(h.serverOrigin.hasPrefix("https://127.0.0.1:"))
        h.writeClient(file: "faults.conf", id: FaultClient.id, appName: "Fault Notes", returnURL: FaultClient.returnURL)
        try h.startBroker()
        var rpc = try h.rpc()
        let error = try rpcFailure(rpc, "login.start", ["client": Self.client, "openBrowser": false])
        #expect(error.applicationCode == "SERVER_UNREACHABLE", "\(error)")
        #expect(error.message.contains("TLS"), "\(error.message)")
        #expect(error.message.contains("CA file"), "\(error.message)")
        let failedId = try #require(error.data?["attemptId"]?.stringValue)
        #expect(try attemptState(rpc, failedId) == "failed")
        #expect(h.keyringLookup(["kind": "attempt", "client": FaultClient.id, "attempt": failedId]) == nil)
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedOut")

        // Trust the certificate: the same server works.
        h.writeClient(
            file: "faults.conf", id: FaultClient.id, appName: "Fault Notes", returnURL: FaultClient.returnURL,
            extra: "CAFile=\(certificate)")
        try h.restartBroker()
        rpc = try h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": Self.client, "openBrowser": false])
        let url = try #require(attempt["authorizeUrl"]?.stringValue)
        let browser = try ScriptedBrowser(serverOrigin: h.serverOrigin, caFile: certificate)
        let callback = try browser.signInAndAuthorize(authorizeURL: url, email: h.testEmail, code: "000000")
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(done["state"] == "completed")
        #expect(done["session"]?["status"] == "signedIn")
        #expect(try rpc.call("session.signOut", params: ["client": Self.client])["status"] == "signedOut")
    }
}
