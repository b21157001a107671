import BrokerCore
import BrowserLoginProtocol
import Synchronization

@testable import BrokerOAuth

/// One scripted answer of the in-memory provider.
enum Reply: Sendable {
    case json(Int, String, headers: [HTTPHeader] = [])
    case raw(Int, [UInt8], headers: [HTTPHeader] = [])
    case fail(HTTPTransportError)

    var result: Result<HTTPResponse, HTTPTransportError> {
        switch self {
        case .json(let status, let text, let headers):
            .success(
                HTTPResponse(
                    status: status, headers: [HTTPHeader("Content-Type", "application/json")] + headers,
                    body: Array(text.utf8)))
        case .raw(let status, let body, let headers): .success(HTTPResponse(status: status, headers: headers, body: body))
        case .fail(let error): .failure(error)
        }
    }
}

/// An in-memory HTTPTransport: answers by exact URL (the query ignored),
/// 404 for anything else, and records every request.
final class RecordingTransport: HTTPTransport {
    private let routes: Mutex<[String: Reply]>
    private let recorded = Mutex<[HTTPRequest]>([])
    /// Answers given once each, in order, before the route's.
    private let queued = Mutex<[String: [Reply]]>([:])

    init(_ routes: [String: Reply] = [:]) {
        self.routes = Mutex(routes)
    }

    func set(_ url: String, _ reply: Reply) { routes.withLock { $0[url] = reply } }
    func queue(_ url: String, _ replies: [Reply]) { queued.withLock { $0[url, default: []] += replies } }

    var requests: [HTTPRequest] { recorded.withLock { $0 } }
    func requests(to url: String) -> [HTTPRequest] { requests.filter { $0.url == url } }

    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        recorded.withLock { $0.append(request) }
        let next = queued.withLock { $0[request.url]?.isEmpty == false ? $0[request.url]!.removeFirst() : nil }
        let reply = next ?? routes.withLock { $0[request.url] } ?? .raw(404, Array("not found".utf8))
        return try reply.result.get()
    }
}

/// A clock the test moves.
final class TestClock: BrokerCore.Clock {
    private let time: Mutex<Int64>
    init(_ milliseconds: Int64 = 1_800_000_000_000) { time = Mutex(milliseconds) }
    func now() -> Timestamp { Timestamp(millisecondsSince1970: time.withLock { $0 }) }
    func advance(milliseconds: Int64) { time.withLock { $0 += milliseconds } }
}

/// The state database's metadata cache, in memory.
final class MemoryCache: ProviderMetadataCache {
    private let entries = Mutex<[String: (json: String, fetchedAt: Timestamp)]>([:])
    private let saves = Mutex(0)

    func load(issuer: String) -> (json: String, fetchedAt: Timestamp)? { entries.withLock { $0[issuer] } }
    func save(issuer: String, json: String, fetchedAt: Timestamp) {
        entries.withLock { $0[issuer] = (json, fetchedAt) }
        saves.withLock { $0 += 1 }
    }
    var saveCount: Int { saves.withLock { $0 } }
}

extension HTTPRequest {
    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
    /// The form body as ordered pairs (percent-decoded).
    var form: [(String, String)] {
        let text = String(decoding: body ?? [], as: UTF8.self)
        return text.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (percentDecode(parts[0]) ?? "?", percentDecode(parts.count > 1 ? parts[1] : "") ?? "?")
        }
    }
    func formValue(_ name: String) -> String? { form.first { $0.0 == name }?.1 }
    var formNames: [String] { form.map(\.0) }
}

/// Fixtures: an OpenID provider at https://id.example.com/realms/main.
enum Fixture {
    static let issuer = "https://id.example.com/realms/main"
    static let discovery = issuer + "/.well-known/openid-configuration"
    static let token = issuer + "/protocol/openid-connect/token"
    static let revoke = issuer + "/protocol/openid-connect/revoke"
    static let device = issuer + "/protocol/openid-connect/auth/device"
    static let userinfo = issuer + "/protocol/openid-connect/userinfo"
    static let jwks = issuer + "/protocol/openid-connect/certs"
    static let authorize = issuer + "/protocol/openid-connect/auth"

    static func oidcDocument(
        issuer: String = Fixture.issuer, extra: String = "", revocation: Bool = true, device: Bool = true
    ) -> String {
        var members = [
            #""issuer":"\#(issuer)""#, #""authorization_endpoint":"\#(authorize)""#, #""token_endpoint":"\#(token)""#,
            #""userinfo_endpoint":"\#(userinfo)""#, #""jwks_uri":"\#(jwks)""#,
            #""code_challenge_methods_supported":["plain","S256"]"#,
        ]
        if revocation { members.append(#""revocation_endpoint":"\#(revoke)""#) }
        if device { members.append(#""device_authorization_endpoint":"\#(Fixture.device)""#) }
        if !extra.isEmpty { members.append(extra) }
        return "{" + members.joined(separator: ",") + "}"
    }

    static func settings(
        kind: SignInKind = .oidc, issuer: String = Fixture.issuer, secret: String? = nil,
        scopes: [String] = ["openid", "email", "profile offline_access"].flatMap { $0.split(separator: " ").map(String.init) },
        endpoints: ProviderEndpoints = ProviderEndpoints(), authorizeParams: [(name: String, value: String)] = [],
        revocationAuth: RevocationAuth = .client
    ) -> ProviderSettings {
        ProviderSettings(
            kind: kind, issuer: issuer, clientId: "chat desktop", clientSecret: secret, scopes: scopes,
            endpoints: endpoints, authorizeParams: authorizeParams, revocationAuth: revocationAuth)
    }

    static func provider(
        _ transport: RecordingTransport, settings: ProviderSettings = Fixture.settings(), clock: TestClock = TestClock(),
        cache: MemoryCache? = nil
    ) -> OAuthProvider {
        OAuthProvider(settings: settings, transport: transport, caFile: "/etc/ca.pem", clock: clock, cache: cache)
    }

    /// A transport serving the OpenID document.
    static func oidc(_ document: String = Fixture.oidcDocument()) -> RecordingTransport {
        RecordingTransport([discovery: .json(200, document)])
    }

    static let tokens =
        #"{"access_token":"AT-secret-1","token_type":"Bearer","expires_in":300,"refresh_token":"RT-secret-1","refresh_expires_in":1800,"id_token":"ID-secret-1","scope":"openid email"}"#
}
