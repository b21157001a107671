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

/// The reference server signing people in with an upstream OpenID provider
/// it did not write (django-oauth-toolkit, Tests/Provider/README.md) on its
/// hosted page (docs/server.md "Upstream providers"), end to end: the real
/// server binary, the provider over HTTP, the scripted browsers of both.
/// Skipped only when the provider is not installed and `BL_REQUIRE_PROVIDER`
/// is unset (CI sets it).
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct UpstreamSignInTests {
    /// An attempt's `prompt: "login"` and `loginHint` (PROTOCOL.md §5.1) go on
    /// to the provider as OpenID Connect's `prompt=login` and `login_hint`;
    /// an attempt without them sends neither.
    @Test func promptAndLoginHintGoOnToTheProvider() throws {
        let world = try UpstreamWorld()
        let browser = try world.browser()
        let plain = try world.createAttempt()
        try browser.loadPage(plain.authorizeUrl)
        let without = try world.startUpstream(browser, attemptId: plain.attemptId).authorizeUrl
        #expect(without.hasPrefix(world.provider.issuer + "/authorize/?"))
        #expect(!without.contains("prompt=") && !without.contains("login_hint="), "\(without)")
        let asked = try world.createAttempt(prompt: "login", loginHint: "alice+work@example.com")
        try browser.loadPage(asked.authorizeUrl)
        let with = try world.startUpstream(browser, attemptId: asked.attemptId).authorizeUrl
        #expect(with.contains("&prompt=login"), "\(with)")
        #expect(with.contains("&login_hint=alice%2Bwork%40example.com"), "\(with)")
        #expect(with.components(separatedBy: "prompt=").count == 2)
    }

    /// Sign in with the provider on the hosted page, land back on the
    /// attempt's page signed in, approve, and let the real broker finish:
    /// the browser session and the app's session record the provider's name
    /// as `authMethod`. No code, token, state, nonce, verifier or secret
    /// reaches the server's log, and the database keeps none of them.
    @Test func aSignInThroughTheProviderFinishedByTheBroker() throws {
        let world = try UpstreamWorld()
        let h = world.h
        h.writeClient()
        try h.startBroker()
        let rpc = try h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let authorizeURL = try #require(attempt["authorizeUrl"]?.stringValue)
        let attemptId = Harness.serverAttemptId(authorizeURL)

        let browser = try world.browser()
        let page = try browser.loadPage(authorizeURL)
        #expect(page.contains(#"data-provider="dot">Sign in with dot</button>"#), "\(page)")
        let start = try world.startUpstream(browser, attemptId: attemptId)
        let providerURL = start.authorizeUrl
        #expect(providerURL.hasPrefix(world.provider.issuer + "/authorize/?"))
        for part in [
            "response_type=code", "client_id=login-server", "code_challenge_method=S256", "state=", "nonce=",
            "redirect_uri=" + percentEncode(world.callbackURI), "scope=openid%20email%20profile",
        ] {
            #expect(providerURL.contains(part), "\(part) in the authorize URL")
        }
        let redirect = try world.provider.authorize(providerURL)
        #expect(redirect.hasPrefix(world.callbackURI + "?"), "\(redirect)")
        #expect(redirect.contains("iss="))

        let landed = try browser.request("GET", redirect, stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        let session = try #require(try browser.currentSession())
        #expect(landed.header("location") == authorizeURL + "#signed_in=" + session.sessionId)
        #expect(session.authMethod == "dot")
        #expect(session.account.email == "alice@example.com")
        #expect(session.account.displayName == "Alice Example")

        // Back on the attempt's page, signed in: approve as today.
        let callback = try browser.signInAndAuthorize(authorizeURL: authorizeURL, email: "unused@example.com", code: "0")
        let finished = try h.cli(["finish", callback])
        #expect(finished.status == 0, "\(finished.out)\(finished.err)")
        let view = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(view["status"] == "signedIn")
        #expect(view["authMethod"] == "dot")
        #expect(view["account"]?["email"] == "alice@example.com")

        // The secrets of the round trip: the code and state of the redirect,
        // the nonce of the authorize URL, the cookie's handle, and the state,
        // nonce and verifier the server derived from it.
        let handle = try #require(start.handle)
        let derived = try world.derived(handle)
        #expect(derived.state == CallbackURL.value(redirect, "state").flatMap { percentDecode($0[...]) })
        #expect(derived.nonce == CallbackURL.value(providerURL, "nonce").flatMap { percentDecode($0[...]) })
        // The tokens the provider issued to the server, from its own database.
        let issued = try runProgram(
            TestProvider.virtualEnvironment + "/bin/python",
            [
                "-c",
                "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); print('\\n'.join(r[0] for r in db.execute("
                    + "'SELECT token FROM oauth2_provider_accesstoken UNION ALL SELECT token FROM oauth2_provider_refreshtoken') if r[0]))",
                world.provider.directory + "/provider.sqlite3",
            ])
        let tokens = issued.out.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
        #expect(issued.status == 0 && tokens.count >= 1, "\(issued.err)")
        let secrets: [(String, String)] =
            [
                ("code", try #require(CallbackURL.value(redirect, "code").flatMap { percentDecode($0[...]) })),
                ("state", derived.state), ("nonce", derived.nonce), ("verifier", derived.verifier), ("handle", handle),
                ("client secret", "login-server-secret"), ("attempt id", attemptId),
            ] + tokens.map { ("provider's token", $0) }
        h.stopServer()
        let log = try String(contentsOfFile: h.dir + "/server.log", encoding: .utf8)
        #expect(log.contains("upstream sign-in completed"), "\(log)")
        let database = world.serverDatabaseBytes()
        for (what, secret) in secrets {
            #expect(!log.contains(secret), "the \(what) is in the server's log")
            if what != "client secret" { #expect(!database.contains(secret), "the \(what) is in the server's database") }
        }
    }

    /// A provider without a name records `oidc`; a native attempt approved
    /// after it and exchanged over the server's native routes inherits it.
    @Test func theDefaultNameIsOIDCAndNativeSessionsInheritIt() throws {
        let world = try UpstreamWorld(name: nil)
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        #expect(try browser.loadPage(attempt.authorizeUrl).contains("Sign in with oidc"))
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId, provider: "oidc")
        let landed = try browser.request("GET", try world.provider.authorize(start.authorizeUrl), stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        let session = try #require(try browser.currentSession())
        #expect(session.authMethod == "oidc")
        let callback = try browser.authorize(
            attemptId: attempt.attemptId, decision: .continue, expectedSessionId: session.sessionId)
        let issued = try world.exchange(attempt, callback: callback)
        #expect(issued["session"]?["authMethod"] == "oidc")
        #expect(issued["session"]?["account"]?["email"] == "alice@example.com")
    }

    /// A public client (no secret): PKCE alone protects the code.
    @Test func aPublicClientSignsInWithPKCEAlone() throws {
        let world = try UpstreamWorld(name: "public", publicClient: true)
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId, provider: "public")
        #expect(start.authorizeUrl.contains("client_id=login-server-public"))
        let landed = try browser.request("GET", try world.provider.authorize(start.authorizeUrl), stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        #expect(try browser.currentSession()?.authMethod == "public")
    }

    /// A redirect on any address but a configured redirect URI, compared as
    /// strings, is refused with `INVALID_REDIRECT_URI` and changes nothing:
    /// the round trip still completes on its own redirect URI.
    @Test func anUnknownRedirectURIIsInvalid() throws {
        let world = try UpstreamWorld()
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let redirect = try world.provider.authorize(start.authorizeUrl)
        let query = String(redirect[redirect.firstIndex(of: "?")!...])
        let base = world.origin + "/browser-login/browser/upstream/callback"
        for wrong in [base, base + "/other", base + "/dot/", base + "/DOT", base + "/dot/extra"] {
            let answer = try browser.request("GET", wrong + query, stateChanging: false)
            #expect(answer.status == 400, "\(wrong)")
            #expect(answer.text.contains("Invalid redirect URI"), "\(wrong): \(answer.text)")
            #expect(answer.text.contains("INVALID_REDIRECT_URI"), "\(wrong)")
            #expect(answer.header("content-security-policy")?.contains("default-src 'none'") == true)
        }
        #expect(try browser.currentSession() == nil)
        let landed = try browser.request("GET", redirect, stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        #expect(try browser.currentSession()?.authMethod == "dot")
    }

    /// The redirect must carry this browser's round trip's `state`, come back
    /// on the redirect URI of the provider it was started with (the mix-up
    /// defence), name the provider's issuer in `iss` (RFC 9207: DOT promises
    /// it), and name each parameter once. Each refusal changes nothing; the
    /// genuine redirect then signs in once, and never again: not replayed,
    /// and not in another browser.
    @Test func forgedAndReplayedRedirectsAreRefused() throws {
        let world = try UpstreamWorld(secondProvider: true)
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let redirect = try world.provider.authorize(start.authorizeUrl)
        let refusals: [(String, String, String)] = [
            ("another state", CallbackURL.replacing(redirect, "state", with: "not-the-state"), "UPSTREAM_STATE_MISMATCH"),
            ("no state", CallbackURL.replacing(redirect, "state", with: nil), "UPSTREAM_CALLBACK_INVALID"),
            (
                "another issuer", CallbackURL.replacing(redirect, "iss", with: percentEncode("https://evil.example/o")),
                "UPSTREAM_ISSUER_MISMATCH"
            ),
            ("no issuer", CallbackURL.replacing(redirect, "iss", with: nil), "UPSTREAM_ISSUER_MISMATCH"),
            ("code twice", redirect + "&code=again", "UPSTREAM_CALLBACK_INVALID"),
            (
                "another provider's redirect URI",
                redirect.replacingOccurrences(of: world.callbackURI + "?", with: world.callbackURI + "2?"),
                "UPSTREAM_PROVIDER_MISMATCH"
            ),
        ]
        for (what, url, code) in refusals {
            let answer = try browser.request("GET", url, stateChanging: false)
            #expect(answer.status == 400, "\(what): \(answer.status)")
            #expect(answer.text.contains(code), "\(what): \(answer.text)")
            #expect(try browser.currentSession() == nil, "\(what)")
        }
        // The genuine redirect delivered in another browser (no round trip there): refused.
        let other = try world.browser()
        let elsewhere = try other.request("GET", redirect, stateChanging: false)
        #expect(elsewhere.status == 400)
        #expect(elsewhere.text.contains("UPSTREAM_SIGNIN_UNKNOWN"))
        #expect(try other.currentSession() == nil)

        let landed = try browser.request("GET", redirect, stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        let session = try #require(try browser.currentSession())
        // Replayed: the round trip is spent.
        let replayed = try browser.request("GET", redirect, stateChanging: false)
        #expect(replayed.status == 400)
        #expect(replayed.text.contains("UPSTREAM_SIGNIN_UNKNOWN"), "\(replayed.text)")
        #expect(try browser.currentSession()?.sessionId == session.sessionId)
    }

    /// ID tokens that fail OpenID Connect Core §3.1.3.7 (the token proxy of
    /// the broker's hostile tests tampers with the provider's answer): no
    /// one is signed in, the page says which check failed, and the tokens
    /// the provider issued are revoked there.
    @Test func forgedIDTokensSignNoOneIn() throws {
        let world = try UpstreamWorld(tokenProxy: true)
        let tampering = try #require(world.tokenProxy)
        let forgeries = TokenProxy.forgeries
        for (index, forgery) in forgeries.enumerated() {
            tampering.mode = forgery.mode
            let browser = try world.browser()
            let attempt = try world.createAttempt()
            try browser.loadPage(attempt.authorizeUrl)
            let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
            let answer = try browser.request("GET", try world.provider.authorize(start.authorizeUrl), stateChanging: false)
            #expect(answer.status == 502, "\(forgery.mode): \(answer.status)")
            #expect(answer.text.contains("UPSTREAM_ID_TOKEN_INVALID"), "\(forgery.mode): \(answer.text)")
            #expect(answer.text.contains(forgery.says), "\(forgery.mode): \(answer.text)")
            #expect(tampering.tokenRequests == index + 1, "\(forgery.mode): one exchange")
            #expect(try browser.currentSession() == nil, "\(forgery.mode)")
            let counts = try world.provider.tokenCounts()
            #expect(counts.access == 0 && counts.refresh == 0, "\(forgery.mode): \(counts)")
        }
        tampering.mode = "pass"
        let browser = try world.browser()
        let attempt = try world.createAttempt()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let landed = try browser.request("GET", try world.provider.authorize(start.authorizeUrl), stateChanging: false)
        #expect(landed.status == 303, "\(landed.text)")
        #expect(try browser.currentSession()?.authMethod == "dot")
    }

    /// The provider's own errors are shown as such: declining at its consent
    /// page (DOT's error redirect carries no `iss`), and any other error
    /// with its description, escaped.
    @Test func theProvidersErrorsAreShown() throws {
        let world = try UpstreamWorld()
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let denied = try world.provider.authorize(start.authorizeUrl, deny: true)
        #expect(denied.contains("error=access_denied"), "\(denied)")
        let answer = try browser.request("GET", denied, stateChanging: false)
        #expect(answer.status == 403)
        #expect(answer.text.contains("UPSTREAM_DENIED"), "\(answer.text)")
        #expect(answer.text.contains("was cancelled"))
        #expect(answer.text.contains("Back to sign-in"))
        #expect(try browser.currentSession() == nil)

        let again = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let state = try #require(CallbackURL.value(again.authorizeUrl, "state"))
        let failed = try browser.request(
            "GET",
            world.callbackURI + "?error=temporarily_unavailable&error_description=" + percentEncode("down <b>now</b>")
                + "&state=" + state + "&iss=" + percentEncode(world.provider.issuer), stateChanging: false)
        #expect(failed.status == 502)
        #expect(failed.text.contains("UPSTREAM_ERROR"), "\(failed.text)")
        #expect(failed.text.contains("temporarily_unavailable"))
        #expect(failed.text.contains("down &lt;b&gt;now&lt;/b&gt;"), "\(failed.text)")
        #expect(try browser.currentSession() == nil)
    }

    /// The address must be there and, when the provider says, verified.
    @Test(arguments: [("nomail", "UPSTREAM_EMAIL_MISSING"), ("unverified", "UPSTREAM_EMAIL_UNVERIFIED")])
    func theAddressMustBeSharedAndVerified(_ user: String, _ code: String) throws {
        let world = try UpstreamWorld()
        let attempt = try world.createAttempt()
        let browser = try world.browser()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try world.startUpstream(browser, attemptId: attempt.attemptId)
        let answer = try browser.request(
            "GET", try world.provider.authorize(start.authorizeUrl, user: user), stateChanging: false)
        #expect(answer.status == 403)
        #expect(answer.text.contains(code), "\(answer.text)")
        #expect(try browser.currentSession() == nil)
    }

    /// A disabled user comes back from the provider to a page that says to
    /// ask an administrator (`AUTH_USER_DISABLED`), signed out.
    @Test func aDisabledUserIsToldToAskAnAdministrator() throws {
        let world = try UpstreamWorld()
        #expect(try world.signIn(try world.browser()).status == 303)
        let disabled = try runProgram(
            binDirectory + "/browser-login-server",
            ["users", "disable", "alice@example.com", "--database", world.h.dir + "/server/server.sqlite"])
        #expect(disabled.status == 0, "\(disabled.err)")
        let browser = try world.browser()
        let answer = try world.signIn(browser)
        #expect(answer.status == 403)
        #expect(answer.text.contains("AUTH_USER_DISABLED"), "\(answer.text)")
        #expect(answer.text.contains("Ask an administrator"))
        #expect(try browser.currentSession() == nil)
    }

    /// The start route: only the browser the attempt is bound to, only a
    /// configured provider, and a provider whose discovery names another
    /// issuer than the configured one is refused before anyone leaves.
    @Test func theStartRouteRefusesWhatItCannotContinue() throws {
        let world = try UpstreamWorld(secondProvider: true, secondIssuerSuffix: "/")
        let attempt = try world.createAttempt()
        let bound = try world.browser()
        try bound.loadPage(attempt.authorizeUrl)
        let stranger = try world.browser()
        try stranger.loadPage(attempt.authorizeUrl)
        #expect(try world.startAnswer(stranger, attemptId: attempt.attemptId).errorCode == "BROWSER_MISMATCH")
        #expect(try world.startAnswer(bound, attemptId: attempt.attemptId, provider: "nobody").status == 404)
        let mismatch = try world.startAnswer(bound, attemptId: attempt.attemptId, provider: "dot2")
        #expect(mismatch.status == 502)
        #expect(mismatch.errorCode == "UPSTREAM_ERROR", "\(mismatch.text)")
        #expect(mismatch.text.contains("issuer"), "\(mismatch.text)")
        #expect(try world.startAnswer(bound, attemptId: attempt.attemptId).status == 200)
    }
}

/// A reference server (the real binary) with the test provider configured
/// as the upstream provider `dot` (client `login-server`, its secret in a
/// file), on a port chosen first so that the redirect URI can name it.
final class UpstreamWorld {
    let h: Harness
    let provider: TestProvider
    let tokenProxy: TokenProxy?
    let port: Int
    var origin: String { "http://127.0.0.1:\(port)" }
    let segment: String
    var callbackURI: String { Self.callbackURI(port: port, segment: segment) }

    /// The provider's redirect URI at the server on `port`.
    static func callbackURI(port: Int, segment: String) -> String {
        "http://127.0.0.1:\(port)/browser-login/browser/upstream/callback/" + segment
    }

    /// - Parameters:
    ///   - name: the provider's name (nil: none, so `oidc`).
    ///   - secondProvider: also `dot2`, the same client on `…/callback/dot2`.
    ///   - secondIssuerSuffix: appended to `dot2`'s issuer (a wrong issuer).
    ///   - publicClient: the provider's public client `login-server-public` (no secret) on `…/callback/public`.
    init(
        name: String? = "dot", tokenProxy useProxy: Bool = false, secondProvider: Bool = false,
        secondIssuerSuffix: String = "", publicClient: Bool = false
    ) throws {
        let segment = publicClient ? "public" : "dot"
        let h = try Harness()
        let provider = try TestProvider.start(in: h.dir + "/provider")
        let tokenProxy =
            useProxy
            ? try TokenProxy(
                dir: h.dir + "/token-proxy", upstreamPort: provider.port, signingKey: provider.directory + "/oidc-rsa.pem")
            : nil
        (self.segment, self.h, self.provider, self.tokenProxy) = (segment, h, provider, tokenProxy)
        try "login-server-secret\n".write(toFile: h.dir + "/server/dot-secret", atomically: true, encoding: .utf8)
        port = try onAFreeLoopbackPort { port in
            let callbackURI = Self.callbackURI(port: port, segment: segment)
            var dot: [String: Any] = [
                "issuer": provider.issuer, "clientId": publicClient ? "login-server-public" : "login-server",
                "scopes": ["openid", "email", "profile"], "redirectUris": [callbackURI],
            ]
            if !publicClient { dot["clientSecretFile"] = "dot-secret" }
            if let name { dot["name"] = name }
            if let tokenProxy { dot["tokenEndpoint"] = tokenProxy.tokenEndpoint }
            var providers = [dot]
            if secondProvider {
                var second = dot
                second["name"] = "dot2"
                second["issuer"] = provider.issuer + secondIssuerSuffix
                second["redirectUris"] = [callbackURI + "2"]
                providers.append(second)
            }
            let config: [String: Any] = [
                "clients": [
                    [
                        "clientId": "com.example.notes", "appName": "Example Notes",
                        "returnUrls": ["com.example.notes:/callback"],
                        "policy": "confirm",
                    ]
                ],
                "testAccounts": [Harness.baseEmail],
                "rateLimits": [
                    "create": ["burst": 1000, "perMinute": 6000], "exchange": ["burst": 1000, "perMinute": 6000],
                    "codeEntry": ["burst": 1000, "perMinute": 6000],
                ],
                "upstreamProviders": providers,
            ]
            let data = try JSONSerialization.data(withJSONObject: config)
            _ = FileManager.default.createFile(atPath: h.dir + "/server/server.json", contents: data)
            h.serverArguments = [
                "serve", "--config", h.dir + "/server/server.json", "--listen", "127.0.0.1", "--port", "\(port)",
                "--database", h.dir + "/server/server.sqlite", "--outbox", h.dir + "/server/outbox",
                "--ready-file", h.dir + "/server/ready",
            ]
            try h.launchServer()
            return port
        }
    }

    deinit { provider.stop() }

    func browser() throws -> ScriptedBrowser { try ScriptedBrowser(serverOrigin: origin) }

    struct Started {
        var authorizeUrl: String
        /// The round trip's handle, from the cookie the start set.
        var handle: String?
    }

    /// `POST {base}/browser/upstream/start` as the page's button does.
    func startAnswer(_ browser: ScriptedBrowser, attemptId: String, provider: String = "dot") throws -> HTTPAnswer {
        let body = try JSONSerialization.data(withJSONObject: ["provider": provider, "attemptId": attemptId])
        return try browser.request(
            "POST", origin + "/browser-login/browser/upstream/start", headers: [("Content-Type", "application/json")],
            body: [UInt8](body))
    }

    func startUpstream(_ browser: ScriptedBrowser, attemptId: String, provider: String = "dot") throws -> Started {
        let answer = try startAnswer(browser, attemptId: attemptId, provider: provider)
        guard answer.status == 200,
            let json = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            let url = json["authorizeUrl"] as? String
        else { throw HarnessError("the upstream start answered \(answer.status): \(answer.text)") }
        let cookie = answer.headers("set-cookie").first { $0.hasPrefix("__Host-bl_upstream=") }
        let handle = cookie.flatMap { $0.dropFirst("__Host-bl_upstream=".count).split(separator: ".").first }.map(String.init)
        return Started(authorizeUrl: url, handle: handle)
    }

    /// A whole sign-in of `user` with the provider in `browser` for a new
    /// attempt: the answer to the redirect back.
    func signIn(_ browser: ScriptedBrowser, user: String = "alice") throws -> HTTPAnswer {
        let attempt = try createAttempt()
        try browser.loadPage(attempt.authorizeUrl)
        let start = try startUpstream(browser, attemptId: attempt.attemptId)
        return try browser.request("GET", try provider.authorize(start.authorizeUrl, user: user), stateChanging: false)
    }

    struct Attempt {
        var attemptId: String
        var authorizeUrl: String
        var verifier: ProofSecret
    }

    /// A native attempt of `com.example.notes`, created over the native route as an app would
    /// (with PROTOCOL.md §5.1's `prompt` and `loginHint` when given).
    func createAttempt(prompt: String? = nil, loginHint: String? = nil) throws -> Attempt {
        let verifier = try ProofSecret.generate()
        let recovery = try ProofSecret.generate()
        let body = try JSONEncoder().encode(
            CreateAttemptRequest(
                clientId: "com.example.notes", returnUrl: "com.example.notes:/callback", codeChallenge: verifier.challenge,
                recoveryChallenge: recovery.challenge, prompt: prompt, loginHint: loginHint))
        let answer = try browser().request(
            "POST", origin + "/browser-login/native/attempts", headers: [("Content-Type", "application/json")],
            body: [UInt8](body), stateChanging: false)
        guard (200...201).contains(answer.status),
            let json = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
            let id = json["attemptId"] as? String, let url = json["authorizeUrl"] as? String
        else { throw HarnessError("create answered \(answer.status): \(answer.text)") }
        return Attempt(attemptId: id, authorizeUrl: url, verifier: verifier)
    }

    /// The native exchange of an approved attempt's callback: the answer as JSON.
    func exchange(_ attempt: Attempt, callback: String) throws -> JSONValue {
        let code = try #require(CallbackURL.value(callback, "code").flatMap { percentDecode($0[...]) })
        let body = try JSONEncoder().encode(ExchangeRequest(code: code, codeVerifier: attempt.verifier.value))
        let answer = try browser().request(
            "POST", origin + "/browser-login/native/attempts/" + attempt.attemptId + "/exchange",
            headers: [("Content-Type", "application/json")], body: [UInt8](body), stateChanging: false)
        guard answer.status == 200 else { throw HarnessError("exchange answered \(answer.status): \(answer.text)") }
        return try JSONValue.parse(answer.body)
    }

    /// The state, nonce and PKCE verifier the server derives from a round
    /// trip's handle: HMAC-SHA-256 under the server secret (the key file next
    /// to the database), as UpstreamSignIn.swift does.
    func derived(_ handle: String) throws -> (state: String, nonce: String, verifier: String) {
        let key = try [UInt8](Data(contentsOf: URL(fileURLWithPath: h.dir + "/server/server.sqlite.key")))
        func derive(_ purpose: String) -> String {
            Base64URL.encode(Crypto.hmacSHA256(key: key, message: Array((purpose + "\u{0}" + handle).utf8)))
        }
        return (derive("upstream-state"), derive("upstream-nonce"), derive("upstream-verifier"))
    }

    /// Every byte of the server's SQLite files.
    func serverDatabaseBytes() -> String {
        ["", "-wal", "-shm"].map {
            (try? Data(contentsOf: URL(fileURLWithPath: h.dir + "/server/server.sqlite" + $0))).map {
                String(decoding: $0, as: UTF8.self)
            } ?? ""
        }.joined()
    }
}
