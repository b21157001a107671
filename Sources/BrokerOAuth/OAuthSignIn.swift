import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol

/// Why a standard provider's token answer signs no one in: the provider's
/// own failure, or an ID token (or userinfo) that fails a check.
public enum SignInFailure: Error, Sendable, Equatable {
    case provider(ProviderError)
    /// OpenID Connect Core §3.1.3.7 (or §5.3.2 for userinfo): the reason, for people.
    case idTokenInvalid(String)

    public func brokerError(attemptId: String? = nil) -> BrokerError {
        switch self {
        case .provider(let error): error.brokerError(attemptId: attemptId)
        case .idTokenInvalid(let reason):
            BrokerError(
                .idTokenInvalid,
                "the provider's ID token was refused (\(reason)); nothing was kept — sign in again, and check the client's Issuer= and ClientId= if it persists",
                attemptId: attemptId)
        }
    }
}

/// A client of a standard OAuth 2.0 / OpenID Connect provider as the
/// engine's sign-in protocol (docs/providers.md): sessions are refreshed and
/// revoked here; its attempts are its `LocalAttemptSignIn` (OAuthFlow.swift:
/// there is no attempt at the provider to create, ask about or acknowledge).
public struct OAuthSignIn: SignInProtocol {
    public let provider: OAuthProvider
    let clock: any Clock

    public init(provider: OAuthProvider, clock: any Clock) {
        self.provider = provider
        self.clock = clock
    }

    public var settings: ProviderSettings { provider.settings }
    public var attemptControl: (any ServerAttemptControl)? { nil }
    /// docs/providers.md: a refresh without a definite answer is not re-sent at once.
    public var repeatsLostRefresh: Bool { false }
    /// A provider has no session check: refresh is what tells.
    public var checksSessions: Bool { false }

    static let notThisPath = LoginServerError.malformed(
        status: 0, "a standard provider has no Browser Login session route")

    public func session(accessToken: String) async throws(LoginServerError) -> SessionInfoResponse {
        throw Self.notThisPath
    }

    /// Rotates the tokens: a provider that sends no new refresh token keeps
    /// the old one valid (RFC 6749 §6); expiries follow the answer.
    public func refresh(_ session: IssuedSession) async throws(LoginServerError) -> IssuedSession {
        guard let token = session.refreshToken else { throw .notSent("the session has no refresh token") }
        let dpop = try Self.dpopKey(of: session)
        let tokens: TokenResponse
        do { tokens = try await provider.refresh(refreshToken: token, dpop: dpop) } catch {
            throw Self.loginServerError(error)
        }
        let now = clock.now()
        var next = session
        next.accessToken = tokens.accessToken
        next.accessTokenExpiresAt = tokens.expiresIn.map { now.adding(milliseconds: Int64($0) * 1000) }
        next.refreshToken = tokens.refreshToken ?? token
        if let seconds = tokens.refreshExpiresIn {
            next.expiresAt = now.adding(milliseconds: Int64(seconds) * 1000)
        }
        return next
    }

    /// RFC 7009: the refresh token (or the access token when there is none).
    /// A provider without a revocation endpoint is not asked (`revoked: false`).
    public func revoke(_ session: IssuedSession) async throws(LoginServerError) -> RevokeResponse {
        guard await provider.hasRevocation else { return RevokeResponse(revoked: false) }
        let dpop = try Self.dpopKey(of: session)
        do {
            // Issue 31: refresh first when a Bearer revoke's access token has expired (BrokerOAuth/SessionRevoke.swift).
            _ = try await provider.revokeSession(
                refreshToken: session.refreshToken, accessToken: session.accessToken,
                accessTokenExpiresAt: session.accessTokenExpiresAt, dpop: dpop)
        } catch {
            if error == .noRevocationEndpoint { return RevokeResponse(revoked: false) }
            throw Self.loginServerError(error)
        }
        return RevokeResponse(revoked: true)
    }

    /// Whether sign-out can revoke at the provider (the session view's `revokedAtServer`).
    public var canRevoke: Bool { get async { await provider.hasRevocation } }

    /// RFC 6750 §3.1: `error="invalid_token"` in the `401`'s `WWW-Authenticate`.
    public func rejectsAccessToken(_ response: HTTPResponse) -> Bool {
        response.status == 401 && response.header("WWW-Authenticate").flatMap(OAuthProvider.bearerError) == "invalid_token"
    }

    /// A failed refresh or revoke in the provider's words (the engine's
    /// terms name the login server and its `Server=`).
    public func brokerError(_ failure: LoginServerError) -> BrokerError {
        switch failure {
        case .notSent(let m): ProviderError.notSent(m).brokerError()
        case .noAnswer(let m): ProviderError.noAnswer(m).brokerError()
        case .serverFailure(let status): ProviderError.serverFailure(status: status).brokerError()
        case .malformed(let status, let m): ProviderError.malformed(status: status, m).brokerError()
        case .redirected(let status): ProviderError.malformed(status: status, "a redirect").brokerError()
        case .responseTooLarge: ProviderError.responseTooLarge.brokerError()
        case .providerRefused(let status, let error, let text):
            ProviderError.refused(status: status, error: error, description: text).brokerError()
        case .refused: failure.brokerError()
        }
    }

