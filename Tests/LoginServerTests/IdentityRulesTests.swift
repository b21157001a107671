import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Durable upstream identities (issuer + `sub`, docs/server.md "Accounts and
/// provider identities"), against the test provider: its user's address is
/// changed in the provider's own database between sign-ins.
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct UpstreamIdentityTests {
    /// Signs `user` in at the provider through a fresh browser; the browser session, or the refusal page.
    func upstreamSignIn(_ server: TestServer, _ provider: TestProvider, user: String) throws -> (
        BrowserSessionInfo?, HTTPAnswer
    ) {
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let started = try browser.post("/browser/upstream/start", ["provider": "dot", "attemptId": attempt.id])
        try #require(started.status == 200, "\(started.text)")
        let url = try #require(
            (try JSONSerialization.jsonObject(with: Data(started.body)) as? [String: Any])?["authorizeUrl"] as? String)
        let landed = try browser.request("GET", try provider.authorize(url, user: user), stateChanging: false)
        return (try browser.currentSession(), landed)
    }

    /// Changes `user`'s address at the provider (its Django database).
    func setProviderEmail(_ provider: TestProvider, user: String, to email: String) throws {
        let run = try runProgram(
            "/usr/bin/sqlite3",
            [provider.directory + "/provider.sqlite3", "UPDATE auth_user SET email = '\(email)' WHERE username = '\(user)';"])
        try #require(run.status == 0, "\(run.err)")
    }

    func emailSignIn(_ server: TestServer, _ email: String) throws -> BrowserSessionInfo {
        let browser = try server.browser()
        try browser.startSignIn(email: email)
        let message = try #require(server.mail(to: email).last)
        let code = try #require(SignInEmail.code(in: message.body))
        return try browser.verifySignIn(email: email, code: code)
    }

    @Test func anIdentityKeepsItsAccountAfterItsEmailChangesAndNeverMoves() throws {
        let directory = try TemporaryDirectory()
        let provider = try TestProvider.start(in: directory.path + "/provider")
        defer { provider.stop() }
        let server = try UpstreamPageTests.server(provider)

        // First sign-in: alice@example.com's account, linked to alice's `sub`.
        let first = try #require(try upstreamSignIn(server, provider, user: "alice").0)
        #expect(first.account.email == "alice@example.com" && first.authMethod == "dot")
        // Someone else already has the address alice will move to.
        let other = try emailSignIn(server, "alice.new@example.com")
        #expect(other.account.userId != first.account.userId)

        try setProviderEmail(provider, user: "alice", to: "alice.new@example.com")
        let again = try #require(try upstreamSignIn(server, provider, user: "alice").0)
        #expect(again.account.userId == first.account.userId, "the identity moved to \(again.account.email)")
        #expect(again.account.email == "alice@example.com")
        // And to an address no account has: still the same account, no new one.
        try setProviderEmail(provider, user: "alice", to: "alice.third@example.com")
        let third = try #require(try upstreamSignIn(server, provider, user: "alice").0)
        #expect(third.account.userId == first.account.userId)

        // Email sign-in still identifies by address.
        #expect(try emailSignIn(server, "alice@example.com").account.userId == first.account.userId)
        #expect(try emailSignIn(server, "alice.new@example.com").account.userId == other.account.userId)
        #expect(try emailSignIn(server, "alice.third@example.com").isNewUser == true)
    }

    /// Another account of the provider that now shows an address whose
    /// account is linked to someone else's `sub` does not take it over.
    @Test func anotherSubjectWithALinkedAccountsAddressIsRefused() throws {
        let directory = try TemporaryDirectory()
        let provider = try TestProvider.start(in: directory.path + "/provider")
        defer { provider.stop() }
        let server = try UpstreamPageTests.server(provider)
        let alice = try #require(try upstreamSignIn(server, provider, user: "alice").0)

        try setProviderEmail(provider, user: "bob", to: "alice@example.com")
        let (session, page) = try upstreamSignIn(server, provider, user: "bob")
        #expect(session == nil)
        #expect(page.status == 409, "\(page.text)")
        #expect(page.text.contains("UPSTREAM_ACCOUNT_CONFLICT"), "\(page.text)")
        // Alice's link is untouched.
        #expect(try upstreamSignIn(server, provider, user: "alice").0?.account.userId == alice.account.userId)

        // An address whose account has no link at this provider is linked on first sign-in (and kept).
        let carol = try emailSignIn(server, "carol@example.com")
        try setProviderEmail(provider, user: "bob", to: "carol@example.com")
        #expect(try upstreamSignIn(server, provider, user: "bob").0?.account.userId == carol.account.userId)
        try setProviderEmail(provider, user: "bob", to: "bob.elsewhere@example.com")
        #expect(try upstreamSignIn(server, provider, user: "bob").0?.account.userId == carol.account.userId)
    }
}

/// Test accounts' sessions (docs/server.md "Test accounts"): 30 minutes at
/// most, marked, and ended at once when their base leaves the configuration.
@Suite(.dedicatedThread) struct TestAccountSessionTests {
    static let otherBase = "qa@example.net"

