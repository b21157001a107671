import BrowserLoginProtocol
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

@Suite(.dedicatedThread) struct HostedPageTests {
    @Test func thePageIsServedStrictlyAndBindsTheAttempt() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let page = try server.get(attempt.created.authorizeUrl)
        #expect(page.status == 200)
        #expect(page.header("content-type") == "text/html; charset=utf-8")
        #expect(page.header("cache-control") == "no-store")
        #expect(page.header("referrer-policy") == "no-referrer")
        let csp = try #require(page.header("content-security-policy"))
        for directive in [
            "default-src 'none'", "frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'", "script-src 'self'",
        ] {
            #expect(csp.contains(directive))
        }
        // No external assets, no inline script.
        #expect(!page.text.contains("http://") && !page.text.contains("https://"))
        #expect(page.text.contains(#"<script src="/browser-login/browser/login.js"></script>"#))
        #expect(!page.text.contains(attempt.id))
        let cookie = try #require(page.headers("set-cookie").first)
        #expect(cookie.hasPrefix("__Host-bl_bind_"))
        for attribute in ["Path=/", "Secure", "HttpOnly", "SameSite=Lax"] { #expect(cookie.contains(attribute)) }
        // The first load binds: a second load (another browser) gets no binding.
        #expect(try server.get(attempt.created.authorizeUrl).headers("set-cookie").isEmpty)
        for asset in ["/browser/login.js", "/browser/login.css"] {
            let answer = try server.get(server.base + asset)
            #expect(answer.status == 200 && answer.header("cache-control") == "no-store")
        }
        let script = try server.get(server.base + "/browser/login.js").text
        #expect(
            script.contains("location.assign(callbackUrl)") && !script.contains("localStorage") && !script.contains("console."))
    }

    @Test func describeIsGuestReadableEvenWithAnExpiredCookie() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 10_000 }
        expectError(try server.get(server.base + "/browser/attempts/nope"), .attemptUnknown)
        let browser = try server.browser()
        try browser.verifySignIn(email: testBase, code: "000000")
        server.time.advance(20_000)  // the browser's session cookie is now expired at the server
        let attempt = try NativeAttempt.create(server)
        let described = try browser.describe(attemptId: attempt.id)
        #expect(
            described
                == DescribeResponse(
                    attemptId: attempt.id, appName: "Notes", clientId: confirmClient, policy: .confirm, state: .pending,
                    expiresAt: attempt.created.expiresAt))
        let guest = try server.get(server.base + "/browser/attempts/" + attempt.id)
        #expect(guest.status == 200)
        let stale = try server.get(
            server.base + "/browser/attempts/" + attempt.id, headers: [("Cookie", "__Host-bl_session=stale")])
        #expect(stale.status == 200)
        #expect(try browser.currentSession() == nil)
    }

    @Test func theAppliedPolicyIsAutomaticOnlyForHTTPS() throws {
        let server = try TestServer()
        let web = try NativeAttempt.create(server, client: httpsClient, returnUrl: httpsReturn)
        let custom = try NativeAttempt.create(server, client: autoCustomClient, returnUrl: autoCustomReturn)
        let browser = try server.browser()
        #expect(try browser.describe(attemptId: web.id).policy == .automatic)
        #expect(try browser.describe(attemptId: custom.id).policy == .confirm)
        // Automatic on an https attempt: no Continue needed.
        let callback = try browser.signInAndAuthorize(authorizeURL: web.created.authorizeUrl, email: testBase, code: "000000")
        #expect(callback.hasPrefix(httpsReturn + "?code="))
        // automatic where the applied policy is confirm: refused.
        try browser.loadPage(custom.created.authorizeUrl)
        let session = try #require(try browser.currentSession())
        #expect(throws: ScriptedBrowserError.self) {
            try browser.authorize(attemptId: custom.id, decision: .automatic, expectedSessionId: session.sessionId)
        }
        do {
            _ = try browser.authorize(attemptId: custom.id, decision: .automatic, expectedSessionId: session.sessionId)
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "POLICY_MISMATCH")
        }
    }
}

