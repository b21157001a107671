import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import Testing

/// A broker with three clients of one provider: OpenID Connect over a
/// loopback redirect, over a private-use scheme, and a device sign-in.
final class ProviderWorld {
    let h: Harness
    let provider: TestProvider
    /// The loopback client's `ReturnUrl` (with a fixed port at Glewlwyd).
    let loopbackRedirect: String

    /// `extraAfterStart`: more lines of the `com.example.chat` client file,
    /// made once the provider runs and before the broker starts (an endpoint
    /// pointing at a proxy in front of the provider).
    /// `paused`: a fault point (`TestFaults`) where the broker holds still until the test removes its marker.
    /// `kind`: which real provider (Glewlwyd: the loopback client has a fixed
    /// port, registered at the provider, and revokes with a Bearer).
    /// `dpop`, `par`: the `DPoP=` and `PAR=` of the Glewlwyd clients — `no`
    /// unless a test asks (the Bearer paths and authorize URLs the suites
    /// inspect; DPoPAndPARTests runs the DPoP and PAR ones), nothing at DOT.
    init(
        _ kind: TestProvider.Kind = .djangoOAuthToolkit, accessTokenTTL: Int = 300, extra: String = "",
        extraAfterStart: ((Harness, TestProvider) throws -> String)? = nil, paused: String? = nil,
        dpop: String = "no", par: String = "no"
    ) throws {
        h = try Harness()
        provider = try TestProvider.start(kind, in: h.dir + "/provider", accessTokenTTL: accessTokenTTL)
        let issuer = provider.issuer
        var loopback = "http://127.0.0.1/callback"
        var perProvider = ""
        var deviceEndpoint = "DeviceAuthorizationEndpoint=\(issuer)/device-authorization/"
        if kind == .glewlwyd {
            // Glewlwyd matches redirect URIs exactly, port included (docs/providers.md).
            loopback = "http://127.0.0.1:\(try freeLoopbackPort())/callback"
            try provider.allowRedirects([loopback])
            perProvider = "RevocationAuth=bearer\nDPoP=\(dpop)\nPAR=\(par)"
            deviceEndpoint = ""
        }
        self.loopbackRedirect = loopback
        let more = try extraAfterStart?(h, provider) ?? ""
        writeClient(
            "chat.conf",
            """
            Id=com.example.chat
            AppName=Example Chat
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-desktop
            Scopes=openid email profile
            ReturnUrl=\(loopback)
            ApiOrigin=\(provider.baseURL)
            \(perProvider)
            \(extra)
            \(more)
            """)
        writeClient(
            "chat-scheme.conf",
            """
            Id=com.example.chatscheme
            AppName=Example Chat (scheme)
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-desktop
            Scopes=openid email profile
            ReturnUrl=com.example.chat:/callback
            ApiOrigin=\(provider.baseURL)
            \(perProvider)
            """)
        writeClient(
            "chat-device.conf",
            """
            Id=com.example.chatdevice
            AppName=Example Chat (device)
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-device
            Scopes=openid email profile
            ReturnUrl=http://127.0.0.1/callback
            ApiOrigin=\(provider.baseURL)
            \(deviceEndpoint)
            \(perProvider)
            Flow=device
            """)
        if let paused {
            h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "pause:" + paused
            h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT_DIR"] = h.dir
        }
        try h.startBroker()
    }

    deinit { provider.stop() }

    func writeClient(_ file: String, _ body: String) {
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/" + file, contents: Data(("[Client]\n" + body).utf8))
    }

