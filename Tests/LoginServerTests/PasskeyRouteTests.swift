import BrowserLoginProtocol
import BrowserLoginTestSigner
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// A server whose page is at `http://localhost:PORT` (the development origin
/// a browser accepts as a passkey relying party), with `passkeyRpIds`.
func passkeyServer(
    rpIds: [String] = ["login.example.com", "localhost"], _ adjust: (inout ServerConfiguration) -> Void = { _ in }
)
    throws -> TestServer
{
    try TestServer.onAFreePort { c, port in
        c.publicOrigin = "http://localhost:\(port)"
        c.passkeyRpIds = rpIds
        adjust(&c)
    }
}

/// One browser on the hosted page of one attempt, with the passkey routes.
struct PasskeyPageBrowser {
    let server: TestServer
    let browser: ScriptedBrowser
    let attempt: NativeAttempt

    init(_ server: TestServer, browser: ScriptedBrowser? = nil) throws {
        self.server = server
        self.browser = try browser ?? server.browser()
        attempt = try NativeAttempt.create(server)
        _ = try self.browser.loadPage(attempt.created.authorizeUrl)
    }

    func post(_ path: String, _ body: [String: Any]) throws -> HTTPAnswer {
        try browser.request(
            "POST", server.base + "/browser/passkeys/" + path, headers: [("Content-Type", "application/json")],
            body: [UInt8](try JSONSerialization.data(withJSONObject: body)))
    }

    func list() throws -> [[String: Any]] {
        let answer = try browser.request("GET", server.base + "/browser/passkeys/list", stateChanging: false)
        #expect(answer.status == 200, "\(answer.text)")
        return (try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])?["passkeys"] as? [[String: Any]]
            ?? []
    }

    func options(_ kind: String) throws -> [String: Any] {
        let answer = try post(kind + "/options", ["attemptId": attempt.id])
        #expect(answer.status == 200, "\(answer.text)")
        return try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any] ?? [:]
    }

    /// Registers `authenticator`'s credential for the signed-in account; answers the register answer.
    func register(_ authenticator: TestAuthenticator, format: String = "none", bend: TestAuthenticator.Bend = .init())
        throws -> HTTPAnswer
    {
        let options = try options("register")
        let challenge = options["challenge"] as? String ?? ""
        let user = options["user"] as? [String: Any]
        authenticator.userHandle = Base64URL.decode(user?["id"] as? String ?? "") ?? []
        let made = authenticator.register(
            challenge: challenge, origin: server.origin, rpId: "localhost", format: format, bend: bend)
        return try post(
            "register", ["attemptId": attempt.id, "credential": authenticator.registrationJSON(made), "name": "Laptop"])
    }

    /// Signs in with `authenticator`'s credential; answers the sign-in answer.
    func signIn(_ authenticator: TestAuthenticator, bend: TestAuthenticator.Bend = .init()) throws -> HTTPAnswer {
        let options = try options("signin")
        #expect(options["rpId"] as? String == "localhost")
        #expect(options["userVerification"] as? String == "required")
        let made = authenticator.assert(
            challenge: options["challenge"] as? String ?? "", origin: server.origin, rpId: "localhost", bend: bend)
        return try post("signin", ["attemptId": attempt.id, "credential": authenticator.assertionJSON(made)])
    }

    /// Continues the attempt with the browser's session and exchanges the code, as the native host does.
    func continueAndExchange() throws -> ExchangeResponse {
        guard let session = try browser.currentSession() else {
            throw ScriptedBrowserError.malformedAnswer(status: 0, detail: "no session")
        }
        let callback = try browser.authorize(attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId)
        let answer = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
        #expect(answer.status == 200, "\(answer.text)")
        return try answer.decode(ExchangeResponse.self)
    }
}

@Suite(.dedicatedThread) struct PasskeyRouteTests {
    @Test(arguments: [TestSigner.Kind.p256, .rsa(bits: 2048), .ed25519])
    func aPasskeyRegisteredAfterSignInSignsInAndContinuesTheNativeAttempt(kind: TestSigner.Kind) throws {
        let server = try passkeyServer()
        let authenticator = TestAuthenticator(kind)
        // Signed in with the test account's code, the page registers a passkey.
        let first = try PasskeyPageBrowser(server)
        let signedIn = try first.browser.verifySignIn(email: testBase, code: "000000")
        let registered = try first.register(authenticator, format: kind == .p256 ? "packed" : "none")
        #expect(registered.status == 200, "\(registered.text)")
        let listed = try first.list()
        #expect(listed.count == 1)
        #expect(listed.first?["name"] as? String == "Laptop")
        #expect(listed.first?["rpId"] as? String == "localhost")
        #expect(listed.first?["transports"] as? [String] == ["internal"])
        #expect(listed.first?["lastUsedAt"] == nil)
        _ = try first.continueAndExchange()

        // Another browser, not signed in: the passkey alone signs in and continues a new attempt.
        let second = try PasskeyPageBrowser(server)
        #expect(try second.browser.currentSession() == nil)
        let answer = try second.signIn(authenticator)
        #expect(answer.status == 200, "\(answer.text)")
        let exchanged = try second.continueAndExchange()
        #expect(exchanged.session.authMethod == "passkey")
        #expect(exchanged.session.account.userId == signedIn.account.userId)
        #expect(try second.list().first?["lastUsedAt"] != nil)
    }

