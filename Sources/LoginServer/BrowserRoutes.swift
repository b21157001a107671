import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// Sign-in bodies of the hosted page's own routes (docs/server.md).
struct SignInStartRequest: Decodable {
    var email: String
    /// Where the email's sign-in link leads (the hosted page passes its own
    /// URL); covered by `emailRedirectUris`, else 400 INVALID_REDIRECT_URI.
    var redirectUri: String?
}

struct SignInVerifyRequest: Decodable {
    var email: String
    var code: String
    /// An invitation token (sign-up mode `invite`), e.g. from the page's `?invite=`.
    var invite: String? = nil
}

/// `GET browser/session` and `POST browser/signin/verify`: the browser
/// session's public id (never its cookie secret) and the account.
struct BrowserSessionResponse: Encodable {
    var sessionId: String
    var account: Account
    var authMethod: String
    var expiresAt: Timestamp
    /// On a finished sign-in: whether it created the user. Absent from `GET browser/session`.
    var isNewUser: Bool? = nil
    /// `true` on a test account's session (at most 30 minutes); absent otherwise.
    var testAccount: Bool? = nil
}

/// docs/protocol.md §6 and the hosted page's sign-in routes.
extension LoginService {
    func browser(_ request: HTTPServerRequest, _ rest: String, _ route: inout String) throws(APIError)
        -> HTTPServerResponse
    {
        let (key, id) = Self.routeKey(rest)
        let name: String
        let post: Bool
        let handle: (HTTPServerRequest) throws(APIError) -> HTTPServerResponse
        switch key {
        case "login": (name, post, handle) = ("page", false, loginPage)
        case "login.js":
            (name, post, handle) = (
                "script", false, { _ in HostedPage.asset(HostedPage.script, type: "text/javascript; charset=utf-8") }
            )
        case "login.css":
            (name, post, handle) = ("style", false, { _ in HostedPage.asset(HostedPage.style, type: "text/css; charset=utf-8") })
        case "session": (name, post, handle) = ("session", false, currentBrowserSession)
        case "config": (name, post, handle) = ("config", false, browserConfig)
        case "signin/start": (name, post, handle) = ("signin.start", true, signInStart)
        case "signin/verify": (name, post, handle) = ("signin.verify", true, signInVerify)
        case "signin/link": (name, post, handle) = ("signin.link", true, signInWithLink)
        case "signout": (name, post, handle) = ("signout", true, signOut)
        case "attempts/*": (name, post, handle) = ("describe", false, { _ throws(APIError) in try self.describe(attemptId: id) })
        case "attempts/*/authorize":
            (name, post, handle) = ("authorize", true, { r throws(APIError) in try self.authorize(r, attemptId: id) })
        case "attempts/*/decline":
            (name, post, handle) = ("decline", true, { r throws(APIError) in try self.decline(r, attemptId: id) })
        case "upstream/start": (name, post, handle) = ("upstream.start", true, upstreamStart)
        case _ where Self.isUpstreamCallback(key): (name, post, handle) = ("upstream.callback", false, upstreamCallback)
        case _ where key.hasPrefix("passkeys/"): (name, post, handle) = try passkeyRoute(key)
        default: throw APIError(.notFound, "no such browser route")
        }
        route = "browser." + name
        if post { try browserPOST(request) } else { try requireMethod(request, "GET") }
        if name.hasPrefix("signin.") && !configuration.emailSignInEnabled { throw Self.emailSignInDisabled }
        return try handle(request)
    }

    /// A state-changing browser request: POST, `Origin` equal to the server
    /// origin, `Sec-Fetch-Site: same-origin` when present, a JSON body.
    func browserPOST(_ request: HTTPServerRequest) throws(APIError) {
        try requireMethod(request, "POST")
        guard request.header("origin") == issuer else {
            throw APIError(.originMismatch, "the request's Origin is not this server's origin")
        }
        if let site = request.header("sec-fetch-site"), site != "same-origin" {
            throw APIError(.originMismatch, "the request is not same-origin (Sec-Fetch-Site)")
        }
        try requireJSONBody(request)
    }

    // MARK: Cookies

    /// The binding cookie's name for one attempt: `__Host-bl_bind_` and a
    /// digest of the attempt id (so the id itself is never a cookie name).
    func bindingCookieName(attemptId: String) -> String {
        "__Host-bl_bind_" + String(Crypto.digest("binding\u{0}" + attemptId).prefix(16))
    }