@Suite(.dedicatedThread) struct AuthorizeTests {
    @Test func authorizeChecksOriginBindingSessionAndState() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let url = server.base + "/browser/attempts/\(attempt.id)/authorize"
        let json = [("Content-Type", "application/json")]
        func post(_ headers: [(String, String)], _ body: String = #"{"decision":"continue","expectedSessionId":"x"}"#) throws
            -> HTTPAnswer
        {
            try browser.request("POST", url, headers: json + headers, body: Array(body.utf8), stateChanging: false)
        }
        expectError(try post([]), .originMismatch)
        expectError(try post([("Origin", "http://evil.example")]), .originMismatch)
        expectError(try post([("Origin", server.origin), ("Sec-Fetch-Site", "cross-site")]), .originMismatch)
        expectError(try post([("Origin", server.origin)], "{}"), .invalidRequest)
        expectError(try post([("Origin", server.origin)]), .loginRequired)
        let session = try browser.verifySignIn(email: testBase, code: "000000")
        let wrong = #"{"decision":"continue","expectedSessionId":"another"}"#
        expectError(try post([("Origin", server.origin), ("Sec-Fetch-Site", "same-origin")], wrong), .sessionChanged)
        let first = try browser.authorize(attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId)
        // Again with the same session: the same callback URL.
        #expect(try browser.authorize(attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId) == first)
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .authorized)
        // Another session on the authorized attempt: SESSION_CHANGED, no new code.
        let other = try browser.verifySignIn(email: "dev+bltestother@example.com", code: "000000")
        let answer = try browser.request(
            "POST", url, headers: json,
            body: Array(#"{"decision":"continue","expectedSessionId":"\#(other.sessionId)"}"#.utf8))
        expectError(answer, .sessionChanged)
        expectError(
            try browser.request("POST", server.base + "/browser/attempts/nope/authorize", headers: json, body: Array(wrong.utf8)),
            .attemptUnknown)
    }

    @Test func aLeakedAttemptIdCannotBeAuthorizedElsewhere() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let owner = try server.browser()
        try owner.loadPage(attempt.created.authorizeUrl)
        let thief = try server.browser()
        #expect(try thief.describe(attemptId: attempt.id).state == .pending)
        do {
            _ = try thief.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
            Issue.record("a second browser authorized the attempt")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "BROWSER_MISMATCH")
        }
        let callback = try owner.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        #expect(callback.hasPrefix(confirmReturn + "?code="))
    }

    /// §6: authorize without this attempt's binding cookie answers
    /// 403 BROWSER_MISMATCH (no cookie, or a cookie for another attempt);
    /// a wrong Origin is still ORIGIN_MISMATCH.
    @Test func authorizeWithoutTheBindingCookieIsABrowserMismatch() throws {
        let server = try TestServer()
        let mine = try NativeAttempt.create(server)
        let theirs = try NativeAttempt.create(server)
        let unopened = try NativeAttempt.create(server)
        // The binding cookies ("name=secret") as each attempt's first load sets them.
        func bind(_ attempt: NativeAttempt) throws -> (name: String, secret: String) {
            let page = try server.get(attempt.created.authorizeUrl)
            let pair = try #require(page.headers("set-cookie").first?.split(separator: ";").first)
            let eq = try #require(pair.firstIndex(of: "="))
            return (String(pair[..<eq]), String(pair[pair.index(after: eq)...]))
        }
        let mineCookie = try bind(mine)
        let theirsCookie = try bind(theirs)
        let body = Array(#"{"decision":"continue","expectedSessionId":"x"}"#.utf8)
        func authorize(_ attempt: NativeAttempt, cookie: String?, origin: String? = nil) throws -> HTTPAnswer {
            var headers = [("Content-Type", "application/json"), ("Origin", origin ?? server.origin)]
            if let cookie { headers.append(("Cookie", cookie)) }
            return try RawHTTP.send(
                "POST", server.base + "/browser/attempts/\(attempt.id)/authorize", headers: headers, body: body)
        }
        // With its own binding cookie the request gets past the binding (and wants a session).
        expectError(try authorize(mine, cookie: "\(mineCookie.name)=\(mineCookie.secret)"), .loginRequired)
        // No binding cookie at all.
        expectError(try authorize(mine, cookie: nil), .browserMismatch)
        expectError(try authorize(unopened, cookie: nil), .browserMismatch)
        // A binding cookie for another attempt: under its own name, or its secret under this attempt's name.
        expectError(try authorize(theirs, cookie: "\(mineCookie.name)=\(mineCookie.secret)"), .browserMismatch)
        expectError(try authorize(theirs, cookie: "\(theirsCookie.name)=\(mineCookie.secret)"), .browserMismatch)
        expectError(try authorize(unopened, cookie: "\(mineCookie.name)=\(mineCookie.secret)"), .browserMismatch)
        // A browser that opened one attempt, signed in, cannot authorize another it did not open.
        let browser = try server.browser()
        try browser.loadPage(mine.created.authorizeUrl)
        let session = try browser.verifySignIn(email: testBase, code: "000000")
        do {
            _ = try browser.authorize(attemptId: theirs.id, decision: .continue, expectedSessionId: session.sessionId)
            Issue.record("authorized an attempt bound to another browser")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "BROWSER_MISMATCH")
        }
        // A wrong Origin is still ORIGIN_MISMATCH, with or without the binding cookie.
        let evil = "http://evil.example"
        expectError(try authorize(mine, cookie: "\(mineCookie.name)=\(mineCookie.secret)", origin: evil), .originMismatch)
        expectError(try authorize(mine, cookie: nil, origin: evil), .originMismatch)
        // Declining is bound the same way.
        expectError(
            try RawHTTP.send(
                "POST", server.base + "/browser/attempts/\(theirs.id)/decline",
                headers: [("Content-Type", "application/json"), ("Origin", server.origin)], body: Array("{}".utf8)),
            .browserMismatch)
        #expect(try theirs.status(server).decode(StatusResponse.self).state == .pending)
    }

    @Test func authorizeRefusesEndedAttempts() throws {
        let server = try TestServer()
        let browser = try server.browser()
        try browser.verifySignIn(email: testBase, code: "000000")
        let expired = try NativeAttempt.create(server)
        try browser.loadPage(expired.created.authorizeUrl)
        server.time.advance(120_000)
        do {
            _ = try browser.signInAndAuthorize(authorizeURL: expired.created.authorizeUrl, email: testBase, code: "000000")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "ATTEMPT_EXPIRED")
        }
        let cancelled = try NativeAttempt.create(server)
        try browser.loadPage(cancelled.created.authorizeUrl)
        _ = try server.native("/attempts/\(cancelled.id)/cancel", cancelled.recoveryJSON)
        do {
            _ = try browser.signInAndAuthorize(authorizeURL: cancelled.created.authorizeUrl, email: testBase, code: "000000")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "ATTEMPT_CANCELLED")
        }
        let (done, _) = try login(server, browser: browser)
        do {
            _ = try browser.signInAndAuthorize(authorizeURL: done.created.authorizeUrl, email: testBase, code: "000000")
        } catch let error as ScriptedBrowserError {
            #expect(error.code == "ATTEMPT_ALREADY_EXCHANGED")
        }
    }

    @Test func declineCancelsAndAnswersAccessDenied() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let callbackURL = try server.browser().decline(authorizeURL: attempt.created.authorizeUrl)
        #expect(callbackURL == confirmReturn + "?error=access_denied&attempt=\(attempt.id)&iss=" + percentEncode(server.origin))
        let callback = try Callback(parsing: callbackURL)
        #expect(callback.outcome == .error("access_denied"))
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .cancelled)
        expectError(try attempt.exchange(server, code: "x"), .attemptCancelled)
        // Another browser cannot decline a bound attempt.
        let bound = try NativeAttempt.create(server)
        try server.browser().loadPage(bound.created.authorizeUrl)
        #expect(throws: ScriptedBrowserError.self) { try server.browser().decline(authorizeURL: bound.created.authorizeUrl) }
    }

    @Test func signOutEndsTheNativeSessionsIssuedFromIt() throws {
        let server = try TestServer()
        let browser = try server.browser()
        let (_, issued) = try login(server, browser: browser)
        expectError(
            try browser.request(
                "POST", server.base + "/browser/signout", headers: [("Content-Type", "application/json")],
                body: Array("{}".utf8), stateChanging: false),
            .originMismatch)
        try browser.signOut()
        #expect(try browser.currentSession() == nil)
        expectError(try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)), .sessionRevoked)
    }
}

