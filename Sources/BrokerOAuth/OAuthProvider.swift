import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol
import Synchronization

/// The broker's side of one OAuth 2.0 / OpenID Connect provider
/// (docs/providers.md): discovery, the authorize URL, the token, revocation,
/// userinfo, JWKS and device authorization requests, each over any
/// `HTTPTransport`. It keeps the provider's metadata (in memory and through
/// a `ProviderMetadataCache`) and the JWKS bytes; it decides nothing about
/// attempts or sessions. Safe to share between tasks.
///
/// Requests carry no cookie; token, revocation and device requests change
/// state at the provider, are sent on a fresh connection and never repeated.
public final class OAuthProvider: Sendable {
    public let settings: ProviderSettings
    let transport: any HTTPTransport
    let caFile: String?
    let clock: any Clock
    let cache: (any ProviderMetadataCache)?

    /// As for login servers (BrokerBrowserLogin's `LoginServerConfiguration`).
    static let timeoutMilliseconds = 15_000
    static let connectTimeoutMilliseconds = 5_000
    static let maximumResponseBytes = 256 * 1024
    static let maximumJWKSBytes = 512 * 1024
    /// Metadata (and the JWKS) are fetched again after a day.
    static let metadataLifetimeMilliseconds: Int64 = 24 * 3_600_000
    /// A JWKS refetch (an unknown key id) at most once a minute.
    static let jwksRefetchMilliseconds: Int64 = 60_000
    /// The tenant a `{tenantid}` issuer template is discovered at: Entra's
    /// multi-tenant metadata publishes the template as its issuer.
    static let templateDiscoveryTenant = "common"

    private struct State: Sendable {
        /// With the `*Endpoint` keys applied and every endpoint checked.
        var metadata: ProviderMetadata?
        var jwks: (bytes: [UInt8], fetchedAt: Timestamp)?
        /// The latest `DPoP-Nonce` of each origin (RFC 9449 §8, §9), in memory only.
        var nonces: [String: String] = [:]
    }
    private let state = Mutex(State())

    public init(
        settings: ProviderSettings, transport: any HTTPTransport, caFile: String?, clock: any Clock,
        cache: (any ProviderMetadataCache)?
    ) {
        self.settings = settings
        self.transport = transport
        self.caFile = caFile
        self.clock = clock
        self.cache = cache
    }

    // MARK: Metadata

    /// The provider's metadata with the `*Endpoint` keys applied: from memory
    /// or the cache when younger than 24 h, else fetched (and cached).
    public func metadata() async throws(ProviderError) -> ProviderMetadata {
        try await metadata(forceFetch: false)
    }

    func metadata(forceFetch: Bool) async throws(ProviderError) -> ProviderMetadata {
        let now = clock.now()
        if !forceFetch {
            if let known = state.withLock({ $0.metadata }), Self.isFresh(known.fetchedAt, now: now) {
                return known
            }
            if let entry = cache?.load(issuer: settings.issuer), Self.isFresh(entry.fetchedAt, now: now),
                var cached = try? ProviderMetadata(cached: entry.json), cached.issuer == settings.issuer
            {
                cached.fetchedAt = entry.fetchedAt
                let effective = try checked(cached)
                state.withLock { $0.metadata = effective }
                return effective
            }
        }
        let fetched = try await fetchMetadata(now: now)
        let effective = try checked(fetched)
        cache?.save(issuer: settings.issuer, json: fetched.encoded(), fetchedAt: fetched.fetchedAt)
        state.withLock { $0.metadata = effective }
        return effective
    }

    static func isFresh(_ fetchedAt: Timestamp, now: Timestamp) -> Bool {
        let age = now.millisecondsSince1970 - fetchedAt.millisecondsSince1970
        return age >= 0 && age < metadataLifetimeMilliseconds
    }

    /// The keys applied, then every endpoint checked (docs/providers.md).
    func checked(_ published: ProviderMetadata) throws(ProviderError) -> ProviderMetadata {
        let effective = published.applying(settings.endpoints)
        for (name, url) in effective.namedEndpoints(keys: settings.endpoints)
        where !EndpointRule.isAcceptable(url) {
            throw .insecureEndpoint(name)
        }
        return effective
    }

    /// The issuer with a `{tenantid}` template filled in for discovery.
    var discoveryIssuer: String {
        settings.issuerIsTemplate
            ? settings.issuer.replacing("{tenantid}", with: Self.templateDiscoveryTenant) : settings.issuer
    }