    func cookieHeader(name: String, value: String, maxAgeSeconds: Int64) -> (name: String, value: String) {
        ("Set-Cookie", "\(name)=\(value); Path=/; Max-Age=\(max(0, maxAgeSeconds)); Secure; HttpOnly; SameSite=Lax")
    }

    /// True when the request holds this attempt's binding cookie (§6): set by
    /// the page's first load in the browser where sign-in started.
    func isBound(_ request: HTTPServerRequest, _ attempt: AttemptRecord, cookieName: String) -> Bool {
        guard let binding = request.cookies[cookieName], let bindingHash = attempt.bindingHash else { return false }
        return Crypto.constantTimeEquals(Records.hash(binding), bindingHash)
    }

    /// §6: authorize (or decline) without the attempt's binding cookie.
    static let browserMismatch = APIError(
        .browserMismatch, "this sign-in was started in another browser; finish it in the browser where it started")

    /// The live browser session named by the request's session cookie.
    /// Throws 403 AUTH_USER_DISABLED for a disabled user's cookie (even
    /// though disabling revoked the session); nil when there is none.
    func browserSession(_ db: Database, _ request: HTTPServerRequest, now: Int64) throws -> (
        BrowserSessionRecord, UserRecord
    )? {
        guard let secret = request.cookies[Self.sessionCookie], !secret.isEmpty,
            let row = try db.queryOne("SELECT * FROM browser_sessions WHERE secret_hash = ?", Records.hash(secret))
        else { return nil }
        let session = BrowserSessionRecord(row)
        guard let user = try Records.user(db, id: session.userId) else { return nil }
        if user.disabled { throw APIError(.authUserDisabled, "the account is disabled") }
        if session.revokedAt != nil || now >= session.expiresAt { return nil }
        if try revokeIfTestBaseRemoved(db, session, now: now) { return nil }
        return (session, user)
    }

    // MARK: The page

    func loginPage(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        var headers: [(name: String, value: String)] = []
        if let attemptId = request.query["attempt"], !attemptId.isEmpty {
            let now = clock()
            let cookieName = bindingCookieName(attemptId: attemptId)
            // The first load binds the attempt to this browser; later loads
            // (a reload here, or the id opened elsewhere) do not rebind it.
            let binding: (secret: String, maxAge: Int64)? = try store.perform { db in
                guard let attempt = try Records.attempt(db, id: attemptId, now: now), attempt.state == .pending,
                    attempt.bindingHash == nil
                else { return nil }
                let secret = try Crypto.randomToken(bytes: 32)
                try db.run("UPDATE attempts SET binding_hash = ? WHERE id_hash = ?", Records.hash(secret), attempt.idHash)
                return (secret, (attempt.expiresAt - now) / 1000 + 60)
            }
            if let binding {
                headers.append(cookieHeader(name: cookieName, value: binding.secret, maxAgeSeconds: binding.maxAge))
            }
        }
        return HostedPage.page(
            basePath: configuration.basePath, extraHeaders: headers, upstreamProviders: upstream.names,
            passkeys: (try? passkeyRelyingParty()) != nil)
    }

    // MARK: §6 Describe

    func describe(attemptId: String) throws(APIError) -> HTTPServerResponse {
        let now = clock()
        let attempt = try store.perform { db in try Records.attempt(db, id: attemptId, now: now) }
        guard let attempt, let client = clients[attempt.clientId] else { throw APIError(.attemptUnknown, "no such attempt") }
        return json(
            200,
            DescribeResponse(
                attemptId: attemptId, appName: client.appName, clientId: client.clientId,
                policy: appliedPolicy(client: client, returnUrl: attempt.returnUrl), state: attempt.state,
                expiresAt: Timestamp(millisecondsSince1970: attempt.expiresAt), prompt: attempt.prompt,
                loginHint: attempt.loginHint))
    }

    /// §1: `automatic` applies only to an https return URL.
    func appliedPolicy(client: ClientRegistration, returnUrl: String) -> ClientPolicy {
        client.policy == .automatic && URLParts(splitting: returnUrl)?.scheme.lowercased() == "https" ? .automatic : .confirm
    }

    // MARK: §6 Authorize