    @Test func challengesAreSingleUseAndBoundToTheBrowser() throws {
        let server = try passkeyServer()
        let authenticator = TestAuthenticator(.p256)
        let page = try PasskeyPageBrowser(server)
        _ = try page.browser.verifySignIn(email: testBase, code: "000000")
        #expect(try page.register(authenticator).status == 200)

        // The same answer twice: the second finds no challenge.
        let options = try page.options("signin")
        let made = authenticator.assert(challenge: options["challenge"] as! String, origin: server.origin, rpId: "localhost")
        let body: [String: Any] = ["attemptId": page.attempt.id, "credential": authenticator.assertionJSON(made)]
        // Another browser (no binding cookie) cannot answer this browser's challenge.
        let other = try server.browser()
        let stolen = try other.request(
            "POST", server.base + "/browser/passkeys/signin", headers: [("Content-Type", "application/json")],
            body: [UInt8](try JSONSerialization.data(withJSONObject: body)))
        expectError(stolen, .browserMismatch)
        #expect(try page.post("signin", body).status == 200)
        expectError(try page.post("signin", body), .passkeyInvalid)

        // A failed answer uses the challenge up too.
        let next = try page.options("signin")
        var bad = authenticator.assert(challenge: next["challenge"] as! String, origin: server.origin, rpId: "localhost")
        bad.signature[bad.signature.count - 1] ^= 1
        expectError(
            try page.post("signin", ["attemptId": page.attempt.id, "credential": authenticator.assertionJSON(bad)]),
            .passkeyInvalid)
        let retry = authenticator.assert(challenge: next["challenge"] as! String, origin: server.origin, rpId: "localhost")
        expectError(
            try page.post("signin", ["attemptId": page.attempt.id, "credential": authenticator.assertionJSON(retry)]),
            .passkeyInvalid)

        // An answer from another origin, or for another challenge, is refused.
        let third = try page.options("signin")
        let elsewhere = authenticator.assert(
            challenge: third["challenge"] as! String, origin: "http://localhost:1", rpId: "localhost")
        expectError(
            try page.post("signin", ["attemptId": page.attempt.id, "credential": authenticator.assertionJSON(elsewhere)]),
            .passkeyInvalid)

        // The challenge expires with the attempt (and its binding cookie).
        _ = try page.options("signin")
        server.time.advance(server.server.configuration.lifetimeMillis + 1)
        let late = authenticator.assert(challenge: "x", origin: server.origin, rpId: "localhost")
        expectError(
            try page.post("signin", ["attemptId": page.attempt.id, "credential": authenticator.assertionJSON(late)]),
            .attemptExpired)

        // Nothing of a challenge is kept after use; the challenge itself never is.
        let db = server.server.configuration.databasePath
        if !PostgresCluster.selectedForTests {
            let bytes = ["", "-wal"].compactMap { FileManager.default.contents(atPath: db + $0) }.reduce(Data(), +)
            #expect(bytes.range(of: Data((options["challenge"] as! String).utf8)) == nil)
        }
        #expect(!CapturedLogs.all.contains(options["challenge"] as! String))
    }

    @Test func userVerificationClonesAndDisabledUsersAreRefused() throws {
        let server = try passkeyServer()
        let authenticator = TestAuthenticator(.ed25519)
        let page = try PasskeyPageBrowser(server)
        _ = try page.browser.verifySignIn(email: testBase, code: "000000")
        expectError(try page.register(authenticator, bend: .init(userVerified: false)), .passkeyUserVerificationFailed)
        #expect(try page.list().isEmpty)
        #expect(try page.register(authenticator).status == 200)

        expectError(try page.signIn(authenticator, bend: .init(userVerified: false)), .passkeyUserVerificationFailed)
        authenticator.counter = 10
        #expect(try page.signIn(authenticator).status == 200)  // the authenticator counts 11
        authenticator.counter = 5
        expectError(try page.signIn(authenticator), .passkeyCloned)

        let disabled = try ServerBinary.run([
            "users", "disable", testBase, "--database", server.server.configuration.databasePath,
        ])
        #expect(disabled.status == 0, "\(disabled.err)")
        authenticator.counter = 20
        let fresh = try PasskeyPageBrowser(server)
        expectError(try fresh.signIn(authenticator), .authUserDisabled)
    }