    /// Starts a browser sign-in and answers the attempt and its authorize URL.
    func start(_ client: String = "com.example.chat") throws -> (attempt: JSONValue, url: String) {
        let attempt = try h.rpc().call("login.start", params: ["client": .string(client), "openBrowser": false])
        return (attempt, try #require(attempt["authorizeUrl"]?.stringValue))
    }

    /// A complete sign-in over the loopback redirect: the scripted
    /// browser signs in at the provider and follows the redirect to the
    /// broker's listener.
    @discardableResult
    func signIn(_ client: String = "com.example.chat") throws -> JSONValue {
        let (attempt, url) = try start(client)
        let delivered = try provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        return attempt
    }

    func session(_ client: String = "com.example.chat") throws -> JSONValue {
        try h.rpc().call("session.get", params: ["client": .string(client)])
    }
}

// MARK: A DPoP nonce-demanding proxy in front of Glewlwyd (DPoPNonceTests)

/// `scripts/dpop-nonce-proxy` in front of one test's Glewlwyd, which sends no
/// `DPoP-Nonce` itself: the proxy's token endpoint answers `400
/// use_dpop_nonce` (RFC 9449 §8) and its userinfo, when asked to, `401`
/// with `WWW-Authenticate: DPoP error="use_dpop_nonce"` (§9) to a proof
/// without its current nonce, and forwards everything else, rewriting
/// nothing. Stopped when the last reference goes away.
final class NonceProxy {
    /// The client (`DPoP=yes`, `PAR=no`) of a `NonceWorld`.
    static let client = "com.example.chatnonce"

    /// `http://127.0.0.1:PORT`.
    let origin: String
    /// Its `control.json` and `requests.log`.
    let directory: String
    private let process: SpawnedProcess
    private var upstream = ""
    private var mode = Mode()
    private var epoch = 0

    /// What the proxy asks for: `nonce` (the current nonce), `always`
    /// (refuses every proof, each time with a fresh nonce) or `off`, at the
    /// token endpoint and at the resource (userinfo); a fresh nonce after
    /// `rotateAfter` accepted proofs (0: never); `announce`: a forwarded
    /// answer carries the current nonce (RFC 9449 §8.2).
    struct Mode {
        var token = "nonce"
        var resource = "off"
        var rotateAfter = 0
        var announce = false
    }

    /// Starts the proxy with no upstream yet (`forward(to:)` names it).
    init(in directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let spawned = try SpawnedProcess(
            [repositoryRoot + "/scripts/dpop-nonce-proxy", "serve", "--dir", directory],
            environment: ProcessInfo.processInfo.environment, log: directory + "/proxy.out", name: "dpop-nonce-proxy")
        var ready: String?
        do {
            try waitUntil(60, "the DPoP nonce proxy to be ready", interval: 0.05) {
                if let line = spawned.output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }) {
                    ready = String(line.dropFirst("ready ".count))
                    return true
                }
                if spawned.hasExited {
                    throw HarnessError("the DPoP nonce proxy exited:\n\(spawned.output)", fatal: true)
                }
                return false
            }
        } catch {
            spawned.stop()
            throw error
        }
        process = spawned
        self.directory = directory
        origin = ready ?? ""
    }

    deinit { process.stop() }

    /// Where the proxy forwards to (a loopback origin).
    func forward(to upstream: String) throws {
        self.upstream = upstream
        try writeControl()
    }

    /// Changes what the proxy asks for (read at its next request).
    func set(_ mode: Mode) throws {
        self.mode = mode
        try writeControl()
    }

    /// A fresh nonce from the next request on: a proof with the one before is stale.
    func rotate() throws {
        epoch += 1
        try writeControl()
    }

    private func writeControl() throws {
        let control: JSONValue = .object([
            "upstream": .string(upstream), "token": .string(mode.token), "resource": .string(mode.resource),
            "rotate_after": .integer(Int64(mode.rotateAfter)), "epoch": .integer(Int64(epoch)),
            "announce": .bool(mode.announce),
        ])
        try Data(control.jsonText.utf8).write(to: URL(fileURLWithPath: directory + "/control.json"), options: .atomic)
    }

    /// Every request the proxy saw, in order (its `requests.log`).
    func requests() -> [JSONValue] {
        log.split(separator: "\n").compactMap { try? JSONValue.parse(Array($0.utf8)) }
    }

    /// The token requests with `grant` (from the `after`th request on).
    func tokenRequests(_ grant: String, after: Int = 0) -> [JSONValue] {
        requests().dropFirst(after).filter { $0["kind"] == "token" && $0["grant"] == .string(grant) }
    }

    /// The requests to the resource (userinfo) from the `after`th on.
    func resourceRequests(after: Int = 0) -> [JSONValue] {
        requests().dropFirst(after).filter { $0["kind"] == "resource" }
    }

    /// Every nonce the proxy gave out (in refusals and announcements).
    func issuedNonces() -> [String] {
        Array(Set(requests().compactMap { $0["issued"]?.stringValue }))
    }

    /// The proxy's own log, as text.
    var log: String { (try? String(contentsOfFile: directory + "/requests.log", encoding: .utf8)) ?? "" }
}

