import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// No token, verifier, recovery key, code, callback URL, session id or
/// server attempt id reaches the broker's log, its SQLite files, an RPC
/// result, an error or a notification.
@Suite("Secrets never leak", .dedicatedThread)
struct SecretsScanTests {
    @Test func noSecretReachesLogsDatabaseResultsOrNotifications() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: [:])
        var seen: [String] = []
        let rpc = try h.rpc()
        func record(_ method: String, _ params: JSONValue) {
            do { seen.append(try rpc.call(method, params: params).jsonText) } catch let error as RPCError {
                seen.append(error.json.jsonText)
            } catch { seen.append("\(error)") }
        }

        let attempt = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let id = try #require(attempt["attemptId"]?.stringValue)
        let authorizeURL = try #require(attempt["authorizeUrl"]?.stringValue)
        // The attempt's proofs, read from the real keyring.
        let proofs = try #require(h.keyringLookup(["kind": "attempt", "client": "com.example.notes", "attempt": id]))
        let proofJSON = try JSONValue.parse(proofs)
        let verifier = try #require(proofJSON["codeVerifier"]?.stringValue)
        let recoveryKey = try #require(proofJSON["recoveryKey"]?.stringValue)

        let callback = try h.browser().signInAndAuthorize(authorizeURL: authorizeURL, email: h.testEmail, code: "000000")
        let parsed = try Callback(parsing: callback)
        guard case .code(let code) = parsed.outcome else { throw HarnessError("no code") }
        // Refused callbacks, then the real one.
        record("login.finish", ["url": .string(callback + "#x")])
        record("login.finish", ["url": .string(callback.replacingOccurrences(of: "/callback", with: "/other"))])
        record("login.finish", ["url": .string(callback)])
        record("login.finish", ["url": .string(callback)])
        record("login.status", ["attemptId": .string(id)])
        record("login.list", [:])
        record("session.get", ["client": "com.example.notes"])
        let accountKey = try rpc.call("session.get", params: ["client": "com.example.notes"])["accountKey"] ?? .null
        record("session.list", ["client": "com.example.notes"])
        record("session.use", ["client": "com.example.notes", "account": accountKey])
        record("session.get", ["client": "com.example.notes", "account": accountKey])
        record("http.request", ["client": "com.example.notes", "method": "GET", "path": "/api/me", "account": accountKey])
        record("http.request", ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
        record("http.request", ["client": "com.example.notes", "method": "GET", "path": "/api/../x"])
        record("broker.info", [:])
        let session = try #require(h.keyringLookup(["kind": "session", "client": "com.example.notes"]))
        let sessionJSON = try JSONValue.parse(session)["session"]
        let accessToken = try #require(sessionJSON?["accessToken"]?.stringValue)
        let refreshToken = try #require(sessionJSON?["refreshToken"]?.stringValue)
        let sessionId = try #require(sessionJSON?["sessionId"]?.stringValue)
        record("session.signOut", ["client": "com.example.notes"])
        for args in [["status", "--all"], ["status", "--all", "--json"], ["session", "com.example.notes"], ["clients"]] {
            let out = try h.cli(args)
            seen.append(out.out + out.err)
        }
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification(let method, let params) = message { seen.append(method + (params?.jsonText ?? "")) }
        }
        #expect(seen.count > 15)

        let secrets: [(String, String)] = [
            ("access token", accessToken), ("refresh token", refreshToken), ("session id", sessionId),
            ("code verifier", verifier), ("recovery key", recoveryKey), ("code", code), ("callback URL", callback),
            ("authorize URL", authorizeURL), ("server attempt id in a URL", "attempt=" + parsed.attempt),
        ]
        let log = h.broker?.output ?? ""
        #expect(log.contains("signed in"))
        let database = h.databaseBytes()
        #expect(database.contains(id))
        let rpcText = seen.joined(separator: "\n")
        for (name, secret) in secrets {
            #expect(!log.contains(secret), "the \(name) is in the broker's log")
            #expect(!database.contains(secret), "the \(name) is in the SQLite files")
            #expect(!rpcText.contains(secret), "the \(name) is in an RPC answer, error or notification")
        }
        // The server's attempt id appears only inside authorizeUrl (RPC) and in the store.
        #expect(!log.contains(parsed.attempt), "the server's attempt id is in the broker's log")
        let withoutStartReply = rpcText
        #expect(!withoutStartReply.contains(parsed.attempt), "the server's attempt id is in an RPC answer")
    }
}