    @Test func theAccountListsRenamesAndDeletesItsPasskeys() throws {
        let server = try passkeyServer()
        let laptop = TestAuthenticator(.p256)
        let phone = TestAuthenticator(.ed25519)
        let page = try PasskeyPageBrowser(server)
        // Registration is for an account already signed in.
        expectError(try page.post("register/options", ["attemptId": page.attempt.id]), .loginRequired)
        _ = try page.browser.verifySignIn(email: testBase, code: "000000")
        #expect(try page.register(laptop).status == 200)
        #expect(try page.register(phone).status == 200)
        let ids = try page.list().compactMap { $0["id"] as? String }
        #expect(Set(ids) == [Base64URL.encode(laptop.credentialId), Base64URL.encode(phone.credentialId)])
        // The same credential again is refused; the options exclude what is registered.
        let options = try page.options("register")
        #expect((options["excludeCredentials"] as? [[String: Any]])?.count == 2)
        #expect((options["authenticatorSelection"] as? [String: Any])?["residentKey"] as? String == "required")

        let phoneId = Base64URL.encode(phone.credentialId)
        #expect(try page.post("rename", ["id": phoneId, "name": "Phone"]).status == 200)
        #expect(try page.list().first { $0["id"] as? String == phoneId }?["name"] as? String == "Phone")
        expectError(try page.post("rename", ["id": phoneId, "name": ""]), .invalidRequest)

        // Another account sees none of them and can change none.
        let stranger = try PasskeyPageBrowser(server)
        _ = try stranger.browser.verifySignIn(email: "dev+bltest-other@example.com", code: "000000")
        #expect(try stranger.list().isEmpty)
        expectError(try stranger.post("rename", ["id": phoneId, "name": "Mine"]), .passkeyUnknown)
        expectError(try stranger.post("delete", ["id": phoneId]), .passkeyUnknown)

        #expect(try page.post("delete", ["id": phoneId]).status == 200)
        #expect(try page.list().count == 1)
        // A deleted passkey signs in no more.
        let fresh = try PasskeyPageBrowser(server)
        expectError(try fresh.signIn(phone), .passkeyUnknown)
        #expect(try fresh.signIn(laptop).status == 200)
    }

    @Test func anIPLiteralRelyingPartyStopsStartUp() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/server.json"
        let json = """
            {"clients": [{"clientId": "a", "appName": "A", "returnUrls": ["x.y:/c"], "policy": "confirm"}],
             "database": "db.sqlite", "port": 0, "passkeyRpIds": ["localhost", "127.0.0.1"]}
            """
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        let run = try ServerBinary.run(["--config", path])
        #expect(run.status == 78, "\(run.err)")
        #expect(run.err.contains("invalid configuration: passkeyRpIds[1]: not-ip:"), "\(run.err)")
    }

    @Test func aPageWhoseOriginNamesNoConfiguredRelyingPartyHasNoPasskeys() throws {
        // localhost, but only login.example.com is configured.
        let elsewhere = try passkeyServer(rpIds: ["login.example.com"])
        let page = try PasskeyPageBrowser(elsewhere)
        expectError(try page.post("signin/options", ["attemptId": page.attempt.id]), .passkeyRpNotConfigured)
        #expect(!(try page.browser.loadPage(page.attempt.created.authorizeUrl)).contains("data-passkeys"))
        // An IP-literal origin (the default http://127.0.0.1:PORT) names none, whatever is configured.
        let literal = try TestServer { $0.passkeyRpIds = ["localhost"] }
        let literalPage = try PasskeyPageBrowser(literal)
        _ = try literalPage.browser.verifySignIn(email: testBase, code: "000000")
        expectError(try literalPage.post("register/options", ["attemptId": literalPage.attempt.id]), .passkeyRpNotConfigured)
        // Configured: the page offers passkeys.
        let configured = try passkeyServer()
        let configuredPage = try PasskeyPageBrowser(configured)
        #expect(try configuredPage.browser.loadPage(configuredPage.attempt.created.authorizeUrl).contains("data-passkeys=\"on\""))
        #expect(try configured.get(configured.base + "/browser/passkeys/page.js").status == 200)
    }
}
