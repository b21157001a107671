import BrowserLoginProtocol
import SQLiteSupport

/// Who a finished sign-in proved the browser to be, whatever the method
/// (an emailed code, a test account, an upstream provider).
struct SignInIdentity: Sendable {
    var email: EmailAddress
    /// The browser session's `authMethod`, which native sessions inherit.
    var method: String
    /// The name shown for a new user; the address's local part when nil.
    var displayName: String? = nil
    /// An upstream provider's account: it finds its user by issuer and `sub`
    /// first (UpstreamIdentities.swift), by address only on first sign-in.
    var upstream: UpstreamSubject? = nil
}

/// A browser session just started, and the cookie secret that names it.
struct StartedBrowserSession: Sendable {
    var response: BrowserSessionResponse
    var secret: String
    var isNewUser: Bool
    /// The session's lifetime (the cookie's Max-Age).
    var maxAgeMillis: Int64
}

/// The one way every sign-in method ends: find or create the user (the one
/// sign-up path, so every rule about who may sign up lives here) and start
/// the browser session.
extension LoginService {
    /// Runs inside the caller's transaction, after the method has proved
    /// `identity`. Throws 403 AUTH_USER_DISABLED for a disabled user, and the
    /// sign-up gates' errors for a new user (see `provisionUser`).
    /// `invitation`: the invitation token the sign-in request carried, if any.
    func startBrowserSession(_ db: Database, _ identity: SignInIdentity, now: Int64, invitation: String? = nil) throws
        -> StartedBrowserSession
    {
        let (user, isNewUser) = try provisionUser(db, identity, now: now, invitation: invitation)
        if user.disabled { throw APIError(.authUserDisabled, "the account is disabled") }
        let secret = try randomToken(bytes: 32)
        let sessionId = try randomToken(bytes: 16)
        // A test account's session: at most 30 minutes, marked with its base (TestAccountSessions.swift).
        let testBase = identity.method == "test" ? testAccountBase(of: identity.email) : nil
        let lifetime = testBase == nil ? configuration.sessionLifetimeMillis : testSessionLifetimeMillis
        // Signing in again replaces this browser's cookie; the previous
        // session (and what it issued) ends at its own expiry or sign-out.
        try db.run(
            """
            INSERT INTO browser_sessions (id, secret_hash, user_id, auth_method, authenticated_at, expires_at, test_base)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """, sessionId, Records.hash(secret), user.id, identity.method, now, now + lifetime, testBase?.text)
        Log.info("browser session started", ["user.id": user.id, "auth.method": identity.method])
        let response = BrowserSessionResponse(
            sessionId: sessionId, account: user.account, authMethod: identity.method,
            expiresAt: Timestamp(millisecondsSince1970: now + lifetime), isNewUser: isNewUser,
            testAccount: testBase.map { _ in true })
        return StartedBrowserSession(response: response, secret: secret, isNewUser: isNewUser, maxAgeMillis: lifetime)
    }

    /// The user of `identity`'s address, created on first sign-in. The
    /// sign-up gates (`signupMode`, docs/server.md) apply here, to new users
    /// only, whatever the method (test accounts included): they throw 403
    /// INVITATION_REQUIRED, INVITATION_INVALID, WAITLISTED or
    /// DOMAIN_NOT_ALLOWED. A valid `invitation` token is used up.
    func provisionUser(_ db: Database, _ identity: SignInIdentity, now: Int64, invitation: String? = nil) throws -> (
        UserRecord, isNewUser: Bool
    ) {
        if let upstream = identity.upstream, let user = try UpstreamIdentities.linkedUser(db, upstream, now: now) {
            return (user, false)
        }
        if let user = try Records.user(db, email: identity.email.text) {
            if let upstream = identity.upstream { try UpstreamIdentities.link(db, upstream, to: user, now: now) }
            return (user, false)
        }
        let admission = try Signup.admit(
            db, identity.email, invitation: invitation, configuration: configuration, now: now)
        let userId = try randomToken(bytes: 16)
        try db.run(
            "INSERT INTO users (id, email, display_name, disabled, created_at) VALUES (?, ?, ?, 0, ?)",
            userId, identity.email.text, identity.displayName ?? identity.email.local, now)
        guard let user = try Records.user(db, id: userId) else {
            throw APIError(.internalError, "the user could not be created")
        }
        Log.info("user created", ["user.id": userId, "signup.via": admission.label])
        if let upstream = identity.upstream { try UpstreamIdentities.link(db, upstream, to: user, now: now) }
        return (user, true)
    }

    /// The 200 answer of a finished sign-in, with the browser session cookie.
    func browserSessionAnswer(_ started: StartedBrowserSession) -> HTTPServerResponse {
        json(
            200, started.response,
            headers: [
                cookieHeader(name: Self.sessionCookie, value: started.secret, maxAgeSeconds: started.maxAgeMillis / 1000)
            ])
    }
}