    func authorize(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        let body = try decode(AuthorizeRequest.self, request)
        let now = clock()
        let cookieName = bindingCookieName(attemptId: attemptId)
        let callback: String = try store.perform { db in
            guard let attempt = try Records.attempt(db, id: attemptId, now: now),
                let client = clients[attempt.clientId]
            else {
                throw APIError(.attemptUnknown, "no such attempt")
            }
            guard isBound(request, attempt, cookieName: cookieName) else { throw Self.browserMismatch }
            switch attempt.state {
            case .expired: throw APIError(.attemptExpired, "the attempt has expired")
            case .cancelled: throw APIError(.attemptCancelled, "the attempt was cancelled")
            case .completed: throw APIError(.attemptAlreadyExchanged, "the attempt was already completed")
            case .pending, .authorized: break
            }
            guard let (session, user) = try browserSession(db, request, now: now) else {
                throw APIError(.loginRequired, "sign in first")
            }
            if body.decision == .automatic && appliedPolicy(client: client, returnUrl: attempt.returnUrl) != .automatic {
                throw APIError(.policyMismatch, "this attempt needs the user's confirmation")
            }
            guard body.expectedSessionId == session.id else {
                throw APIError(.sessionChanged, "the browser session changed; confirm again")
            }
            if attempt.state == .authorized && attempt.browserSessionId != session.id {
                throw APIError(.sessionChanged, "the attempt was authorized by another session")
            }
            let code = derive("code", attemptId, session.id)
            if attempt.state == .pending {
                try db.run(
                    """
                    UPDATE attempts SET state = 'authorized', browser_session_id = ?, code_hash = ?, authorized_at = ?
                    WHERE id_hash = ?
                    """, session.id, Records.hash(code), now, attempt.idHash)
                Log.info("attempt authorized", ["client.id": client.clientId, "user.id": user.id])
            }
            return Callback.url(returnURL: attempt.returnUrl, outcome: .code(code), attempt: attemptId, issuer: issuer)
        }
        return json(200, AuthorizeResponse(callbackUrl: callback))
    }

    // MARK: Decline (Cancel on the page)

    func decline(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        _ = try objectMembers(request)
        let now = clock()
        let cookieName = bindingCookieName(attemptId: attemptId)
        let callback: String = try store.perform { db in
            guard let attempt = try Records.attempt(db, id: attemptId, now: now) else {
                throw APIError(.attemptUnknown, "no such attempt")
            }
            guard isBound(request, attempt, cookieName: cookieName) else { throw Self.browserMismatch }
            switch attempt.state {
            case .expired: throw APIError(.attemptExpired, "the attempt has expired")
            case .completed: throw APIError(.attemptAlreadyExchanged, "the attempt was already completed")
            case .pending, .authorized:
                try Records.cancel(db, attempt, now: now)
                Log.info("attempt declined in the browser", ["client.id": attempt.clientId])
            case .cancelled: break
            }
            return Callback.url(
                returnURL: attempt.returnUrl, outcome: .error("access_denied"), attempt: attemptId, issuer: issuer)
        }
        return json(200, AuthorizeResponse(callbackUrl: callback))
    }

    // MARK: Browser session

    func currentBrowserSession(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let now = clock()
        guard let (session, user) = try store.perform({ db in try browserSession(db, request, now: now) }) else {
            throw APIError(.loginRequired, "not signed in")
        }
        return json(
            200,
            BrowserSessionResponse(
                sessionId: session.id, account: user.account, authMethod: session.authMethod,
                expiresAt: Timestamp(millisecondsSince1970: session.expiresAt), testAccount: session.testBase.map { _ in true }))
    }

    func signOut(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        _ = try objectMembers(request)
        let now = clock()
        try store.perform { db in
            if let secret = request.cookies[Self.sessionCookie],
                let row = try db.queryOne("SELECT id FROM browser_sessions WHERE secret_hash = ?", Records.hash(secret))
            {
                try Records.revokeBrowserSession(db, id: row.text("id"), now: now)
                Log.info("browser session signed out", ["browser_session.id": row.text("id")])
            }
        }
        return json(200, ["signedOut": true], headers: [cookieHeader(name: Self.sessionCookie, value: "", maxAgeSeconds: 0)])
    }

    // MARK: Sign-in with an emailed code

    /// A test account: `local+bltest<suffix>@domain` of a configured base
    /// `local@domain` (suffix `[A-Za-z0-9._-]*`, one `+`). The base address
    /// itself is not one: it signs in with an emailed code like anyone.
    func isTestAccount(_ email: EmailAddress) -> Bool {
        TestAccounts.isDerived(email, of: testAccounts)
    }

    static let testAccountCode = "000000"

