import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol

/// Why a standard provider's token answer signs no one in: the provider's
/// own failure, or an ID token (or userinfo) that fails a check.
public enum TokenAnswerFailure: Error, Sendable, Equatable {
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
/// revoked here; its attempts' steps are in OAuthFlow.swift (
/// there is no attempt at the provider to create, ask about or acknowledge).
public struct OAuthSignIn: SignInProtocol {
    public let provider: OAuthProvider
    let clock: any Clock

    public init(provider: OAuthProvider, clock: any Clock) {
        self.provider = provider
        self.clock = clock
    }

    public var settings: ProviderSettings { provider.settings }
    /// docs/providers.md: a refresh without a definite answer is not re-sent at once.
    public var repeatsLostRefresh: Bool { false }
    /// A provider has no session check: refresh is what tells.
    public var checksSessions: Bool { false }

    /// Never called (`checksSessions` is false): a provider has no session check.
    public func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        let error = ProviderError.malformed(status: 0, "a standard provider has no session check")
        throw .indefinite(error.brokerError(), detail: "\(error)")
    }

    /// Rotates the tokens: a provider that sends no new refresh token keeps
    /// the old one valid (RFC 6749 §6); expiries follow the answer. A
    /// refusal in `refusesRefresh` (OAUTH.md §4: `invalid_grant`, a bodiless
    /// 400/401, a refused client) ends the session `expired` with
    /// `REFRESH_REJECTED`; a DPoP key that cannot be used now sends nothing
    /// and ends nothing (`DPOP_KEY_UNAVAILABLE`).
    public func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        guard let token = session.refreshToken else {
            throw Self.failure(.notSent("the session has no refresh token"))
        }
        let dpop = try Self.dpopKey(of: session)
        let tokens: TokenResponse
        do { tokens = try await provider.refresh(refreshToken: token, dpop: dpop) } catch {
            if error.refusesRefresh, case .refused(_, let code, _) = error {
                throw .ended(
                    SessionEnding(
                        status: .expired, reason: "REFRESH_REJECTED",
                        warning: code == "invalid_grant"
                            ? nil
                            : "the provider refused the client at refresh: check ClientId=, ClientSecret= and the provider's client settings"
                    ),
                    BrokerError(
                        .notSignedIn, "the identity provider refused the refresh token (\(code)); sign in again",
                        providerError: code),
                    detail: "\(error)")
            }
            throw Self.failure(error)
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
    public func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        guard await provider.hasRevocation else { return RevokeResponse(revoked: false) }
        let dpop = try Self.dpopKey(of: session)
        do {
            // Issue 31: refresh first when a Bearer revoke's access token has expired (BrokerOAuth/SessionRevoke.swift).
            _ = try await provider.revokeSession(
                refreshToken: session.refreshToken, accessToken: session.accessToken,
                accessTokenExpiresAt: session.accessTokenExpiresAt, dpop: dpop)
        } catch {
            if error == .noRevocationEndpoint { return RevokeResponse(revoked: false) }
            throw Self.failure(error)
        }
        return RevokeResponse(revoked: true)
    }

    /// Whether sign-out can revoke at the provider (the session view's `revokedAtServer`).
    public var canRevoke: Bool { get async { await provider.hasRevocation } }

    /// RFC 6750 §3.1: `error="invalid_token"` in the `401`'s `WWW-Authenticate`.
    public func rejectsAccessToken(_ response: HTTPResponse) -> Bool {
        response.status == 401 && response.header("WWW-Authenticate").flatMap(OAuthProvider.bearerError) == "invalid_token"
    }

    /// The provider's failure of a refresh or revoke in the seam's terms,
    /// with the public error in the provider's words: only a well-formed
    /// error body is definite, only a request that never left (or a local
    /// refusal before sending) is "not sent".
    public static func failure(_ error: ProviderError) -> SignInFailure {
        let detail = "\(error)"
        if error == .proofNotMade { return .notSent(keyUnavailable, detail: detail) }
        switch error {
        case .notSent: return .notSent(error.brokerError(), detail: detail)
        case .issuerMismatch, .insecureEndpoint, .unsupported:
            return .notSent(ProviderError.notSent(detail).brokerError(), detail: detail)
        case .noAnswer: return .unanswered(error.brokerError(), detail: detail)
        case .serverFailure, .malformed, .responseTooLarge: return .indefinite(error.brokerError(), detail: detail)
        case .refused: return .refused(error.brokerError(), detail: detail)
        }
    }

    // MARK: - Signing in

    /// The session a token answer signs in (docs/providers.md "The account
    /// view"): the ID token checked first when there is one (and required
    /// when `idTokenRequired`), the account completed from userinfo.
    /// `nonce` is the attempt's (nil for a device grant).
    public func issue(_ tokens: TokenResponse, nonce: String?, idTokenRequired: Bool, dpop: DPoPKey? = nil)
        async throws(TokenAnswerFailure) -> IssuedSession
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
    public func verify(_ idToken: String, nonce: String?, now: Timestamp) async throws(TokenAnswerFailure) -> IDTokenClaims {
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