/// A broker and a Glewlwyd behind a `NonceProxy`: Glewlwyd is started
/// naming the proxy as its own origin (`scripts/glewlwyd serve
/// --external-url`), so its issuer, every endpoint of its metadata and the
/// DPoP `htu` it checks (its external URL, not the request's `Host`) are
/// the proxy's, and the broker reaches discovery, the browser pages, the
/// token endpoint and userinfo through the proxy. One client,
/// `NonceProxy.client`: `DPoP=yes`, `PAR=no`, its own registered loopback port.
final class NonceWorld {
    let h: Harness
    let proxy: NonceProxy
    let provider: TestProvider

    init(accessTokenTTL: Int = 300) throws {
        h = try Harness()
        proxy = try NonceProxy(in: h.dir + "/nonce-proxy")
        provider = try TestProvider.start(
            .glewlwyd, in: h.dir + "/provider", accessTokenTTL: accessTokenTTL, externalURL: proxy.origin)
        let listening = provider.output.split(separator: "\n").last { $0.hasPrefix("listening ") }
        try proxy.forward(to: String(try #require(listening, "Glewlwyd's own address").dropFirst("listening ".count)))
        let loopback = "http://127.0.0.1:\(try freeLoopbackPort())/callback"
        try provider.allowRedirects([loopback])
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/chat-nonce.conf",
            contents: Data(
                """
                [Client]
                Id=\(NonceProxy.client)
                AppName=Example Chat (DPoP nonces)
                Protocol=oidc
                Issuer=\(provider.issuer)
                ClientId=chat-desktop
                Scopes=openid email profile
                ReturnUrl=\(loopback)
                ApiOrigin=\(provider.baseURL)
                RevocationAuth=bearer
                DPoP=yes
                PAR=no

                """.utf8))
        try h.startBroker()
    }

    deinit { provider.stop() }

    /// Starts a browser sign-in: the attempt and its authorize URL.
    func start() throws -> (attempt: JSONValue, url: String) {
        let attempt = try h.rpc().call(
            "login.start", params: ["client": .string(NonceProxy.client), "openBrowser": false])
        return (attempt, try #require(attempt["authorizeUrl"]?.stringValue))
    }

    /// A sign-in through the scripted browser and the loopback redirect.
    @discardableResult
    func signIn() throws -> JSONValue {
        let (attempt, url) = try start()
        let delivered = try provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        return attempt
    }

    func session() throws -> JSONValue {
        try h.rpc().call("session.get", params: ["client": .string(NonceProxy.client)])
    }

    /// `http.request` GET of Glewlwyd's userinfo (through the proxy).
    func request() throws -> JSONValue {
        try h.rpc().call(
            "http.request",
            params: [
                "client": .string(NonceProxy.client), "method": "GET",
                "path": .string(TestProvider.Kind.glewlwyd.apiPath),
            ])
    }

    /// The session's access and refresh tokens, from the real keyring.
    func keyringTokens() throws -> (access: String, refresh: String) {
        let item = try #require(h.keyringLookup(["kind": "session", "client": NonceProxy.client]), "no session item")
        let session = try JSONValue.parse(Array(item.utf8))["session"]
        return (
            try #require(session?["accessToken"]?.stringValue), try #require(session?["refreshToken"]?.stringValue)
        )
    }

    /// The session's serialized DPoP key, from the real keyring.
    func keyringDPoPKey() -> String? {
        guard let item = h.keyringLookup(["kind": "session", "client": NonceProxy.client]) else { return nil }
        return (try? JSONValue.parse(Array(item.utf8)))?["session"]?["dpopKey"]?.stringValue
    }
}