@Suite(.dedicatedThread) struct SignInTests {
    @Test func anEmailedCodeSignsInOnce() throws {
        let server = try TestServer()
        let email = "alice@example.org"
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        let callback = try browser.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: email) {
            try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        }
        let messages = OutboxMailSender.messages(in: server.outbox, to: email)
        #expect(messages.count == 1)
        let code = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        #expect(code != "000000")
        let issued = try attempt.exchange(
            server, code: try LoginServerTests.code(of: callback, attempt: attempt, issuer: server.origin)
        )
        .decode(ExchangeResponse.self)
        #expect(issued.session.authMethod == "email" && issued.session.account.email == email)
        // Single use.
        do {
            _ = try server.browser().verifySignIn(email: email, code: code)
            Issue.record("a code worked twice")
        } catch let error as ScriptedBrowserError { #expect(error.code == "OTP_EXPIRED") }
    }

    @Test func wrongCodesAndExpiry() throws {
        let server = try TestServer()
        let email = "bob@example.org"
        let browser = try server.browser()
        func verify(_ code: String) -> String? {
            do {
                _ = try browser.verifySignIn(email: email, code: code)
                return nil
            } catch let error as ScriptedBrowserError { return error.code } catch { return "\(error)" }
        }
        #expect(verify("123456") == "OTP_EXPIRED")  // no code was sent
        try browser.startSignIn(email: email)
        let code = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        let wrong = code == "111111" ? "222222" : "111111"
        for _ in 0..<4 { #expect(verify(wrong) == "OTP_INVALID") }
        #expect(verify(wrong) == "OTP_MAX_ATTEMPTS")
        #expect(verify(code) == "OTP_MAX_ATTEMPTS")  // even the right code needs a new email now
        try browser.startSignIn(email: email)
        #expect(OutboxMailSender.messages(in: server.outbox, to: email).count == 2)
        let second = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        server.time.advance(600_000)
        #expect(verify(second) == "OTP_EXPIRED")
        try browser.startSignIn(email: email)
        let third = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        server.time.advance(599_000)
        #expect(verify(third) == nil)
        #expect((try browser.currentSession())?.account.email == email)
        do {
            try browser.startSignIn(email: "not an email")
        } catch let error as ScriptedBrowserError { #expect(error.code == "INVALID_REQUEST") }
    }

    @Test(arguments: [
        ("dev@example.com", false), ("DEV@Example.com", false), ("dev+bltest@example.com", true),
        ("dev+bltest1@example.com", true), ("dev+bltest.a-b_C9@example.com", true), ("dev+other@example.com", false),
        ("dev+bltest+x@example.com", false), ("dev+bltest!@example.com", false), ("dev@example.org", false),
        ("xdev+bltest@example.com", false), ("dev+bltes@example.com", false),
    ])
    func testAccountsUseTheFixedCode(email: String, isTest: Bool) throws {
        let server = try TestServer()
        let browser = try server.browser()
        try browser.startSignIn(email: email)
        let result = Result { try browser.verifySignIn(email: email, code: "000000") }
        switch result {
        case .success(let session):
            #expect(isTest)
            #expect(session.authMethod == "test")
        case .failure(let error):
            #expect(!isTest, "\(error)")
            #expect((error as? ScriptedBrowserError)?.code == "OTP_INVALID")
        }
        #expect(OutboxMailSender.messages(in: server.outbox, to: email).count == (isTest ? 0 : 1))
    }
}
