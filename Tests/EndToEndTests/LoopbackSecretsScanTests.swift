import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// A Browser Login sign-in that returns over loopback leaks no more than one through a custom scheme: the
/// code, the callback URL (delivered to the listener, refused and genuine), the verifier and the server's
/// attempt id reach neither the broker's log, nor its SQLite files, nor an RPC answer or notification.
@Suite(.dedicatedThread) struct LoopbackSecretsScanTests {
    @Test func noSecretOfALoopbackSignInLeaks() throws {
        let world = try HandbackWorld(returnUrls: ["http://127.0.0.1/callback"])
        defer { world.h.stopAll() }
        let h = world.h
        try h.startBroker()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: [:])
        let rpc = try h.rpc()
        var seen: [String] = []
        let attempt = try world.start(openBrowser: false)
        let id = try #require(attempt["attemptId"]?.stringValue)
        let authorizeURL = try #require(attempt["authorizeUrl"]?.stringValue)
        let proofs = try #require(h.keyringLookup(["kind": "attempt", "client": "com.example.notes", "attempt": id]))
        let verifier = try #require(try JSONValue.parse(proofs)["codeVerifier"]?.stringValue)
        let callback = try h.browser().signInAndAuthorize(authorizeURL: authorizeURL, email: h.testEmail, code: "000000")
        let parsed = try Callback(parsing: callback)
        guard case .code(let code) = parsed.outcome else { throw HarnessError("no code") }
        // A forged code and a wrong path on the listener, then the genuine callback.
        for url in [
            callback.replacingOccurrences(of: "code=", with: "code=x"),
            callback.replacingOccurrences(of: "/callback?", with: "/other?"),
            callback,
        ] {
            let answer = try runProgram("/usr/bin/curl", ["-sS", "-i", url])
            seen.append(answer.out + answer.err)
        }
        try world.waitSignedIn()
        for (method, params) in [
            ("login.status", ["attemptId": JSONValue.string(id)]), ("login.list", [:]),
            ("session.get", ["client": "com.example.notes"]), ("clients.list", [:]),
        ] as [(String, JSONValue)] {
            seen.append(try rpc.call(method, params: params).jsonText)
        }
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification(let method, let params) = message { seen.append(method + (params?.jsonText ?? "")) }
        }
        let log = h.broker?.output ?? ""
        #expect(log.contains("signed in"))
        let database = h.databaseBytes()
        let answers = seen.joined(separator: "\n")
        #expect(answers.contains("You are signed in to Example Notes"))
        // The server's attempt id is kept in the store (to find the attempt by its callback), nowhere else.
        #expect(!log.contains(parsed.attempt), "the server's attempt id is in the broker's log")
        for (name, secret) in [
            ("code", code), ("callback URL", callback), ("code verifier", verifier), ("authorize URL", authorizeURL),
            ("server attempt id in a URL", "attempt=" + parsed.attempt),
        ] {
            let (inLog, inDatabase, inAnswers) = (log.contains(secret), database.contains(secret), answers.contains(secret))
            #expect(!inLog, "the \(name) is in the broker's log")
            #expect(!inDatabase, "the \(name) is in the SQLite files")
            #expect(!inAnswers, "the \(name) is in an answer, a page or a notification")
        }
    }
}
