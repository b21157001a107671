import BrokerCore
import BrokerCurl
import BrokerHTTP
import BrokerOAuth
import BrowserLoginProtocol
import Synchronization
import SystemSupport

/// The configured upstream OpenID providers of a running server, each an
/// `OAuthSignIn` of the broker's own OAuth code (BrokerOAuth: discovery,
/// the authorization request, the token exchange; BrokerJOSE: the ID
/// token), over the broker's libcurl transport. Metadata and keys are kept
/// in memory by each provider (fetched again after a day, or for an unknown
/// key id). Safe to share between connection threads.
final class UpstreamProviders: Sendable {
    struct Entry: Sendable {
        let configuration: UpstreamProviderConfiguration
        let signIn: OAuthSignIn
        var name: String { configuration.name }
        var provider: OAuthProvider { signIn.provider }
    }

    let entries: [Entry]
    /// When each provider last failed to answer (its discovery document,
    /// to start a sign-in); it is `usable: false` in `browser/config` for
    /// `unusableMillis` after, and usable again once it answers.
    private let failedAt = Mutex<[String: Int64]>([:])
    static let unusableMillis: Int64 = 60_000

    init(_ configurations: [UpstreamProviderConfiguration], clock: @escaping ServerClock) {
        guard !configurations.isEmpty else {
            entries = []
            return
        }
        let transport = CurlTransport(configuration: .init(maximumConcurrentTransfers: 8))
        let time = ServerTime(clock: clock)
        entries = configurations.map { configuration in
            var authorizeParams: [(name: String, value: String)] = []
            if let text = configuration.authorizeParams,
                case .success(let params) = ClientConfigValidator.parseAuthorizeParams(text)
            {
                authorizeParams = params
            }
            let settings = ProviderSettings(
                kind: .oidc, issuer: configuration.issuer, clientId: configuration.clientId,
                clientSecret: configuration.clientSecret, scopes: configuration.scopes,
                endpoints: ProviderEndpoints(
                    authorization: configuration.authorizationEndpoint, token: configuration.tokenEndpoint,
                    userinfo: configuration.userinfoEndpoint, jwks: configuration.jwksUri),
                authorizeParams: authorizeParams)
            let provider = OAuthProvider(
                settings: settings, transport: transport, caFile: configuration.caFile, clock: time, cache: nil)
            return Entry(configuration: configuration, signIn: OAuthSignIn(provider: provider, clock: time))
        }
    }

    /// The provider a start request names (exactly as configured).
    func entry(named name: String) -> Entry? { entries.first { $0.name == name } }

    /// The provider whose configured redirect URIs contain `redirectURI`,
    /// compared as strings (no normalisation): the one client a callback on
    /// that address belongs to.
    func entry(redirectURI: String) -> Entry? {
        entries.first { $0.configuration.redirectUris.contains { $0.utf8.elementsEqual(redirectURI.utf8) } }
    }

    /// The names, in configuration order (the hosted page's buttons).
    var names: [String] { entries.map(\.name) }

    /// Records whether the provider `name` answered just now.
    func record(_ name: String, answered: Bool, now: Int64) {
        failedAt.withLock { $0[name] = answered ? nil : now }
    }

    /// False for `unusableMillis` after the provider last failed to answer.
    func isUsable(_ name: String, now: Int64) -> Bool {
        guard let failed = failedAt.withLock({ $0[name] }) else { return true }
        return now - failed >= Self.unusableMillis
    }
}

/// The server's clock as the broker's `Clock` (tests move the server's by hand).
struct ServerTime: BrokerCore.Clock {
    let clock: ServerClock
    func now() -> Timestamp { Timestamp(millisecondsSince1970: clock()) }
}

/// Runs `body` on the concurrency pool and waits for it on this thread (SystemSupport's `waitBlocking`). The
/// HTTP listener runs one thread per connection (never a pool thread), so
/// blocking it while the provider answers holds up no other request; every
/// request to a provider has its own timeouts (OAuthProvider's 15 s).
func waitFor<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    waitBlocking(body)
}
