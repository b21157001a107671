import BrokerCore
import BrowserLoginProtocol

/// An authorization server's metadata (OpenID Connect Discovery 1.0 §3,
/// RFC 8414 §2): the members the broker uses. Holds no secret.
public struct ProviderMetadata: Sendable, Equatable {
    public var issuer: String
    public var authorizationEndpoint: String?
    public var tokenEndpoint: String?
    public var revocationEndpoint: String?
    public var userinfoEndpoint: String?
    public var deviceAuthorizationEndpoint: String?
    public var jwksURI: String?
    public var codeChallengeMethodsSupported: [String]?
    /// `authorization_response_iss_parameter_supported` (RFC 9207 §3).
    public var issParameterSupported: Bool
    public var tokenEndpointAuthMethodsSupported: [String]?
    public var revocationEndpointAuthMethodsSupported: [String]?
    /// `dpop_signing_alg_values_supported` (RFC 9449 §5.1).
    public var dpopSigningAlgValuesSupported: [String]? = nil
    /// `pushed_authorization_request_endpoint` (RFC 9126 §5).
    public var pushedAuthorizationRequestEndpoint: String? = nil
    /// `require_pushed_authorization_requests` (RFC 9126 §5).
    public var requirePushedAuthorizationRequests: Bool = false
    public var fetchedAt: Timestamp
    /// `prompt_values_supported` (OpenID Connect Prompt Create §4.1): which `prompt` an added account may ask for.
    public var promptValuesSupported: [String]? = nil

    public init(
        issuer: String, authorizationEndpoint: String? = nil, tokenEndpoint: String? = nil,
        revocationEndpoint: String? = nil, userinfoEndpoint: String? = nil, deviceAuthorizationEndpoint: String? = nil,
        jwksURI: String? = nil, codeChallengeMethodsSupported: [String]? = nil, issParameterSupported: Bool = false,
        tokenEndpointAuthMethodsSupported: [String]? = nil, revocationEndpointAuthMethodsSupported: [String]? = nil,
        fetchedAt: Timestamp
    ) {
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.userinfoEndpoint = userinfoEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.jwksURI = jwksURI
        self.codeChallengeMethodsSupported = codeChallengeMethodsSupported
        self.issParameterSupported = issParameterSupported
        self.tokenEndpointAuthMethodsSupported = tokenEndpointAuthMethodsSupported
        self.revocationEndpointAuthMethodsSupported = revocationEndpointAuthMethodsSupported
        self.fetchedAt = fetchedAt
    }

    /// The metadata as JSON for the state database's cache: the document's
    /// member names, plus `fetched_at` in milliseconds since 1970.
    public func encoded() -> String {
        WireJSON.encode(Document(self)) ?? "{}"
    }

    /// Reads what `encoded()` wrote.
    public init(cached: String) throws(ProviderError) {
        let document: Document
        do {
            document = try WireJSON.decode(Document.self, from: Array(cached.utf8))
        } catch {
            throw .malformed(status: 0, "the cached metadata is not readable (\(error))")
        }
        guard let fetchedAt = document.fetched_at else {
            throw .malformed(status: 0, "the cached metadata has no fetch time")
        }
        self = document.metadata(fetchedAt: Timestamp(millisecondsSince1970: fetchedAt))
    }

    /// The document as published: every member optional but `issuer`; a
    /// member of the wrong type is a malformed document.
    struct Document: Codable {
        var issuer: String
        var authorization_endpoint: String?
        var token_endpoint: String?
        var revocation_endpoint: String?
        var userinfo_endpoint: String?
        var device_authorization_endpoint: String?
        var jwks_uri: String?
        var code_challenge_methods_supported: [String]?
        var authorization_response_iss_parameter_supported: Bool?
        var token_endpoint_auth_methods_supported: [String]?
        var revocation_endpoint_auth_methods_supported: [String]?
        var dpop_signing_alg_values_supported: [String]?
        var pushed_authorization_request_endpoint: String?
        var require_pushed_authorization_requests: Bool?
        var prompt_values_supported: [String]? = nil
        /// Only in the cache's copy.
        var fetched_at: Int64?

        init(_ m: ProviderMetadata) {
            issuer = m.issuer
            authorization_endpoint = m.authorizationEndpoint
            token_endpoint = m.tokenEndpoint
            revocation_endpoint = m.revocationEndpoint
            userinfo_endpoint = m.userinfoEndpoint
            device_authorization_endpoint = m.deviceAuthorizationEndpoint
            jwks_uri = m.jwksURI
            code_challenge_methods_supported = m.codeChallengeMethodsSupported
            authorization_response_iss_parameter_supported = m.issParameterSupported
            token_endpoint_auth_methods_supported = m.tokenEndpointAuthMethodsSupported
            revocation_endpoint_auth_methods_supported = m.revocationEndpointAuthMethodsSupported
            dpop_signing_alg_values_supported = m.dpopSigningAlgValuesSupported
            pushed_authorization_request_endpoint = m.pushedAuthorizationRequestEndpoint
            require_pushed_authorization_requests = m.requirePushedAuthorizationRequests
            prompt_values_supported = m.promptValuesSupported
            fetched_at = m.fetchedAt.millisecondsSince1970
        }