    func signInStart(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(SignInStartRequest.self, request)
        guard let email = EmailAddress(body.email) else { throw APIError(.invalidRequest, "enter a valid email address") }
        // Before anything is stored or sent: an uncovered target refuses the whole request.
        let linkPlan = try emailLinkPlan(body.redirectUri)
        try limit("signin.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        try limit("signin.email", email.text, configuration.rateLimits.codeEntry)
        if isTestAccount(email) { return json(200, ["codeSent": true]) }
        let code = try newSignInCode()
        let linkToken = try linkPlan.map { _ throws(APIError) in try newEmailLinkToken() }
        let now = clock()
        // One email, one row: a new request replaces the previous code and link.
        try store.perform { db in
            try db.run(
                """
                INSERT INTO sign_in_codes (email, code_hash, created_at, expires_at, wrong_count, link_id_hash, link_hash,
                    attempt_id_hash)
                VALUES (?, ?, ?, ?, 0, ?, ?, ?)
                ON CONFLICT(email) DO UPDATE SET code_hash = excluded.code_hash, created_at = excluded.created_at,
                    expires_at = excluded.expires_at, wrong_count = 0, link_id_hash = excluded.link_id_hash,
                    link_hash = excluded.link_hash, attempt_id_hash = excluded.attempt_id_hash
                """, email.text, Records.hash(code), now, now + configuration.signInCodeLifetimeMillis,
                linkToken.map { Records.hash($0.selector) }, linkToken.map { Records.hash($0.verifier) },
                linkPlan?.attemptIdHash)
        }
        let link = linkPlan.flatMap { plan in
            linkToken.map { plan.target.text + "#" + EmailLinks.fragmentName + "=" + $0.token }
        }
        do {
            try mailer.send(signInEmail(to: email, code: code, link: link))
        } catch {
            // The reason names no address, code or link (MailDeliveryError).
            let reason = (error as? MailDeliveryError)?.description ?? "\(type(of: error))"
            Log.error("cannot send the sign-in email", ["error": reason])
            throw APIError(
                .internalError, "the sign-in email could not be sent; try again later, or tell the administrator")
        }
        return json(200, ["codeSent": true, "linkSent": link != nil])
    }

    /// Six uniformly random digits, never `000000` (the test accounts' code).
    func newSignInCode() throws(APIError) -> String {
        while true {
            let bytes: [UInt8]
            do { bytes = try Crypto.randomBytes(4) } catch { throw APIError(.internalError, "randomness unavailable") }
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard value < 4_294_000_000 else { continue }
            let code = value % 1_000_000
            if code == 0 { continue }
            let text = String(code)
            return String(repeating: "0", count: 6 - text.count) + text
        }
    }

    func signInVerify(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(SignInVerifyRequest.self, request)
        guard let email = EmailAddress(body.email) else { throw APIError(.invalidRequest, "enter a valid email address") }
        try limit("code.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        try limit("code.email", email.text, configuration.rateLimits.codeEntry)
        let now = clock()
        let test = isTestAccount(email)
        let started = try store.perform { db in
            if test {
                guard Crypto.constantTimeEquals(body.code, Self.testAccountCode) else {
                    throw APIError(.otpInvalid, "the code is wrong")
                }
            } else {
                guard let row = try db.queryOne("SELECT * FROM sign_in_codes WHERE email = ?", email.text) else {
                    throw APIError(.otpExpired, "no valid code for this address; ask for a new one")
                }
                let wrong = Int(row.int("wrong_count") ?? 0)
                if wrong >= Self.maximumWrongCodes {
                    throw APIError(.otpMaxAttempts, "too many wrong codes; ask for a new email")
                }
                if now >= row.millis("expires_at") {
                    try db.run("DELETE FROM sign_in_codes WHERE email = ?", email.text)
                    throw APIError(.otpExpired, "the code has expired; ask for a new one")
                }
                guard Crypto.constantTimeEquals(Records.hash(body.code), row.text("code_hash")) else {
                    try db.run("UPDATE sign_in_codes SET wrong_count = ? WHERE email = ?", wrong + 1, email.text)
                    if wrong + 1 >= Self.maximumWrongCodes {
                        throw APIError(.otpMaxAttempts, "too many wrong codes; ask for a new email")
                    }
                    throw APIError(.otpInvalid, "the code is wrong")
                }
                try db.run("DELETE FROM sign_in_codes WHERE email = ?", email.text)
            }
            return try startBrowserSession(
                db, SignInIdentity(email: email, method: test ? "test" : "email"), now: now, invitation: body.invite)
        }
        return browserSessionAnswer(started)
    }
}