    @Test func aTestAccountsSessionLastsThirtyMinutesAndIsMarked() throws {
        let server = try TestServer()
        let started = server.time.clock()
        let (_, issued) = try login(server)
        #expect(issued.session.authMethod == "test")
        #expect(issued.session.expiresAt?.millisecondsSince1970 == started + 30 * 60_000)
        #expect((issued.session.accessTokenExpiresAt?.millisecondsSince1970 ?? .max) <= started + 30 * 60_000)
        let browser = try server.browser()
        try browser.startSignIn(email: testBase)
        let answer = try browser.request(
            "POST", server.base + "/browser/signin/verify", headers: [("Content-Type", "application/json")],
            body: Array(#"{"email":"\#(testBase)","code":"000000"}"#.utf8))
        #expect(answer.text.contains(#""testAccount":true"#), "\(answer.text)")
        #expect(answer.headers("set-cookie").first?.contains("Max-Age=1800;") == true)
        let session = try browser.request("GET", server.base + "/browser/session", stateChanging: false)
        #expect(session.text.contains(#""testAccount":true"#), "\(session.text)")

        // Past 30 minutes: the native session has ended (refresh says so), the browser's too.
        server.time.advance(30 * 60_000)
        expectError(
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken ?? "")"}"#), .sessionExpired)
        #expect(try browser.currentSession() == nil)

        // Anyone else keeps the configured lifetime, and no marker.
        let other = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let mailBrowser = try other.browser()
        try mailBrowser.startSignIn(email: "dana@example.org")
        let message = try #require(other.mail(to: "dana@example.org").last)
        let code = try #require(SignInEmail.code(in: message.body))
        let dana = try mailBrowser.request(
            "POST", other.base + "/browser/signin/verify", headers: [("Content-Type", "application/json")],
            body: Array(#"{"email":"dana@example.org","code":"\#(code)"}"#.utf8))
        #expect(!dana.text.contains("testAccount"), "\(dana.text)")
        #expect(dana.headers("set-cookie").first?.contains("Max-Age=3600;") == true)
        // A configured lifetime shorter than 30 minutes applies to test accounts too.
        let short = try TestServer { $0.sessionLifetimeMillis = 600_000 }
        let shortStart = short.time.clock()
        #expect(try login(short).1.session.expiresAt?.millisecondsSince1970 == shortStart + 600_000)
    }

    @Test func removingTheBaseEndsItsSessionsAtOnce() throws {
        let server = try TestServer { $0.testAccounts = [testBaseAddress, Self.otherBase] }
        let (attempt, issued) = try login(server)
        let (_, kept) = try login(server, email: "qa+bltest1@example.net")
        let browser = try server.browser()
        try browser.verifySignIn(email: "dev+bltest2@example.com", code: "000000")
        #expect(try server.get(server.origin + "/api/me", headers: bearer(issued.session.accessToken)).status == 200)

        var reloaded = server.server.configuration
        reloaded.testAccounts = [Self.otherBase]
        try server.server.reload(reloaded)

        expectError(try server.get(server.origin + "/api/me", headers: bearer(issued.session.accessToken)), .sessionRevoked)
        expectError(
            try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)), .sessionRevoked)
        expectError(
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken ?? "")"}"#), .sessionRevoked)
        #expect(try attempt.status(server).decode(StatusResponse.self).sessionRevoked == true)
        #expect(try browser.currentSession() == nil)
        // The derived address cannot sign in any more: it is no test account now.
        expectError(try browser.verify("dev+bltest2@example.com", code: "000000"), .otpExpired)
        // The other base's sessions go on.
        #expect(try server.get(server.origin + "/api/me", headers: bearer(kept.session.accessToken)).status == 200)

        // Putting the base back revives nothing.
        reloaded.testAccounts = [testBaseAddress, Self.otherBase]
        try server.server.reload(reloaded)
        expectError(try server.get(server.origin + "/api/me", headers: bearer(issued.session.accessToken)), .sessionRevoked)
        // An invalid reload changes nothing.
        reloaded.testAccounts = ["qa+bltest@example.net"]
        #expect(throws: ConfigurationError.self) { try server.server.reload(reloaded) }
        #expect(try server.get(server.origin + "/api/me", headers: bearer(kept.session.accessToken)).status == 200)
    }

    /// An attempt a test account authorized, exchanged after its base was removed: cancelled.
    @Test func anAuthorizedAttemptOfARemovedBaseIsNotExchanged() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        var reloaded = server.server.configuration
        reloaded.testAccounts = []
        try server.server.reload(reloaded)
        expectError(
            try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin)), .attemptCancelled
        )
    }

    /// The real binary: SIGHUP re-reads the configuration file.
    @Test func sighupReloadsTheTestAccounts() throws {
        let server = try BinaryServer()
        let attempt = try server.attempt()
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        let issued = try server.exchange(attempt, callback: callback)
        let me = { try RawHTTP.send("GET", server.origin + "/api/me", headers: bearer(issued.session.accessToken)) }
        #expect(try me().status == 200)

        let file = server.directory.path + "/server.json"
        var config = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any])
        // A broken file first: refused, logged, the previous configuration stays.
        try Data("{".utf8).write(to: URL(fileURLWithPath: file))
        kill(server.process.pid, SIGHUP)
        try waitUntil(10, "the refusal to be logged") { server.log.contains("reloaded configuration is refused") }
        #expect(try me().status == 200)

        config["testAccounts"] = [String]()
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        kill(server.process.pid, SIGHUP)
        try waitUntil(10, "the reload") { server.log.contains("configuration reloaded") }
        expectError(try me(), .sessionRevoked)
        #expect(server.process.isAlive)
    }
}
