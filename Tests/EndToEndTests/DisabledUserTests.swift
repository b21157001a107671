import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import ScriptedBrowser
import Testing

/// A user disabled at the server (issue 15, item 5), with the real server,
/// broker and CLI: the session view says why, and the CLI says to contact an
/// administrator, never to retry.
@Suite("Disabled users end to end", .dedicatedThread)
struct DisabledUserTests {
    static let advice = "contact your administrator to enable it"

    func disable(_ h: Harness) throws {
        let run = try runProgram(
            binDirectory + "/browser-login-server",
            ["users", "disable", h.testEmail, "--database", h.dir + "/server/server.sqlite"])
        #expect(run.status == 0, "\(run.err)")
        #expect(run.out.contains("disabled; their sessions are revoked"))
    }

    func expectNoRetryAdvice(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let lower = text.lowercased()
        #expect(!lower.contains("try again") && !lower.contains("sign in again"), "\(text)", sourceLocation: sourceLocation)
    }

    @Test func theSessionViewCarriesTheReasonAndTheCLISaysToContactAnAdministrator() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--verify-interval", "1"])
        try h.signIn()
        #expect(try h.cli(["session", "com.example.notes"]).status == 0)
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: ["clients": ["com.example.notes"]])
        try disable(h)
        var seen: JSONValue?
        let deadline = Date().addingTimeInterval(20)
        while seen == nil, Date() < deadline {
            if case .notification("session.changed", let params) = try watcher.nextMessage(timeout: .seconds(20)),
                params?["session"]?["status"] == "revoked"
            {
                seen = params?["session"]
            }
        }
        #expect(seen?["reason"] == "AUTH_USER_DISABLED")
        let view = try h.rpc().call("session.get", params: ["client": "com.example.notes"])
        #expect(view["status"] == "revoked")
        #expect(view["reason"] == "AUTH_USER_DISABLED")

        let shown = try h.cli(["session", "com.example.notes"])
        #expect(shown.status == 1)
        #expect(shown.out.hasPrefix("com.example.notes: revoked as "), "\(shown.out)")
        #expect(shown.out.contains("(reason: AUTH_USER_DISABLED)"), "\(shown.out)")
        #expect(shown.out.contains(Self.advice), "\(shown.out)")
        expectNoRetryAdvice(shown.out)
        let json = try JSONValue.parse(try h.cli(["session", "com.example.notes", "--json"]).out)
        #expect(json["status"] == "revoked" && json["reason"] == "AUTH_USER_DISABLED")

        // Signing in again is refused on the hosted page with the same code.
        let attempt = try h.rpc().call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let url = try #require(attempt["authorizeUrl"]?.stringValue)
        do {
            _ = try h.browser().signInAndAuthorize(authorizeURL: url, email: h.testEmail, code: "000000")
            Issue.record("a disabled user signed in")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "AUTH_USER_DISABLED")
        }
    }

    @Test func aRefusedExchangeTellsTheCLIUserToContactAnAdministrator() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        // The page authorizes while the user is enabled; the exchange comes after the disable.
        let (_, callback) = try h.startAndAuthorize()
        try disable(h)
        let finish = try h.cli(["finish", callback])
        #expect(finish.status != 0)
        #expect(finish.err.contains("AUTH_USER_DISABLED"), "\(finish.err)")
        #expect(finish.err.contains(Self.advice), "\(finish.err)")
        expectNoRetryAdvice(finish.err)
        let session = try h.rpc().call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] != "signedIn")
        // `users enable`: the user signs in again (a new session; the old ones stay revoked).
        let enable = try runProgram(
            binDirectory + "/browser-login-server",
            ["users", "enable", h.testEmail, "--database", h.dir + "/server/server.sqlite"])
        #expect(enable.status == 0, "\(enable.err)")
        try h.signIn()
        let shown = try h.cli(["session", "com.example.notes"])
        #expect(shown.status == 0 && shown.out.contains("signedIn"), "\(shown.out)")
        #expect(!shown.out.contains(Self.advice))
    }
}