    /// The provider's failure in the engine's terms: only a well-formed error
    /// body is definite, only a request that never left is "not sent".
    public static func loginServerError(_ error: ProviderError) -> LoginServerError {
        switch error {
        case .notSent(let m): .notSent(m)
        case .noAnswer(let m): .noAnswer(m)
        case .serverFailure(let status): .serverFailure(status: status)
        case .malformed(let status, let m): .malformed(status: status, m)
        case .refused(let status, let code, let text): .providerRefused(status: status, error: code, description: text)
        case .responseTooLarge: .responseTooLarge
        case .issuerMismatch, .insecureEndpoint, .unsupported: .notSent("\(error)")
        }
    }

    // MARK: - Signing in

    /// The session a token answer signs in (docs/providers.md "The account
    /// view"): the ID token checked first when there is one (and required
    /// when `idTokenRequired`), the account completed from userinfo.
    /// `nonce` is the attempt's (nil for a device grant).
    public func issue(_ tokens: TokenResponse, nonce: String?, idTokenRequired: Bool, dpop: DPoPKey? = nil)
        async throws(SignInFailure) -> IssuedSession
    {
        let now = clock.now()
        var claims: IDTokenClaims?
        if let idToken = tokens.idToken, settings.kind == .oidc {
            claims = try await verify(idToken, nonce: nonce, now: now)
        } else if idTokenRequired {
            throw .idTokenInvalid("the token answer has no ID token although 'openid' was requested")
        }
        var info: UserInfo?
        let metadata: ProviderMetadata
        do { metadata = try await provider.metadata() } catch { throw .provider(error) }
        if metadata.userinfoEndpoint != nil {
            do {
                info = try await provider.userinfo(accessToken: tokens.accessToken, dpop: dpop)
            } catch {
                // With an ID token, userinfo only completes the view.
                if claims == nil { throw .provider(error) }
            }
        }
        if let claims, let subject = info?.subject, subject != claims.subject {
            throw .idTokenInvalid("the userinfo answer is for another subject than the ID token")
        }
        guard let subject = claims?.subject ?? info?.subject, !subject.isEmpty else {
            throw .idTokenInvalid("the provider named no account (no ID token and no userinfo subject)")
        }
        let account = Account(
            userId: subject, email: claims?.email ?? info?.email ?? "",
            displayName: claims?.name ?? info?.name ?? claims?.preferredUsername ?? info?.preferredUsername ?? "")
        let sessionId: String
        do { sessionId = "ses_" + (try Crypto.randomToken(bytes: 12)) } catch {
            throw .provider(.notSent("no randomness"))
        }
        return IssuedSession(
            sessionId: sessionId, accessToken: tokens.accessToken,
            accessTokenExpiresAt: tokens.expiresIn.map { now.adding(milliseconds: Int64($0) * 1000) },
            refreshToken: tokens.refreshToken,
            expiresAt: tokens.refreshExpiresIn.map { now.adding(milliseconds: Int64($0) * 1000) },
            // An `auth_time` of 0 (Glewlwyd's) says nothing: the sign-in happened now.
            authenticatedAt: claims?.authTime.flatMap { $0 > 0 ? Timestamp(millisecondsSince1970: $0 * 1000) : nil } ?? now,
            authMethod: settings.kind.rawValue, account: account, dpopKey: dpop?.serialized)
    }

    /// OpenID Connect Core §3.1.3.7 with the provider's keys; an unknown key
    /// id re-fetches the key set once (at most once a minute, the provider's rule).
    /// Public: the reference server's upstream sign-in checks ID tokens with it too.
    public func verify(_ idToken: String, nonce: String?, now: Timestamp) async throws(SignInFailure) -> IDTokenClaims {
        let expect = IDTokenExpectations(
            issuer: settings.issuer, clientId: settings.clientId, nonce: nonce, now: now.millisecondsSince1970 / 1000)
        for refetch in [false, true] {
            let keys: JWKSet
            do {
                keys = try JWKSet(json: try await provider.jwks(refetch: refetch))
            } catch let error as ProviderError {
                throw .provider(error)
            } catch {
                throw .idTokenInvalid("the provider's key set is not usable: \(error)")
            }
            do {
                return try IDToken.verify(idToken, keys: keys, expect: expect)
            } catch {
                if error.reason == .unknownKey && !refetch { continue }
                throw .idTokenInvalid(error.message)
            }
        }
        throw .idTokenInvalid("no key of the provider matches the ID token")
    }
}