        func metadata(fetchedAt: Timestamp) -> ProviderMetadata {
            var metadata = ProviderMetadata(
                issuer: issuer, authorizationEndpoint: authorization_endpoint, tokenEndpoint: token_endpoint,
                revocationEndpoint: revocation_endpoint, userinfoEndpoint: userinfo_endpoint,
                deviceAuthorizationEndpoint: device_authorization_endpoint, jwksURI: jwks_uri,
                codeChallengeMethodsSupported: code_challenge_methods_supported,
                issParameterSupported: authorization_response_iss_parameter_supported ?? false,
                tokenEndpointAuthMethodsSupported: token_endpoint_auth_methods_supported,
                revocationEndpointAuthMethodsSupported: revocation_endpoint_auth_methods_supported,
                fetchedAt: fetchedAt)
            metadata.dpopSigningAlgValuesSupported = dpop_signing_alg_values_supported
            metadata.pushedAuthorizationRequestEndpoint = pushed_authorization_request_endpoint
            metadata.requirePushedAuthorizationRequests = require_pushed_authorization_requests ?? false
            metadata.promptValuesSupported = prompt_values_supported
            return metadata
        }
    }

    /// DPoP with ES256 is offered (RFC 9449 §5.1).
    public var offersDPoP: Bool { dpopSigningAlgValuesSupported?.contains("ES256") ?? false }

    /// The endpoints, each replaced by its `*Endpoint` key when the client
    /// file sets one (docs/providers.md: a key always wins).
    func applying(_ keys: ProviderEndpoints) -> ProviderMetadata {
        var copy = self
        if let v = keys.authorization { copy.authorizationEndpoint = v }
        if let v = keys.token { copy.tokenEndpoint = v }
        if let v = keys.revocation { copy.revocationEndpoint = v }
        if let v = keys.userinfo { copy.userinfoEndpoint = v }
        if let v = keys.deviceAuthorization { copy.deviceAuthorizationEndpoint = v }
        if let v = keys.jwks { copy.jwksURI = v }
        return copy
    }

    /// Every endpoint with the name to report it by: the client-file key
    /// when it came from one, else the metadata member.
    func namedEndpoints(keys: ProviderEndpoints) -> [(name: String, url: String)] {
        let all: [(String, String, String?, String?)] = [
            ("AuthorizationEndpoint=", "authorization_endpoint", keys.authorization, authorizationEndpoint),
            ("TokenEndpoint=", "token_endpoint", keys.token, tokenEndpoint),
            ("RevocationEndpoint=", "revocation_endpoint", keys.revocation, revocationEndpoint),
            ("UserinfoEndpoint=", "userinfo_endpoint", keys.userinfo, userinfoEndpoint),
            (
                "DeviceAuthorizationEndpoint=", "device_authorization_endpoint", keys.deviceAuthorization,
                deviceAuthorizationEndpoint
            ),
            ("JwksUri=", "jwks_uri", keys.jwks, jwksURI),
            (
                "pushed_authorization_request_endpoint", "pushed_authorization_request_endpoint", nil,
                pushedAuthorizationRequestEndpoint
            ),
        ]
        return all.compactMap { key, member, fromKey, value in
            guard let value else { return nil }
            return (fromKey != nil ? key : member, value)
        }
    }
}

/// Where the broker keeps fetched metadata between runs (the state
/// database), keyed by the configured issuer.
public protocol ProviderMetadataCache: Sendable {
    func load(issuer: String) -> (json: String, fetchedAt: Timestamp)?
    func save(issuer: String, json: String, fetchedAt: Timestamp)
}

/// The URL rules of docs/providers.md for provider endpoints.
enum EndpointRule {
    /// https, or http on a loopback address (127.0.0.0/8 or [::1]; never the
    /// name `localhost`); an absolute URL with a host, without userinfo or
    /// fragment (RFC 6749 §3.1).
    static func isAcceptable(_ url: String) -> Bool {
        guard let parts = URLParts(splitting: url), let host = parts.host, !host.isEmpty, !parts.hasUserinfo,
            parts.fragment == nil
        else { return false }
        if let port = parts.portText, !port.isEmpty, !port.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return false
        }
        switch parts.scheme.lowercased() {
        case "https": return true
        case "http": return isLoopback(host)
        default: return false
        }
    }

    /// `[::1]` or a dotted-quad IPv4 address in 127.0.0.0/8.
    static func isLoopback(_ host: String) -> Bool {
        if host == "[::1]" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets[0] == "127" else { return false }
        return octets.allSatisfy { octet in
            !octet.isEmpty && octet.count <= 3 && octet.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
                && Int(octet)! <= 255
        }
    }

    /// The RFC 8414 §3.1 metadata URL: the well-known path inserted between
    /// the issuer's authority and its path (a bare `/` path is no path).
    static func authorizationServerMetadataURL(issuer: String) -> String? {
        guard let parts = URLParts(splitting: issuer), let authority = parts.authority, parts.query == nil,
            parts.fragment == nil
        else { return nil }
        // RFC 8414 §3.1: a terminating "/" of the issuer's path is removed first.
        let path = parts.path.hasSuffix("/") ? String(parts.path.dropLast()) : parts.path
        return parts.scheme + "://" + authority + "/.well-known/oauth-authorization-server" + path
    }
}
