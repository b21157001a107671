import BrowserLoginProtocol

/// Which protocol a client signs in with (`Protocol=` in its client file).
public enum SignInKind: String, Sendable, Equatable, CaseIterable {
    /// The project's own protocol (docs/protocol.md): the default.
    case browserLogin = "browser-login"
    /// OpenID Connect: metadata from `{Issuer}/.well-known/openid-configuration`.
    case oidc
    /// Plain OAuth 2.0: metadata from RFC 8414, or the `*Endpoint` keys.
    case oauth2
}

/// How an OAuth client authenticates at the token, revocation and device
/// endpoints when it has a `ClientSecret`.
public enum ClientAuthMethod: String, Sendable, Equatable {
    /// `client_id` in the form only (a public client).
    case none
    case clientSecretPost = "client_secret_post"
    case clientSecretBasic = "client_secret_basic"
}

/// How a revocation request is authenticated (`RevocationAuth=`).
public enum RevocationAuth: String, Sendable, Equatable {
    /// As the token endpoint (`client_id`, and the secret when there is one).
    case client
    /// The access token as `Authorization: Bearer` (Glewlwyd).
    case bearer
}

/// Whether a client uses an optional provider feature (`DPoP=`, `PAR=`):
/// `auto` when the provider's metadata offers it, `yes` always (a provider
/// without it is a configuration error), `no` never.
public enum ProviderUsage: String, Sendable, Equatable {
    case auto
    case yes
    case no
}

/// Which way a client signs in by default (`Flow=`).
public enum SignInFlow: String, Sendable, Equatable {
    /// Authorization code + PKCE through the system browser.
    case browser
    /// The device authorization grant (RFC 8628).
    case device
}

/// A loopback redirect (RFC 8252 §7.3): `http://127.0.0.1[:PORT]/PATH` or
/// `http://[::1][:PORT]/PATH`. Without a port the broker listens on an
/// ephemeral one for each attempt.
public struct LoopbackRedirect: Sendable, Equatable {
    public enum Host: String, Sendable, Equatable {
        case ipv4 = "127.0.0.1"
        case ipv6 = "::1"
        /// The host as it is written in a URL.
        public var urlHost: String { self == .ipv4 ? rawValue : "[::1]" }
    }
    public var host: Host
    /// A fixed port (providers that match ports exactly), or nil for an ephemeral one.
    public var port: UInt16?
    /// The exact path, starting with `/`.
    public var path: String

    public init(host: Host, port: UInt16?, path: String) {
        self.host = host
        self.port = port
        self.path = path
    }

    /// The redirect URI sent for a listener on `port`.
    public func redirectURI(port: UInt16) -> String { "http://\(host.urlHost):\(port)\(path)" }
    /// As configured (without a port when it is ephemeral).
    public var configured: String { "http://\(host.urlHost)\(port.map { ":\($0)" } ?? "")\(path)" }
}

/// The endpoints of an authorization server: from its metadata, or given
/// by the `*Endpoint` keys (which always win).
public struct ProviderEndpoints: Sendable, Equatable {
    public var authorization: String?
    public var token: String?
    public var revocation: String?
    public var userinfo: String?
    public var deviceAuthorization: String?
    public var jwks: String?

    public init(
        authorization: String? = nil, token: String? = nil, revocation: String? = nil, userinfo: String? = nil,
        deviceAuthorization: String? = nil, jwks: String? = nil
    ) {
        self.authorization = authorization
        self.token = token
        self.revocation = revocation
        self.userinfo = userinfo
        self.deviceAuthorization = deviceAuthorization
        self.jwks = jwks
    }
}

/// An OAuth 2.0 / OpenID Connect client's settings (docs/providers.md):
/// everything a client file says about its authorization server. Holds the
/// client secret when there is one: never log it or put it in a view.
public struct ProviderSettings: Sendable, Equatable {
    /// `.oidc` or `.oauth2`.
    public var kind: SignInKind
    /// The issuer exactly as configured (an Entra template may hold `{tenantid}`).
    public var issuer: String
    public var clientId: String
    public var clientSecret: String?
    public var scopes: [String]
    /// The `*Endpoint` keys; each overrides the metadata's.
    public var endpoints: ProviderEndpoints
    /// Extra authorize parameters, in order (`AuthorizeParams=a=b&c=d`).
    public var authorizeParams: [(name: String, value: String)]
    public var revocationAuth: RevocationAuth
    public var flow: SignInFlow
    /// `DPoP=` (RFC 9449 sender-constrained tokens).
    public var dpop: ProviderUsage
    /// `PAR=` (RFC 9126 pushed authorization requests).
    public var par: ProviderUsage

    public init(
        kind: SignInKind, issuer: String, clientId: String, clientSecret: String? = nil, scopes: [String],
        endpoints: ProviderEndpoints = ProviderEndpoints(), authorizeParams: [(name: String, value: String)] = [],
        revocationAuth: RevocationAuth = .client, flow: SignInFlow = .browser, dpop: ProviderUsage = .auto,
        par: ProviderUsage = .auto
    ) {
        self.kind = kind
        self.issuer = issuer
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.scopes = scopes
        self.endpoints = endpoints
        self.authorizeParams = authorizeParams
        self.revocationAuth = revocationAuth
        self.flow = flow
        self.dpop = dpop
        self.par = par
    }

    public static func == (a: ProviderSettings, b: ProviderSettings) -> Bool {
        a.kind == b.kind && a.issuer == b.issuer && a.clientId == b.clientId && a.clientSecret == b.clientSecret
            && a.scopes == b.scopes && a.endpoints == b.endpoints
            && a.authorizeParams.map(\.name) == b.authorizeParams.map(\.name)
            && a.authorizeParams.map(\.value) == b.authorizeParams.map(\.value) && a.revocationAuth == b.revocationAuth
            && a.flow == b.flow && a.dpop == b.dpop && a.par == b.par
    }

    /// True when the issuer is an Entra-style template with `{tenantid}`.
    public var issuerIsTemplate: Bool { issuer.contains("{tenantid}") }
}