    /// OIDC: `{Issuer}/.well-known/openid-configuration`, a terminating `/`
    /// of the issuer removed first (OpenID Connect Discovery 1.0 §4: an
    /// authentik issuer ends in one), completed from the RFC 8414 document for the
    /// endpoints it leaves out. OAuth 2.0: the RFC 8414 document, or (when
    /// the provider publishes none) nothing but the `*Endpoint` keys.
    func fetchMetadata(now: Timestamp) async throws(ProviderError) -> ProviderMetadata {
        let issuer = discoveryIssuer
        guard EndpointRule.isAcceptable(issuer) else { throw .insecureEndpoint("Issuer=") }
        let rfc8414 = EndpointRule.authorizationServerMetadataURL(issuer: issuer)
        switch settings.kind {
        case .oidc:
            guard
                let document = try await fetchDocument(
                    (issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer) + "/.well-known/openid-configuration",
                    what: "OpenID Provider metadata", optional: false)
            else { throw .malformed(status: 0, "no OpenID Provider metadata") }
            var metadata = document.metadata(fetchedAt: now)
            let wantsRevocation = metadata.revocationEndpoint == nil && settings.endpoints.revocation == nil
            let wantsDevice =
                metadata.deviceAuthorizationEndpoint == nil && settings.endpoints.deviceAuthorization == nil
            if wantsRevocation || wantsDevice, let rfc8414 {
                // A supplement only: a provider without one (any 4xx), with an
                // unusable one or failing on the path is fine; an unreachable
                // provider is not (the request is worth trying again).
                var extra: ProviderMetadata.Document?
                do {
                    extra = try await fetchDocument(
                        rfc8414, what: "authorization server metadata", optional: true)
                } catch {
                    switch error {
                    case .malformed, .issuerMismatch, .serverFailure, .responseTooLarge: extra = nil
                    default: throw error
                    }
                }
                if let extra {
                    metadata.revocationEndpoint = metadata.revocationEndpoint ?? extra.revocation_endpoint
                    metadata.revocationEndpointAuthMethodsSupported =
                        metadata.revocationEndpointAuthMethodsSupported
                        ?? extra.revocation_endpoint_auth_methods_supported
                    metadata.deviceAuthorizationEndpoint =
                        metadata.deviceAuthorizationEndpoint ?? extra.device_authorization_endpoint
                }
            }
            return metadata
        case .oauth2, .browserLogin:
            guard let rfc8414 else { throw .insecureEndpoint("Issuer=") }
            if let document = try await fetchDocument(
                rfc8414, what: "authorization server metadata", optional: true)
            {
                return document.metadata(fetchedAt: now)
            }
            return ProviderMetadata(issuer: settings.issuer, fetchedAt: now)
        }
    }

    /// GETs one metadata document. Its `issuer` must equal the configured
    /// issuer exactly (a template as written). With `optional`, a 4xx means
    /// the provider publishes none (nil).
    func fetchDocument(_ url: String, what: String, optional: Bool) async throws(ProviderError)
        -> ProviderMetadata.Document?
    {
        let response = try await send(
            makeRequest(method: "GET", url: url, headers: [], body: nil, changesState: false))
        switch response.status {
        case 200:
            let document: ProviderMetadata.Document
            do {
                document = try WireJSON.decode(ProviderMetadata.Document.self, from: response.body)
            } catch {
                throw .malformed(status: 200, "the \(what) is not valid (\(error))")
            }
            guard document.issuer == settings.issuer else {
                throw .issuerMismatch(expected: settings.issuer, got: document.issuer)
            }
            return document
        case 400...499 where optional:
            return nil
        default:
            try Self.throwForUnexpected(response, what: "the \(what)")
        }
    }

    // MARK: Authorization request (RFC 6749 §4.1.1, RFC 7636 §4.3)

