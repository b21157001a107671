import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol

/// DPoP (RFC 9449) and pushed authorization requests (RFC 9126) at a
/// standard provider (docs/providers.md, "DPoP and PAR").
extension OAuthProvider {
    /// Whether a sign-in proves a DPoP key: `DPoP=auto` when the metadata
    /// lists ES256 in `dpop_signing_alg_values_supported`, `yes` always (a
    /// provider without it is a configuration error), `no` never.
    public func usesDPoP(_ metadata: ProviderMetadata) throws(ProviderError) -> Bool {
        switch settings.dpop {
        case .no: return false
        case .auto: return metadata.offersDPoP
        case .yes:
            guard metadata.offersDPoP else {
                throw .unsupported(
                    "the client file says DPoP=yes, but the provider's metadata does not list ES256 in dpop_signing_alg_values_supported; set DPoP=auto or DPoP=no"
                )
            }
            return true
        }
    }

    /// Where a sign-in's authorization request is pushed, or nil when it is
    /// not: `PAR=auto` when the metadata has
    /// `pushed_authorization_request_endpoint`, `yes` always (a provider
    /// without one is a configuration error); `no` never — unless the
    /// provider says `require_pushed_authorization_requests`, which is a
    /// configuration error.
    public func pushEndpoint(_ metadata: ProviderMetadata) throws(ProviderError) -> String? {
        let endpoint = metadata.pushedAuthorizationRequestEndpoint
        switch settings.par {
        case .no:
            if metadata.requirePushedAuthorizationRequests {
                throw .unsupported(
                    "the provider requires pushed authorization requests (require_pushed_authorization_requests), but the client file says PAR=no; set PAR=auto"
                )
            }
            return nil
        case .auto:
            return endpoint
        case .yes:
            guard let endpoint else {
                throw .unsupported(
                    "the client file says PAR=yes, but the provider's metadata has no pushed_authorization_request_endpoint; set PAR=auto or PAR=no"
                )
            }
            return endpoint
        }
    }

    /// RFC 9126 §2: pushes the authorization request's `parameters` (the
    /// client authenticating as at the token endpoint) and answers the URL
    /// the browser opens: the authorization endpoint with `client_id` and
    /// `request_uri` only. Anything but a `201` with a `request_uri` fails.
    public func pushAuthorization(to endpoint: String, authorizationEndpoint: String, parameters: [(String, String)])
        async throws(ProviderError) -> String
    {
        let metadata = try await metadataBeforeSending()
        // The client's credentials add client_id (or carry it in the Basic header).
        let form = parameters.filter { $0.0 != "client_id" }
        let response = try await postForm(
            endpoint, form, authentication: clientAuthMethod(advertised: metadata.tokenEndpointAuthMethodsSupported))
        guard response.status == 201 else {
            try Self.throwForUnexpected(response, what: "the pushed authorization request's answer")
        }
        let wire: PushWire
        do {
            wire = try WireJSON.decode(PushWire.self, from: response.body)
        } catch {
            throw .malformed(status: 201, "the pushed authorization request's answer is not valid (\(error))")
        }
        guard let requestURI = wire.request_uri, !requestURI.isEmpty, requestURI.utf8.count <= 2048 else {
            throw .malformed(status: 201, "the pushed authorization request's answer has no request_uri")
        }
        return Self.url(authorizationEndpoint, adding: [("client_id", settings.clientId), ("request_uri", requestURI)])
    }

    struct PushWire: Decodable {
        var request_uri: String?
        var expires_in: WireSeconds?
    }
}

extension ProviderError {
    /// A push without a definite `201` (OAUTH.md §6): `PAR_FAILED`, nothing opened.
    var pushFailure: BrokerError {
        let cause: String
        switch self {
        case .refused(_, let error, let text):
            cause =
                "it refused: \(ProviderError.plainText(error, limit: 100))"
                + (text.map { " (\(ProviderError.plainText($0)))" } ?? "")
        case .notSent(let detail), .noAnswer(let detail):
            cause = "it could not be reached (\(ProviderError.plainText(detail)))"
        default:
            cause = "\(self)"
        }
        var error = BrokerError(
            .parFailed,
            "the provider did not accept the pushed authorization request: \(cause); no browser was opened — start the sign-in again, and check the client file if it persists"
        )
        if case .refused(_, let code, _) = self { error.providerError = ProviderError.plainText(code, limit: 100) }
        return error
    }
}

extension ProviderError {
    /// A DPoP proof the session's key could not make: nothing was sent.
    static let proofNotMade = ProviderError.notSent("the DPoP proof could not be made")
    /// A sign-in's DPoP key pair could not be made: nothing was sent.
    static let keyNotMade = ProviderError.notSent("no DPoP key could be made")
}

extension OAuthSignIn {
    static let keyUnavailable = BrokerError(
        .dpopKeyUnavailable,
        "the session's DPoP key is missing or unreadable in the vault, so its tokens cannot be used; sign in again")

    /// The session's DPoP key, nil for a Bearer session. A key that cannot
    /// be read sends nothing and ends nothing: the refresh or revoke answers
    /// `DPOP_KEY_UNAVAILABLE` as "not sent" (the session stays, an owed
    /// revoke stays owed — cannot read it now never turns into it is gone).
    static func dpopKey(of session: IssuedSession) throws(SignInFailure) -> DPoPKey? {
        guard let serialized = session.dpopKey else { return nil }
        guard let key = DPoPKey(serialized: serialized) else {
            throw .notSent(keyUnavailable, detail: "the session's DPoP key is unreadable in the vault")
        }
        return key
    }

    /// `http.request` (OAUTH.md §6): a DPoP-bound session's access token
    /// goes as `Authorization: DPoP` with a proof of the session's key for
    /// this method and URL (`ath` bound to the token, the origin's latest nonce).
    public func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    {
        guard let serialized = session.dpopKey else {
            return [HTTPHeader("Authorization", "Bearer " + session.accessToken)]
        }
        guard let key = DPoPKey(serialized: serialized) else { throw Self.keyUnavailable }
        let proof: String
        do {
            proof = try key.proof(
                method: method, url: url, accessToken: session.accessToken, nonce: provider.nonce(for: url),
                now: clock.now().millisecondsSince1970 / 1000)
        } catch {
            throw BrokerError(.dpopKeyUnavailable, "the DPoP proof could not be made; sign in again")
        }
        return [HTTPHeader("Authorization", "DPoP " + session.accessToken), HTTPHeader("DPoP", proof)]
    }

    /// The API asked for a fresh nonce (`401`, `WWW-Authenticate: DPoP
    /// error="use_dpop_nonce"` with a `DPoP-Nonce`): it is kept for the
    /// origin, and the request was not processed, so it is sent once more.
    public func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool {
        let fresh = provider.rememberNonce(from: response, url: url)
        return fresh != nil && OAuthProvider.asksForNonce(response)
    }
}
