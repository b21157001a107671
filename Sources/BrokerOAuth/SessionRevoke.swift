import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol

extension ProviderError {
    /// The `error` codes of a token endpoint's refusal of a refresh grant
    /// that end the session `expired` with `REFRESH_REJECTED` (OAUTH.md §4):
    /// the refresh token is dead (`invalid_grant`), or the client is refused
    /// (`invalid_client`, `unauthorized_client`: a configuration problem).
    public static let refreshEndingErrors: Set<String> = ["invalid_grant", "invalid_client", "unauthorized_client"]

    /// The `error` a bodiless `400`/`401` to a refresh grant is taken as: a
    /// provider that answers a revoked refresh token with an empty 400
    /// (Glewlwyd) has refused it as surely as with `invalid_grant`.
    static let bodilessRefusal = "invalid_grant"

    /// A definite refusal of a refresh grant (OAUTH.md §4): a `400` or `401`
    /// with one of `refreshEndingErrors`. Anything else (5xx, 429, transport)
    /// leaves the session for a later refresh.
    public var refusesRefresh: Bool {
        guard case .refused(let status, let error, _) = self, status == 400 || status == 401 else { return false }
        return Self.refreshEndingErrors.contains(error)
    }
}

extension OAuthProvider {
    /// An access token this close to its expiry is not used as a revoke's
    /// Bearer: it may be dead by the time the provider reads it.
    static let bearerMarginMilliseconds: Int64 = 2_000

    /// A refresh (RFC 6749 §6), sent once, with a bodiless `400`/`401`
    /// taken as the refusal it is (docs/providers.md "Glewlwyd": a revoked
    /// refresh token gets an empty 400).
    func refreshClassified(refreshToken: String, dpop: DPoPKey? = nil) async throws(ProviderError) -> TokenResponse {
        do {
            let response = try await tokenRequest(
                [("grant_type", "refresh_token"), ("refresh_token", refreshToken)], dpop: dpop)
            return try tokenAnswer(response, dpop: dpop != nil)
        } catch {
            if case .malformed(let status, _) = error, status == 400 || status == 401 {
                throw .refused(
                    status: status, error: ProviderError.bodilessRefusal,
                    description: "HTTP \(status) with no OAuth error body")
            }
            throw error
        }
    }

    /// What a session's revoke did at the provider.
    public enum SessionRevokeOutcome: Sendable, Equatable {
        /// The revocation endpoint answered 2xx.
        case revoked
        /// The Bearer had expired and the refresh that would have renewed it
        /// was refused: the refresh token is dead, nothing is left to revoke.
        case nothingLeft
    }

    /// Revokes a session (OAUTH.md §4): the refresh token (or the access
    /// token when there is none). With `RevocationAuth=bearer` the Bearer
    /// must be live: when the access token has expired (an owed revoke sent
    /// after an offline spell or a restart), the session is refreshed once
    /// first and the refresh token that refresh returned is revoked with the
    /// new access token. A refresh refused as in `refusesRefresh` means
    /// there is nothing left to revoke. Throws `noRevocationEndpoint` when
    /// the provider has none; any other failure as `revoke` does (a refresh
    /// that never left is `notSent`: the revoke stays owed).
    public func revokeSession(
        refreshToken: String?, accessToken: String, accessTokenExpiresAt: Timestamp?, dpop: DPoPKey? = nil
    ) async throws(ProviderError) -> SessionRevokeOutcome {
        let metadata = try await metadataBeforeSending()
        guard metadata.revocationEndpoint != nil else { throw ProviderError.noRevocationEndpoint }
        var refresh = refreshToken
        var bearer = accessToken
        if settings.revocationAuth == .bearer, let refreshToken, let expiresAt = accessTokenExpiresAt,
            expiresAt < clock.now().adding(milliseconds: Self.bearerMarginMilliseconds)
        {
            do {
                let renewed = try await refreshClassified(refreshToken: refreshToken, dpop: dpop)
                bearer = renewed.accessToken
                refresh = renewed.refreshToken ?? refreshToken
            } catch {
                if error.refusesRefresh { return .nothingLeft }
                throw error
            }
        }
        if let refresh {
            try await revoke(token: refresh, hint: "refresh_token", accessToken: bearer, dpop: dpop)
        } else {
            try await revoke(token: bearer, hint: "access_token", accessToken: bearer, dpop: dpop)
        }
        return .revoked
    }
}
