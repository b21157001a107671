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

/// Calls a method and answers its error's `data.code`, or nil when it succeeded.
func errorCode(_ rpc: RPCClient, _ method: String, _ params: JSONValue) throws -> String? {
    do {
        _ = try rpc.call(method, params: params)
        return nil
    } catch let error as RPCError {
        return error.applicationCode ?? "\(error.code.rawValue)"
    }
}

@Suite("Sign-in end to end", .dedicatedThread)
struct SignInTests {
    @Test func aFullSignInThroughTheURLHandlerCommand() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: ["clients": ["com.example.notes"]])

        let attempt = try h.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let rpc = try h.rpc()
        let session = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"]?.stringValue == h.testEmail)
        #expect(session["authMethod"] != nil)
        let status = try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])
        #expect(status["state"] == "completed")
        #expect(status["receipt"]?["issuedAt"]?.stringValue != nil)

        // Subscribers saw the attempt move and the session appear, in order.
        var states: [String] = []
        var sessionStatuses: [String] = []
        while !sessionStatuses.contains("signedIn") {
            guard case .notification(let method, let params) = try watcher.nextMessage(timeout: .seconds(10)) else {
                continue
            }
            if method == "login.changed", let s = params?["attempt"]?["state"]?.stringValue { states.append(s) }
            if method == "session.changed", let s = params?["session"]?["status"]?.stringValue {
                sessionStatuses.append(s)
            }
        }
        #expect(states == ["starting", "waiting", "exchanging", "completed"])
        #expect(sessionStatuses == ["signingIn", "signedIn"])

        // The session is in the keyring, labelled for people.
        let item = try #require(h.keyringLookup(["kind": "session", "client": "com.example.notes"]))
        #expect(item.contains("accessToken"))

        // The CLI shows it.
        let cli = try h.cli(["session", "com.example.notes"])
        #expect(cli.status == 0)
        #expect(cli.out.contains("signedIn"))
        #expect(cli.out.contains(h.testEmail))
    }

    @Test func aRepeatedCallbackAnswersTheStateAndSendsNothing() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let rpc = try h.rpc()
        let first = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(first["state"] == "completed")
        #expect(first["session"]?["status"] == "signedIn")
        let again = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(again["state"] == "completed")
        #expect(again["attemptId"] == attempt["attemptId"])
        // Still signed in: a second exchange would have revoked the session.
        try h.restartBroker()
        let session = try h.rpc().call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] == "signedIn")
    }

    @Test func everyFinishRuleRefusesAndChangesNothing() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.writeClient(file: "other.conf", id: "com.example.other", appName: "Other", returnURL: "com.example.other:/cb")
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let rpc = try h.rpc()
        let serverId = try #require(callback.split(separator: "&").first { $0.hasPrefix("attempt=") }?.dropFirst(8))
        let iss = try #require(callback.split(separator: "&").first { $0.hasPrefix("iss=") }?.dropFirst(4))
        let code = try #require(callback.split(separator: "?").last?.split(separator: "&").first?.dropFirst(5))
        let base = "com.example.notes:/callback"
        let cases: [(String, String)] = [
            ("not a URL", "CALLBACK_INVALID"),
            (base + "?code=\(code)&attempt=\(serverId)&iss=\(iss)#frag", "CALLBACK_INVALID"),
            ("com.example.notes://user@host/callback?code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_INVALID"),
            (base + "?attempt=\(serverId)&iss=\(iss)", "CALLBACK_INVALID"),
            (base + "?code=\(code)&iss=\(iss)", "CALLBACK_INVALID"),
            (base + "?code=\(code)&attempt=\(serverId)", "CALLBACK_INVALID"),
            (base + "?code=\(code)&code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_INVALID"),
            (base + "?code=\(code)&attempt=\(serverId)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_INVALID"),
            (base + "?code=\(code)&attempt=\(serverId)&iss=\(iss)&x=" + String(repeating: "a", count: 8200), "CALLBACK_INVALID"),
            (base + "?code=\(code)&attempt=unknownattemptid0000000&iss=\(iss)", "ATTEMPT_UNKNOWN"),
            ("com.example.evil:/callback?code=\(code)&attempt=unknownattemptid0000000&iss=\(iss)", "CALLBACK_MISMATCH"),
            ("com.example.notes:/callback/?code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_MISMATCH"),
            ("com.example.notes:/Callback?code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_MISMATCH"),
            ("com.example.notes:/callback%2F?code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_MISMATCH"),
            ("com.example.other:/cb?code=\(code)&attempt=\(serverId)&iss=\(iss)", "CALLBACK_MISMATCH"),
            (base + "?code=\(code)&attempt=\(serverId)&iss=https%3A%2F%2Fevil.example.com", "ISSUER_MISMATCH"),
            (base + "?code=\(code)&attempt=\(serverId)&iss=\(iss)%2F", "ISSUER_MISMATCH"),
            (base + "?error=access_denied&attempt=\(serverId)&iss=\(iss)", "CALLBACK_INVALID"),
        ]
        for (url, expected) in cases {
            #expect(try errorCode(rpc, "login.finish", ["url": .string(url)]) == expected, "\(url.prefix(80))")
            let now = try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])
            #expect(now["state"] == "waiting")
        }
        // A wrong code is a definite refusal that leaves the attempt waiting.
        let forged = base + "?code=forgedcode0000000000000000&attempt=\(serverId)&iss=\(iss)"
        let forgedError = try errorCode(rpc, "login.finish", ["url": .string(forged)])
        #expect(forgedError == "SERVER_ERROR")
        #expect(try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])["state"] == "waiting")
        // The genuine callback still completes it.
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(done["state"] == "completed")
    }

    @Test func cancelRefusesLaterCallbacksAndCancelsAtTheServer() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let cli = try h.cli(["cancel", id])
        #expect(cli.status == 0, "\(cli.err)")
        let rpc = try h.rpc()
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "ATTEMPT_NOT_WAITING")
        #expect(try rpc.call("login.status", params: ["attemptId": .string(id)])["state"] == "cancelled")
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
        // The server was told: its attempt is cancelled, or already retired
        // once the broker acknowledged it.
        let serverId = Harness.serverAttemptId(attempt["authorizeUrl"]?.stringValue ?? "")
        do {
            let page = try h.browser().describe(attemptId: serverId)
            #expect(page.state == .cancelled)
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "ATTEMPT_UNKNOWN")
        }
    }

    @Test func aDeclineIsConfirmedWithTheServerThenDenied() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let rpc = try h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let url = try #require(attempt["authorizeUrl"]?.stringValue)
        let callback = try h.browser().decline(authorizeURL: url)
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "ACCESS_DENIED")
        #expect(try rpc.call("login.status", params: ["attemptId": attempt["attemptId"]!])["state"] == "denied")
    }

    @Test func aWaitingAttemptExpiresLocallyEvenWithTheServerDown() throws {
        let h = try Harness()
        try h.startServer(lifetimeMs: 1500)
        h.writeClient()
        try h.startBroker()
        let rpc = try h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        h.stopServer()
        try waitUntil(10, "local expiry") {
            try rpc.call("login.status", params: ["attemptId": attempt["attemptId"]!, "reconcile": false])["state"]
                == "expired"
        }
        let list = try h.cli(["status", "--all", "--no-reconcile"])
        #expect(list.out.contains("expired"))
    }

    @Test func aRestartKeepsAWaitingAttemptThatCanBeResumed() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let first = try h.rpc().call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let id = try #require(first["attemptId"]?.stringValue)
        try h.restartBroker()
        let rpc = try h.rpc()
        let waiting = try rpc.call("login.list", params: ["states": ["waiting"]])
        #expect(waiting.arrayValue?.map { $0["attemptId"] } == [.string(id)])
        let resumed = try rpc.call("login.resume", params: ["attemptId": .string(id), "openBrowser": false])
        #expect(resumed["authorizeUrl"] == first["authorizeUrl"])
        // login.start with a waiting attempt returns it instead of a new one.
        let again = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        #expect(again["attemptId"]?.stringValue == id)
        let callback = try h.browser().signInAndAuthorize(
            authorizeURL: try #require(resumed["authorizeUrl"]?.stringValue), email: h.testEmail, code: "000000")
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
    }

    @Test func theServerDownIsAClearErrorAndTheDaemonKeepsServing() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.stopServer()
        try h.startBroker()
        let rpc = try h.rpc()
        #expect(try errorCode(rpc, "login.start", ["client": "com.example.notes", "openBrowser": false]) == "SERVER_UNREACHABLE")
        let failed = try rpc.call("login.list", params: ["states": ["failed"]])
        #expect(failed.arrayValue?.count == 1)
        #expect(try rpc.call("broker.info")["protocol"] == 1)
        let cli = try h.cli(["start", "com.example.notes", "--no-browser"])
        #expect(cli.status == 75)
        #expect(cli.err.contains("SERVER_UNREACHABLE"))
    }

    @Test func theCLISaysWhenTheDaemonIsNotRunning() throws {
        let h = try Harness()
        let cli = try h.cli(["status"])
        #expect(cli.status == 69)
        #expect(cli.err.contains("not running"))
    }
}