    /// Parameters the broker sets itself; an `AuthorizeParams=` entry with one
    /// of these names is not sent.
    static let reservedAuthorizeParameters: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method",
    ]

    /// The URL the browser opens: `response_type=code`, `client_id`,
    /// `redirect_uri`, `scope`, `state`, `nonce` (oidc), `code_challenge`,
    /// `code_challenge_method=S256`, then `AuthorizeParams=`, added to any
    /// query the authorization endpoint already has.
    /// `prompt` and `loginHint` (an added account, docs/rpc.md) take the place of `AuthorizeParams=`'s own.
    public func authorizeURL(
        redirectURI: String, state: String, nonce: String?, codeChallenge: String, prompt: String? = nil,
        loginHint: String? = nil
    ) async throws(ProviderError) -> String {
        let (endpoint, parameters) = try await authorizeParameters(
            redirectURI: redirectURI, state: state, nonce: nonce, codeChallenge: codeChallenge, prompt: prompt,
            loginHint: loginHint)
        return Self.url(endpoint, adding: parameters)
    }

    /// The authorization endpoint and the parameters of an authorization
    /// request, in order: what the browser is sent or what is pushed (RFC 9126).
    func authorizeParameters(
        redirectURI: String, state: String, nonce: String?, codeChallenge: String, prompt: String? = nil,
        loginHint: String? = nil
    ) async throws(ProviderError) -> (endpoint: String, parameters: [(String, String)]) {
        let metadata = try await metadata()
        guard let endpoint = metadata.authorizationEndpoint else {
            throw .unsupported("the provider has no authorization endpoint")
        }
        if let methods = metadata.codeChallengeMethodsSupported, !methods.contains("S256") {
            throw .unsupported("the provider does not offer PKCE with S256")
        }
        var parameters: [(String, String)] = [
            ("response_type", "code"), ("client_id", settings.clientId), ("redirect_uri", redirectURI),
            ("scope", settings.scopes.joined(separator: " ")), ("state", state),
        ]
        if settings.kind == .oidc, let nonce { parameters.append(("nonce", nonce)) }
        parameters.append(("code_challenge", codeChallenge))
        parameters.append(("code_challenge_method", "S256"))
        for extra in settings.authorizeParams where !Self.reservedAuthorizeParameters.contains(extra.name) {
            if (extra.name == "prompt" && prompt != nil) || (extra.name == "login_hint" && loginHint != nil) { continue }
            parameters.append((extra.name, extra.value))
        }
        if let prompt { parameters.append(("prompt", prompt)) }
        if let loginHint { parameters.append(("login_hint", loginHint)) }
        return (endpoint, parameters)
    }

    /// `endpoint` with `parameters` added to any query it already has.
    static func url(_ endpoint: String, adding parameters: [(String, String)]) -> String {
        let query = Self.formEncode(parameters)
        guard let question = endpoint.firstIndex(of: "?") else { return endpoint + "?" + query }
        let existing = endpoint[endpoint.index(after: question)...]
        return existing.isEmpty || existing.hasSuffix("&") ? endpoint + query : endpoint + "&" + query
    }

    // MARK: Token endpoint (RFC 6749 §4.1.3, §6; RFC 8628 §3.4)

    /// The authorization code exchange, sent once.
    /// With `dpop`, the request carries a proof of that key (RFC 9449 §5).
    public func exchange(code: String, redirectURI: String, codeVerifier: String, dpop: DPoPKey? = nil)
        async throws(ProviderError) -> TokenResponse
    {
        let response = try await tokenRequest(
            [
                ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI),
                ("code_verifier", codeVerifier),
            ], dpop: dpop)
        return try tokenAnswer(response, dpop: dpop != nil)
    }

    /// A refresh (RFC 6749 §6), sent once. A bodiless `400`/`401` is a
    /// refusal (`refused`, `invalid_grant`; OAUTH.md §4, SessionRevoke.swift).
    public func refresh(refreshToken: String, dpop: DPoPKey? = nil) async throws(ProviderError) -> TokenResponse {
        try await refreshClassified(refreshToken: refreshToken, dpop: dpop)
    }

    /// One poll with a device code (RFC 8628 §3.4, §3.5); with `dpop`, it
    /// carries a proof of that key (RFC 9449 §5).
    public func pollDevice(deviceCode: String, dpop: DPoPKey? = nil) async throws(ProviderError) -> DevicePoll {
        let response = try await tokenRequest(
            [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode)], dpop: dpop)
        do {
            return .tokens(try tokenAnswer(response, dpop: dpop != nil))
        } catch {
            if case .refused(_, let code, _) = error {
                switch code {
                case "authorization_pending": return .pending
                case "slow_down": return .slowDown
                case "access_denied": return .denied
                case "expired_token": return .expired
                default: break
                }
            }
            throw error
        }
    }

    func tokenRequest(_ form: [(String, String)], dpop: DPoPKey? = nil) async throws(ProviderError) -> HTTPResponse {
        let metadata = try await metadataBeforeSending()
        guard let endpoint = metadata.tokenEndpoint else { throw .unsupported("the provider has no token endpoint") }
        return try await postForm(
            endpoint, form, authentication: clientAuthMethod(advertised: metadata.tokenEndpointAuthMethodsSupported),
            dpop: dpop)
    }

    /// The metadata before a state-changing request: when it cannot be had,
    /// the request was certainly not sent (so any failure but a local
    /// refusal is reported as `notSent`).
    func metadataBeforeSending() async throws(ProviderError) -> ProviderMetadata {
        do {
            return try await metadata()
        } catch {
            switch error {
            case .notSent, .issuerMismatch, .insecureEndpoint, .unsupported: throw error
            default: throw .notSent("the provider's metadata could not be fetched: \(error)")
            }
        }
    }

    /// How the client authenticates (docs/providers.md): a public client
    /// sends `client_id` in the form; with a `ClientSecret`,
    /// `client_secret_post` when the provider lists it or lists nothing,
    /// else `client_secret_basic` when listed, else post.
    func clientAuthMethod(advertised: [String]?) -> ClientAuthMethod {
        guard settings.clientSecret != nil else { return .none }
        guard let advertised else { return .clientSecretPost }
        if advertised.contains(ClientAuthMethod.clientSecretPost.rawValue) { return .clientSecretPost }
        if advertised.contains(ClientAuthMethod.clientSecretBasic.rawValue) { return .clientSecretBasic }
        return .clientSecretPost
    }

    /// Maps a token endpoint's answer (RFC 6749 §5.1, §5.2) to its tokens or
    /// an error. GitHub answers some errors with a 200 and an `error` member.
    /// `dpop`: the request carried a proof, so `token_type` `DPoP` is the
    /// expected answer (a `Bearer` one only with `DPoP=auto`, RFC 9449 §5).
    func tokenAnswer(_ response: HTTPResponse, dpop: Bool) throws(ProviderError) -> TokenResponse {
        try Self.tokenAnswer(response, dpop: dpop, usage: settings.dpop)
    }

    static func tokenAnswer(_ response: HTTPResponse, dpop: Bool = false, usage: ProviderUsage = .auto)
        throws(ProviderError) -> TokenResponse
    {
        guard response.status == 200 else { try throwForUnexpected(response, what: "the token endpoint's answer") }
        let wire: TokenWire
        do {
            wire = try WireJSON.decode(TokenWire.self, from: response.body)
        } catch {
            throw .malformed(status: 200, "the token answer is not valid (\(error))")
        }
        if let error = wire.error {
            throw try refusal(status: 200, error: error, description: wire.error_description)
        }
        guard let accessToken = wire.access_token, !accessToken.isEmpty else {
            throw .malformed(status: 200, "the token answer has no access_token")
        }
        guard let tokenType = wire.token_type else { throw .malformed(status: 200, "the token answer has no token_type") }
        switch tokenType.lowercased() {
        case "bearer" where dpop && usage == .yes:
            throw .malformed(status: 200, "the provider answered a DPoP request with a Bearer token, and DPoP=yes")
        case "bearer": break
        case "dpop" where dpop: break
        default:
            throw .malformed(status: 200, "the token answer's token_type is not \(dpop ? "DPoP or Bearer" : "Bearer")")
        }
        return TokenResponse(
            accessToken: accessToken, tokenType: tokenType, expiresIn: wire.expires_in?.value,
            refreshToken: wire.refresh_token.flatMap { $0.isEmpty ? nil : $0 },
            // Keycloak's 0 (an offline token) means no expiry.
            refreshExpiresIn: (wire.refresh_expires_in ?? wire.refresh_token_expires_in).flatMap {
                $0.value == 0 ? nil : $0.value
            },
            idToken: wire.id_token.flatMap { $0.isEmpty ? nil : $0 }, scope: wire.scope)
    }

    struct TokenWire: Decodable {
        var access_token: String?
        var token_type: String?
        var expires_in: WireSeconds?
        var refresh_token: String?
        var refresh_expires_in: WireSeconds?
        var refresh_token_expires_in: WireSeconds?
        var id_token: String?
        var scope: String?
        var error: String?
        var error_description: String?
    }

    // MARK: Revocation (RFC 7009)

    /// Whether the provider has a revocation endpoint. Answers from the
    /// metadata; when the metadata cannot be had now, true (a revoke may be
    /// owed: `revoke` then answers `notSent`, or `noRevocationEndpoint`).
    public var hasRevocation: Bool {
        get async {
            if let known = state.withLock({ $0.metadata }) { return known.revocationEndpoint != nil }
            do {
                return try await metadata().revocationEndpoint != nil
            } catch {
                return true
            }
        }
    }

    /// Revokes `token` (`hint`: `refresh_token` or `access_token`), sent
    /// once. With `RevocationAuth=bearer` the access token goes as
    /// `Authorization: Bearer` (when there is one); else the client
    /// authenticates as at the token endpoint. Throws `noRevocationEndpoint`
    /// when the provider has none.
    /// With `dpop` (a DPoP-bound session) the revoke carries a proof, with
    /// `ath` when the access token goes as `Authorization: DPoP`.
    public func revoke(token: String, hint: String, accessToken: String?, dpop: DPoPKey? = nil)
        async throws(ProviderError)
    {
        let metadata = try await metadataBeforeSending()
        guard let endpoint = metadata.revocationEndpoint else { throw ProviderError.noRevocationEndpoint }
        let form = [("token", token), ("token_type_hint", hint)]
        let response: HTTPResponse
        if settings.revocationAuth == .bearer, let accessToken {
            response = try await postForm(endpoint, form, authentication: nil, bearer: accessToken, dpop: dpop)
        } else {
            let advertised =
                metadata.revocationEndpointAuthMethodsSupported ?? metadata.tokenEndpointAuthMethodsSupported
            response = try await postForm(
                endpoint, form, authentication: clientAuthMethod(advertised: advertised), dpop: dpop)
        }
        // RFC 7009 §2.2: 200 whether or not the token was valid; the body is ignored.
        if (200...299).contains(response.status) { return }
        try Self.throwForUnexpected(response, what: "the revocation answer")
    }

    // MARK: Userinfo (OIDC Core §5.3)

    /// With `dpop` (a DPoP-bound access token): `Authorization: DPoP` and a proof with `ath`.
    public func userinfo(accessToken: String, dpop: DPoPKey? = nil) async throws(ProviderError) -> UserInfo {
        let metadata = try await metadata()
        guard let endpoint = metadata.userinfoEndpoint else {
            throw .unsupported("the provider has no userinfo endpoint")
        }
        let authorization = HTTPHeader("Authorization", (dpop != nil ? "DPoP " : "Bearer ") + accessToken)
        let response = try await sendProved(method: "GET", url: endpoint, dpop: dpop, accessToken: accessToken) {
            proof in
            self.makeRequest(
                method: "GET", url: endpoint, headers: [authorization] + proof, body: nil, changesState: false)
        }
        switch response.status {
        case 200:
            let wire: UserinfoWire
            do {
                wire = try WireJSON.decode(UserinfoWire.self, from: response.body)
            } catch {
                throw .malformed(status: 200, "the userinfo answer is not valid (\(error))")
            }
            let subject = (wire.sub ?? wire.id)?.text
            return UserInfo(
                subject: subject.flatMap { $0.isEmpty ? nil : $0 }, email: wire.email, name: wire.name,
                preferredUsername: wire.preferred_username ?? wire.login, emailVerified: wire.email_verified?.value)
        case 401, 403:
            // RFC 6750 §3: the error is in WWW-Authenticate.
            if let code = response.header("WWW-Authenticate").flatMap(Self.bearerError) {
                throw try Self.refusal(status: response.status, error: code, description: nil)
            }
            try Self.throwForUnexpected(response, what: "the userinfo answer")
        default:
            try Self.throwForUnexpected(response, what: "the userinfo answer")
        }
    }

    struct UserinfoWire: Decodable {
        var sub: WireIdentifier?
        var id: WireIdentifier?
        var email: String?
        var name: String?
        var preferred_username: String?
        var login: String?
        var email_verified: WireFlag?
    }

    /// The `error` auth-param of a `Bearer` challenge (RFC 6750 §3).
    public static func bearerError(_ header: String) -> String? {
        var rest = Substring(header)
        while let range = rest.firstRange(of: "error=") {
            let before = rest[..<range.lowerBound].last
            rest = rest[range.upperBound...]
            guard before == nil || before == " " || before == "," else { continue }
            if rest.first == "\"" {
                let value = rest.dropFirst().prefix { $0 != "\"" }
                return value.isEmpty ? nil : String(value)
            }
            let value = rest.prefix { $0 != "," && $0 != " " }
            return value.isEmpty ? nil : String(value)
        }
        return nil
    }

    // MARK: JWKS

    /// The JWKS document's bytes (a JSON object), handed to the ID token
    /// check. Kept in memory for a day; `refetch` (an unknown key id) fetches
    /// it again at most once a minute, else answers the kept bytes. A refetch
    /// also refreshes the metadata when it can (its `jwks_uri` may have
    /// changed).
    public func jwks(refetch: Bool) async throws(ProviderError) -> [UInt8] {
        let now = clock.now()
        if let kept = state.withLock({ $0.jwks }) {
            let age = now.millisecondsSince1970 - kept.fetchedAt.millisecondsSince1970
            let allowed = age < 0 || age >= Self.jwksRefetchMilliseconds
            if (!refetch && Self.isFresh(kept.fetchedAt, now: now)) || (refetch && !allowed) {
                return kept.bytes
            }
        }
        var metadata = try await metadata()
        if refetch, let fresher = try? await self.metadata(forceFetch: true) { metadata = fresher }
        guard let uri = metadata.jwksURI else { throw .unsupported("the provider publishes no jwks_uri") }
        let response = try await send(
            makeRequest(
                method: "GET", url: uri, headers: [], body: nil, changesState: false,
                maximumResponseBytes: Self.maximumJWKSBytes))
        guard response.status == 200 else { try Self.throwForUnexpected(response, what: "the JWKS") }
        do {
            try WireJSON.validateObject(response.body)
        } catch {
            throw .malformed(status: 200, "the JWKS is not valid (\(error))")
        }
        state.withLock { $0.jwks = (response.body, now) }
        return response.body
    }

    // MARK: Device authorization (RFC 8628 §3.1, §3.2)

    public func deviceAuthorization() async throws(ProviderError) -> DeviceAuthorization {
        let metadata = try await metadataBeforeSending()
        guard let endpoint = metadata.deviceAuthorizationEndpoint else { throw ProviderError.noDeviceEndpoint }
        let response = try await postForm(
            endpoint, [("scope", settings.scopes.joined(separator: " "))],
            authentication: clientAuthMethod(advertised: metadata.tokenEndpointAuthMethodsSupported))
        guard response.status == 200 else {
            try Self.throwForUnexpected(response, what: "the device authorization answer")
        }
        let wire: DeviceWire
        do {
            wire = try WireJSON.decode(DeviceWire.self, from: response.body)
        } catch {
            throw .malformed(status: 200, "the device authorization answer is not valid (\(error))")
        }
        if let error = wire.error { throw try Self.refusal(status: 200, error: error, description: wire.error_description) }
        guard let deviceCode = wire.device_code, !deviceCode.isEmpty, let userCode = wire.user_code,
            Self.isShowable(userCode, limit: 64), let expiresIn = wire.expires_in?.value
        else {
            throw .malformed(status: 200, "device_code, user_code or expires_in is missing or not usable")
        }
        // Google writes `verification_url`.
        guard let verification = wire.verification_uri ?? wire.verification_url, Self.isWebAddress(verification)
        else {
            throw .malformed(status: 200, "verification_uri is missing or not an http(s) address")
        }
        let complete = wire.verification_uri_complete.flatMap { Self.isWebAddress($0) ? $0 : nil }
        return DeviceAuthorization(
            deviceCode: deviceCode, userCode: userCode, verificationURI: verification,
            verificationURIComplete: complete, expiresIn: expiresIn, interval: max(1, wire.interval?.value ?? 5))
    }

    struct DeviceWire: Decodable {
        var device_code: String?
        var user_code: String?
        var verification_uri: String?
        var verification_url: String?
        var verification_uri_complete: String?
        var expires_in: WireSeconds?
        var interval: WireSeconds?
        var error: String?
        var error_description: String?
    }

    /// Text shown to the user: non-empty, at most `limit` characters, no control character.
    static func isShowable(_ text: String, limit: Int) -> Bool {
        !text.isEmpty && text.count <= limit
            && text.unicodeScalars.allSatisfy { $0.value >= 0x20 && !(0x7F...0x9F).contains($0.value) }
    }

    static func isWebAddress(_ text: String) -> Bool {
        guard text.utf8.count <= 2048, let parts = URLParts(splitting: text), let host = parts.host, !host.isEmpty
        else { return false }
        let scheme = parts.scheme.lowercased()
        return scheme == "https" || scheme == "http"
    }

    // MARK: Plumbing

    /// `application/x-www-form-urlencoded` (percent-encoding all but RFC 3986
    /// unreserved characters, which every form decoder reads).
    static func formEncode(_ pairs: [(String, String)]) -> String {
        pairs.map { percentEncode($0.0) + "=" + percentEncode($0.1) }.joined(separator: "&")
    }

    /// POSTs a form, state-changing (never repeated). `authentication` adds
    /// the client's credentials (RFC 6749 §2.3.1); nil sends none.
    func postForm(
        _ url: String, _ form: [(String, String)], authentication: ClientAuthMethod?, bearer: String? = nil,
        dpop: DPoPKey? = nil
    ) async throws(ProviderError) -> HTTPResponse {
        var pairs = form
        var headers = [HTTPHeader("Content-Type", "application/x-www-form-urlencoded")]
        switch authentication {
        case nil: break
        case .none?: pairs.append(("client_id", settings.clientId))
        case .clientSecretPost?:
            pairs.append(("client_id", settings.clientId))
            pairs.append(("client_secret", settings.clientSecret ?? ""))
        case .clientSecretBasic?:
            let credentials = percentEncode(settings.clientId) + ":" + percentEncode(settings.clientSecret ?? "")
            headers.append(HTTPHeader("Authorization", "Basic " + Self.base64(Array(credentials.utf8))))
        }
        if let bearer { headers.append(HTTPHeader("Authorization", (dpop != nil ? "DPoP " : "Bearer ") + bearer)) }
        let body = Array(Self.formEncode(pairs).utf8)
        let fixed = headers
        return try await sendProved(method: "POST", url: url, dpop: dpop, accessToken: bearer) { proof in
            self.makeRequest(method: "POST", url: url, headers: fixed + proof, body: body, changesState: true)
        }
    }

    // MARK: DPoP (RFC 9449)

    /// Sends a request built with `proof` (the `DPoP` header, or none
    /// without `dpop`). A refusal for want of a fresh nonce (`use_dpop_nonce`,
    /// RFC 9449 §8, §9) was refused before processing: the request is built
    /// again with the nonce given and sent once more, which is not a repeat.
    func sendProved(
        method: String, url: String, dpop: DPoPKey?, accessToken: String?,
        _ build: ([HTTPHeader]) -> HTTPRequest
    ) async throws(ProviderError) -> HTTPResponse {
        guard let dpop else { return try await send(build([])) }
        let used = nonce(for: url)
        var response = try await send(
            build([try proofHeader(dpop, method: method, url: url, accessToken: accessToken, nonce: used)]))
        let fresh = rememberNonce(from: response, url: url)
        if Self.asksForNonce(response), let fresh, fresh != used {
            response = try await send(
                build([try proofHeader(dpop, method: method, url: url, accessToken: accessToken, nonce: fresh)]))
            rememberNonce(from: response, url: url)
        }
        return response
    }

    /// The `DPoP` header: a proof for `method` and `url` (with `ath` for an access token).
    func proofHeader(_ key: DPoPKey, method: String, url: String, accessToken: String?, nonce: String?)
        throws(ProviderError) -> HTTPHeader
    {
        do {
            return HTTPHeader(
                "DPoP",
                try key.proof(
                    method: method, url: url, accessToken: accessToken, nonce: nonce,
                    now: clock.now().millisecondsSince1970 / 1000))
        } catch {
            throw ProviderError.proofNotMade
        }
    }

    /// The latest nonce of `url`'s origin.
    public func nonce(for url: String) -> String? {
        guard let origin = Self.origin(url) else { return nil }
        return state.withLock { $0.nonces[origin] }
    }

    /// Keeps the answer's `DPoP-Nonce` (printable ASCII, at most 512 bytes) for its origin; answers it.
    @discardableResult
    public func rememberNonce(from response: HTTPResponse, url: String) -> String? {
        guard let value = response.header("DPoP-Nonce"), !value.isEmpty, value.utf8.count <= 512,
            value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }), let origin = Self.origin(url)
        else { return nil }
        state.withLock {
            // A few origins per provider (the issuer's, the app's API): a bound, not a cache policy.
            if $0.nonces.count >= 16 && $0.nonces[origin] == nil { $0.nonces.removeAll() }
            $0.nonces[origin] = value
        }
        return value
    }

    /// A `400 {"error":"use_dpop_nonce"}` (token endpoint) or a `401` whose
    /// `WWW-Authenticate` says `error="use_dpop_nonce"` (a resource).
    public static func asksForNonce(_ response: HTTPResponse) -> Bool {
        switch response.status {
        case 400:
            return (try? WireJSON.decode(ErrorWire.self, from: response.body))?.error == "use_dpop_nonce"
        case 401:
            if response.header("WWW-Authenticate").flatMap(bearerError) == "use_dpop_nonce" { return true }
            return (try? WireJSON.decode(ErrorWire.self, from: response.body))?.error == "use_dpop_nonce"
        default:
            return false
        }
    }

    /// `scheme://authority`, lowercased.
    static func origin(_ url: String) -> String? {
        guard let parts = URLParts(splitting: url), let authority = parts.authority else { return nil }
        return (parts.scheme + "://" + authority).lowercased()
    }

    func makeRequest(
        method: String, url: String, headers: [HTTPHeader], body: [UInt8]?, changesState: Bool,
        maximumResponseBytes: Int = OAuthProvider.maximumResponseBytes
    ) -> HTTPRequest {
        HTTPRequest(
            method: method, url: url, headers: [HTTPHeader("Accept", "application/json")] + headers, body: body,
            timeoutMilliseconds: Self.timeoutMilliseconds, connectTimeoutMilliseconds: Self.connectTimeoutMilliseconds,
            maximumResponseBytes: maximumResponseBytes, caFile: caFile, changesState: changesState)
    }

    func send(_ request: HTTPRequest) async throws(ProviderError) -> HTTPResponse {
        do {
            return try await transport.send(request)
        } catch {
            switch error {
            case .notSent(let m): throw .notSent(m)
            case .invalidRequest(let m): throw .notSent("the request could not be built: \(m)")
            case .noAnswer(let m): throw .noAnswer(m)
            case .responseTooLarge: throw .responseTooLarge
            }
        }
    }

    /// Every answer but the expected success: a well-formed OAuth error body
    /// on a 400 or 401 is a refusal (RFC 6749 §5.2), and so is one on
    /// another 4xx but 429 (Glewlwyd answers a spent or expired code `403
    /// {"error":"invalid_code"}`: a definite refusal, docs/providers.md);
    /// 3xx and anything else not the protocol's are malformed; 5xx a server failure.
    static func throwForUnexpected(_ response: HTTPResponse, what: String) throws(ProviderError) -> Never {
        let status = response.status
        switch status {
        case 300...399:
            throw .malformed(status: status, "\(what) is a redirect, which the protocol does not use here")
        case 400, 401:
            let body: ErrorWire
            do {
                body = try WireJSON.decode(ErrorWire.self, from: response.body)
            } catch {
                throw .malformed(status: status, "\(what) is not an OAuth error body (\(error))")
            }
            throw try refusal(status: status, error: body.error, description: body.error_description)
        case 402...499 where status != 429:
            guard let body = try? WireJSON.decode(ErrorWire.self, from: response.body) else {
                throw .malformed(status: status, "\(what) has an unexpected status")
            }
            throw try refusal(status: status, error: body.error, description: body.error_description)
        case 500...599:
            throw .serverFailure(status: status)
        default:
            throw .malformed(status: status, "\(what) has an unexpected status")
        }
    }

    struct ErrorWire: Decodable {
        var error: String
        var error_description: String?
    }

    /// A refusal with the provider's words as plain text; an empty `error` is malformed.
    static func refusal(status: Int, error: String, description: String?) throws(ProviderError) -> ProviderError {
        let code = ProviderError.plainText(error, limit: 100)
        guard !code.isEmpty else { throw .malformed(status: status, "the error body's error is empty") }
        let text = description.map { ProviderError.plainText($0) }.flatMap { $0.isEmpty ? nil : $0 }
        return .refused(status: status, error: code, description: text)
    }

    /// Standard base64 with padding (RFC 4648 §4), for `Authorization: Basic`.
    static func base64(_ bytes: [UInt8]) -> String {
        var text = ""
        for character in Base64URL.encode(bytes) {
            switch character {
            case "-": text.append("+")
            case "_": text.append("/")
            default: text.append(character)
            }
        }
        while text.utf8.count % 4 != 0 { text += "=" }
        return text
    }
}