@Suite("Sign-in options", .dedicatedThread)
struct SignInOptionTests {
    @Test func ephemeralNeedsAPrivateBrowserCommand() throws {
        let h = try Harness()
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.private", "Private", "com.example.private:/cb"),
        ])
        h.writeClient()
        h.writeClient(
            file: "private.conf", id: "com.example.private", appName: "Private", returnURL: "com.example.private:/cb",
            extra: "PrivateBrowser=/bin/true --private %u")
        try h.startBroker()
        let rpc = try h.rpc()
        #expect(
            try errorCode(rpc, "login.start", ["client": "com.example.notes", "ephemeral": true]) == "EPHEMERAL_UNSUPPORTED")
        let started = try rpc.call("login.start", params: ["client": "com.example.private", "ephemeral": true])
        #expect(started["state"] == "waiting")
    }

    @Test func aSignedInClientNeedsSwitchAccountToStartAgain() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        try h.signIn()
        let rpc = try h.rpc()
        #expect(
            try errorCode(rpc, "login.start", ["client": "com.example.notes", "openBrowser": false]) == "ALREADY_SIGNED_IN")
        let switched = try rpc.call(
            "login.start", params: ["client": "com.example.notes", "openBrowser": false, "switchAccount": true])
        #expect(switched["state"] == "waiting")
        // The old session was signed out (and revoked at the server) first.
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signingIn")
    }

    @Test func theUsersClientFileWinsOverASystemOneOfTheSameName() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try FileManager.default.createDirectory(
            atPath: h.dir + "/data/browser-login/clients.d", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(
            atPath: h.dir + "/data/browser-login/clients.d/notes.conf",
            contents: Data("[Client]\nId=com.example.system\nAppName=System copy\n".utf8))
        _ = FileManager.default.createFile(
            atPath: h.dir + "/data/browser-login/clients.d/extra.conf",
            contents: Data(
                "[Client]\nId=com.example.extra\nAppName=Extra\nServer=\(h.serverOrigin)\nReturnUrl=com.example.extra:/cb\n".utf8)
        )
        try h.startBroker()
        let ids = try h.rpc().call("clients.list").arrayValue?.compactMap { $0["id"]?.stringValue }
        #expect(ids == ["com.example.extra", "com.example.notes"])
    }
}
