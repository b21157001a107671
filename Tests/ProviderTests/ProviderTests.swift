import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The test provider (django-oauth-toolkit, Tests/Provider/README.md) end to
/// end, without the broker: what the broker's end-to-end tests rely on —
/// discovery with the exact issuer, the authorization code flow with PKCE
/// (RFC 7636) and `iss` (RFC 9207) over loopback redirects on any port
/// (RFC 8252 §7.3) and a private-use scheme (§7.1), refresh token rotation,
/// revocation (RFC 7009) seen at the provider, expiry with an RFC 6750
/// challenge, and the device authorization grant (RFC 8628).
/// Skipped only when the provider is not installed and `BL_REQUIRE_PROVIDER` is unset.
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct ProviderTests {
    @Test func discoveryNamesTheExactIssuerAndItsEndpoints() throws {
        let world = try World()
        let issuer = world.provider.issuer
        #expect(issuer == "http://127.0.0.1:\(world.provider.port)/o")
        let oidc = try #require(try world.provider.get(issuer + "/.well-known/openid-configuration").json)
        #expect(oidc["issuer"]?.stringValue == issuer)
        #expect(oidc["authorization_endpoint"]?.stringValue == issuer + "/authorize/")
        #expect(oidc["token_endpoint"]?.stringValue == issuer + "/token/")
        #expect(oidc["userinfo_endpoint"]?.stringValue == issuer + "/userinfo/")
        #expect(oidc["jwks_uri"]?.stringValue == issuer + "/.well-known/jwks.json")
        #expect(oidc["code_challenge_methods_supported"] == .array([.string("S256")]))
        #expect(oidc["authorization_response_iss_parameter_supported"] == .bool(true))
        let claims = oidc["claims_supported"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(Set(["sub", "email", "name"]).isSubset(of: Set(claims)))
        // RFC 8414, at the root with the issuer's path appended, and under the issuer.
        for url in [
            world.provider.baseURL + "/.well-known/oauth-authorization-server/o",
            issuer + "/.well-known/oauth-authorization-server",
        ] {
            let metadata = try #require(try world.provider.get(url).json)
            #expect(metadata["issuer"]?.stringValue == issuer)
            #expect(metadata["revocation_endpoint"]?.stringValue == issuer + "/revoke_token/")
            #expect(metadata["token_endpoint"]?.stringValue == issuer + "/token/")
        }
        let jwks = try #require(try world.provider.get(issuer + "/.well-known/jwks.json").json)
        let key = try #require(jwks["keys"]?[0])
        #expect(key["kty"]?.stringValue == "RSA" && key["kid"]?.stringValue?.isEmpty == false)
    }

    @Test func authorizationCodeWithPKCEOverALoopbackRedirectOnAnyPort() throws {
        let world = try World()
        let provider = world.provider
        let request = try AuthorizeRequest(provider, redirect: "http://127.0.0.1:\(Self.unusedPort)/callback")
        let redirect = try provider.authorize(request.url)
        #expect(redirect.hasPrefix(request.redirect + "?"))
        let answer = query(redirect)
        #expect(answer["state"] == request.state)
        #expect(answer["iss"] == provider.issuer)
        let code = try #require(answer["code"])

        let tokens = try world.exchange(code: code, request: request)
        #expect(tokens["token_type"]?.stringValue == "Bearer")
        #expect(tokens["expires_in"]?.intValue == 300)
        let access = try #require(tokens["access_token"]?.stringValue)
        #expect(tokens["refresh_token"]?.stringValue?.isEmpty == false)
        let idToken = try #require(tokens["id_token"]?.stringValue)
        let (header, claims) = try decodeJWT(idToken)
        #expect(header["alg"]?.stringValue == "RS256" && header["kid"]?.stringValue != nil)
        #expect(claims["iss"]?.stringValue == provider.issuer)
        #expect(claims["aud"]?.stringValue == "chat-desktop")
        #expect(claims["nonce"]?.stringValue == request.nonce)
        #expect(claims["email"]?.stringValue == "alice@example.com")
        #expect(claims["name"]?.stringValue == "Alice Example")
        #expect(claims["sub"]?.stringValue?.isEmpty == false)

        let userinfo = try #require(
            try provider.get(provider.issuer + "/userinfo/", headers: [("Authorization", "Bearer " + access)]).json)
        #expect(userinfo["email"]?.stringValue == "alice@example.com")
        #expect(userinfo["name"]?.stringValue == "Alice Example")
        #expect(userinfo["sub"] == claims["sub"])
        let me = try provider.apiMe(accessToken: access)
        #expect(me.status == 200)
        #expect(try JSONValue.parse(me.body)["user"]?.stringValue == "alice")
        #expect(try JSONValue.parse(me.body)["email"]?.stringValue == "alice@example.com")
        #expect(try provider.tokenCounts() == (1, 1))

        // The code is single-use.
        let replay = try world.tokenRequest([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirect),
            ("client_id", "chat-desktop"), ("code_verifier", request.verifier),
        ])
        #expect(replay.status == 400 && replay.json?["error"]?.stringValue == "invalid_grant")
    }

    @Test func theVerifierIsCheckedAndTheRedirectMatchedExactly() throws {
        let world = try World()
        let provider = world.provider
        // A wrong code_verifier: the code is refused.
        let request = try AuthorizeRequest(provider, redirect: "http://[::1]:\(Self.unusedPort)/callback")
        let redirect = try provider.authorize(request.url)
        #expect(redirect.hasPrefix(request.redirect + "?"))
        let code = try #require(query(redirect)["code"])
        let wrong = try world.tokenRequest([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirect),
            ("client_id", "chat-desktop"), ("code_verifier", try Crypto.randomToken()),
        ])
        #expect(wrong.status == 400 && wrong.json?["error"]?.stringValue == "invalid_grant")

        // The private-use scheme redirect.
        let scheme = try AuthorizeRequest(provider, redirect: "com.example.chat:/callback")
        let schemeRedirect = try provider.authorize(scheme.url)
        #expect(schemeRedirect.hasPrefix("com.example.chat:/callback?"))
        #expect(query(schemeRedirect)["code"] != nil && query(schemeRedirect)["iss"] == provider.issuer)

        // An unregistered path or host: the provider shows an error and redirects nowhere.
        for unregistered in ["http://127.0.0.1:\(Self.unusedPort)/other", "http://localhost:\(Self.unusedPort)/callback"] {
            let bad = try AuthorizeRequest(provider, redirect: unregistered)
            #expect(throws: HarnessError.self) { try provider.authorize(bad.url) }
        }

        // The user denies on the consent form.
        let denied = try AuthorizeRequest(provider, redirect: "http://127.0.0.1:\(Self.unusedPort)/callback")
        let refusal = query(try provider.authorize(denied.url, deny: true))
        #expect(refusal["error"] == "access_denied")
        #expect(refusal["state"] == denied.state)
        #expect(refusal["code"] == nil)
        #expect(try provider.tokenCounts() == (0, 0))
    }

    @Test func theBrowserDeliversTheRedirectToTheLoopbackListener() throws {
        let world = try World()
        let listener = try OneShotListener()
        let request = try AuthorizeRequest(world.provider, redirect: "http://127.0.0.1:\(listener.port)/callback")
        let delivered = try world.provider.authorizeDelivering(request.url)
        #expect(delivered.deliveryStatus == "HTTP/1.1 200 OK")
        let target = try #require(listener.requestLine())
        #expect(target.hasPrefix("GET /callback?code="))
        #expect(delivered.redirect.hasSuffix(String(target.dropFirst("GET ".count).prefix { $0 != " " })))
    }

    @Test func refreshRotatesAndRevocationShowsAtTheProvider() throws {
        let world = try World()
        let provider = world.provider
        let first = try world.signIn()
        let oldRefresh = try #require(first["refresh_token"]?.stringValue)
        let refreshed = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", oldRefresh), ("client_id", "chat-desktop"),
        ])
        #expect(refreshed.status == 200)
        let rotated = try #require(refreshed.json?["refresh_token"]?.stringValue)
        #expect(rotated != oldRefresh)
        let access = try #require(refreshed.json?["access_token"]?.stringValue)
        #expect(try provider.apiMe(accessToken: access).status == 200)
        // The superseded access token is gone.
        #expect(try provider.apiMe(accessToken: try #require(first["access_token"]?.stringValue)).status == 401)
        #expect(try provider.tokenCounts() == (1, 1))

        // Revocation needs the public client's client_id (RFC 7009 §2.1 client authentication).
        let anonymous = try provider.post(
            provider.issuer + "/revoke_token/", form: [("token", rotated), ("token_type_hint", "refresh_token")])
        #expect(anonymous.status == 401)
        #expect(try provider.tokenCounts() == (1, 1))
        let revoked = try provider.post(
            provider.issuer + "/revoke_token/",
            form: [("token", rotated), ("token_type_hint", "refresh_token"), ("client_id", "chat-desktop")])
        #expect(revoked.status == 200)
        #expect(try provider.tokenCounts() == (0, 0))
        #expect(try provider.apiMe(accessToken: access).status == 401)
        let afterRevoke = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", rotated), ("client_id", "chat-desktop"),
        ])
        #expect(afterRevoke.status == 400 && afterRevoke.json?["error"]?.stringValue == "invalid_grant")
    }

    @Test func aReplayedRefreshTokenIsRefusedAndEndsItsFamily() throws {
        let world = try World()
        let first = try world.signIn()
        let oldRefresh = try #require(first["refresh_token"]?.stringValue)
        let refreshed = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", oldRefresh), ("client_id", "chat-desktop"),
        ])
        let rotated = try #require(refreshed.json?["refresh_token"]?.stringValue)
        let replay = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", oldRefresh), ("client_id", "chat-desktop"),
        ])
        #expect(replay.status == 400 && replay.json?["error"]?.stringValue == "invalid_grant")
        // Reuse protection: the replay revoked the rotated token too.
        let next = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", rotated), ("client_id", "chat-desktop"),
        ])
        #expect(next.status == 400 && next.json?["error"]?.stringValue == "invalid_grant")
        #expect(try world.provider.tokenCounts() == (0, 0))
    }

    @Test func anExpiredAccessTokenGetsAnInvalidTokenChallengeAndRefreshWorks() throws {
        let world = try World(accessTokenTTL: 1)
        let tokens = try world.signIn()
        #expect(tokens["expires_in"]?.intValue == 1)
        let access = try #require(tokens["access_token"]?.stringValue)
        var challenge: String?
        try waitUntil(15, "the access token to expire", interval: 0.2) {
            let me = try world.provider.apiMe(accessToken: access)
            challenge = me.wwwAuthenticate
            return me.status == 401
        }
        #expect(challenge?.hasPrefix("Bearer ") == true)
        #expect(challenge?.contains(#"error="invalid_token""#) == true)
        let refreshed = try world.tokenRequest([
            ("grant_type", "refresh_token"), ("refresh_token", try #require(tokens["refresh_token"]?.stringValue)),
            ("client_id", "chat-desktop"),
        ])
        #expect(refreshed.status == 200 && refreshed.json?["access_token"]?.stringValue != nil)
        // Without a token: a bare challenge, no error.
        let none = try world.provider.get(world.provider.baseURL + "/api/me")
        #expect(none.status == 401 && none.header("www-authenticate")?.hasPrefix("Bearer") == true)
    }

    @Test func theDeviceFlowIsApprovedOrDeniedOnTheProvidersPages() throws {
        let world = try World()
        let provider = world.provider
        let device = try world.deviceAuthorization()
        let userCode = try #require(device["user_code"]?.stringValue)
        let deviceCode = try #require(device["device_code"]?.stringValue)
        let verification = try #require(device["verification_uri"]?.stringValue)
        #expect(verification == provider.issuer + "/device/")
        #expect(device["verification_uri_complete"]?.stringValue == verification + "?user_code=" + userCode)
        #expect(device["interval"]?.intValue != nil)
        let poll = { try world.tokenRequest(world.deviceGrant(deviceCode)) }
        let pending = try poll()
        #expect(pending.status == 400 && pending.json?["error"]?.stringValue == "authorization_pending")

        #expect(try provider.approveDevice(verificationURI: verification, userCode: userCode) == "Device Authorized")
        let granted = try poll()
        #expect(granted.status == 200)
        let access = try #require(granted.json?["access_token"]?.stringValue)
        #expect(granted.json?["refresh_token"]?.stringValue != nil)
        #expect(try JSONValue.parse(try provider.apiMe(accessToken: access).body)["user"]?.stringValue == "alice")

        let other = try world.deviceAuthorization()
        let otherCode = try #require(other["user_code"]?.stringValue)
        #expect(
            try provider.approveDevice(verificationURI: verification, userCode: otherCode, user: "bob", deny: true)
                == "Device Denied")
        let denied = try world.tokenRequest(world.deviceGrant(try #require(other["device_code"]?.stringValue)))
        #expect(denied.status == 400 && denied.json?["error"]?.stringValue == "access_denied")
        #expect(try provider.tokenCounts(user: "bob") == (0, 0))
    }

    @Test func stopEndsTheProviderAndARestartKeepsItsData() throws {
        let directory = try TemporaryDirectory("blp")
        let provider = try TestProvider.start(in: directory.path + "/provider")
        let pid = provider.pid
        let tokens = try World(provider: provider).signIn()
        provider.stop()
        #expect(!provider.isRunning)
        #expect(processIsGone(pid))
        #expect(throws: HarnessError.self) { try provider.get(provider.baseURL + "/o/token/") }
        // Same directory and port: the same issuer, key and tokens.
        let again = try TestProvider.start(in: directory.path + "/provider", port: provider.port)
        defer { again.stop() }
        #expect(again.issuer == provider.issuer)
        #expect(try again.apiMe(accessToken: try #require(tokens["access_token"]?.stringValue)).status == 200)
    }

    /// The port of the loopback redirects that are only read, never fetched (9, discard: nothing listens there).
    static let unusedPort = 9
}

/// One provider in a temporary directory, and the client calls the tests make.
final class World {
    let directory: TemporaryDirectory?
    let provider: TestProvider

    init(accessTokenTTL: Int = 300) throws {
        let directory = try TemporaryDirectory("blp")
        self.directory = directory
        provider = try TestProvider.start(in: directory.path + "/provider", accessTokenTTL: accessTokenTTL)
    }

    init(provider: TestProvider) {
        directory = nil
        self.provider = provider
    }

    /// Stops the provider it started (not one it was handed).
    deinit { if directory != nil { provider.stop() } }

    func tokenRequest(_ form: [(String, String)]) throws -> ProviderAnswer {
        try provider.post(provider.issuer + "/token/", form: form, headers: [("Accept", "application/json")])
    }

    func exchange(code: String, request: AuthorizeRequest) throws -> JSONValue {
        let answer = try tokenRequest([
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", request.redirect),
            ("client_id", "chat-desktop"), ("code_verifier", request.verifier),
        ])
        guard answer.status == 200, let json = answer.json else {
            throw HarnessError("the token endpoint answered \(answer.status)")
        }
        return json
    }

    /// A complete sign-in of alice: the token endpoint's answer.
    func signIn() throws -> JSONValue {
        let request = try AuthorizeRequest(provider, redirect: "http://127.0.0.1:\(ProviderTests.unusedPort)/callback")
        let code = query(try provider.authorize(request.url))["code"] ?? ""
        return try exchange(code: code, request: request)
    }

    func deviceAuthorization() throws -> JSONValue {
        let answer = try provider.post(
            provider.issuer + "/device-authorization/", form: [("client_id", "chat-device"), ("scope", "openid profile email")])
        guard answer.status == 200, let json = answer.json else {
            throw HarnessError("the device authorization endpoint answered \(answer.status)")
        }
        return json
    }

    func deviceGrant(_ deviceCode: String) -> [(String, String)] {
        [
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode),
            ("client_id", "chat-device"),
        ]
    }
}

/// An authorization request of `chat-desktop` with fresh state, nonce and PKCE verifier.
struct AuthorizeRequest {
    let redirect: String
    let state: String
    let nonce: String
    let verifier: String
    let url: String

    init(_ provider: TestProvider, redirect: String, scope: String = "openid email profile offline_access") throws {
        self.redirect = redirect
        state = try Crypto.randomToken()
        nonce = try Crypto.randomToken()
        verifier = try Crypto.randomToken()
        url =
            provider.issuer + "/authorize/?"
            + TestProvider.formEncode([
                ("response_type", "code"), ("client_id", "chat-desktop"), ("redirect_uri", redirect), ("scope", scope),
                ("state", state), ("nonce", nonce), ("code_challenge", Crypto.digest(verifier)),
                ("code_challenge_method", "S256"),
            ])
    }
}

/// The query parameters of a redirect URL (percent-decoded, `+` as space).
func query(_ url: String) -> [String: String] {
    guard let start = url.firstIndex(of: "?") else { return [:] }
    var out: [String: String] = [:]
    for pair in url[url.index(after: start)...].split(separator: "&") {
        let parts = pair.split(separator: "=", maxSplits: 1).map {
            $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
        }
        out[parts[0]] = parts.count > 1 ? parts[1] : ""
    }
    return out
}

/// The header and claims of a JWS compact serialization (not verified: the broker's tests verify).
func decodeJWT(_ token: String) throws -> (header: JSONValue, claims: JSONValue) {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 3, let header = Base64URL.decode(String(parts[0])),
        let claims = Base64URL.decode(String(parts[1]))
    else { throw HarnessError("not a JWS compact serialization") }
    return (try JSONValue.parse(header), try JSONValue.parse(claims))
}

/// A loopback listener for one connection: records the request line and answers 200.
final class OneShotListener {
    let port: Int
    private let fd: Int32
    private let state = State()

    final class State: Sendable {
        let line = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
    }

    init() throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listening >= 0 else { throw HarnessError("socket: \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, length) }
        }
        guard bound == 0, listen(listening, 1) == 0 else {
            close(listening)
            throw HarnessError("bind/listen: \(errno)")
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listening, $0, &length) }
        }
        fd = listening
        port = Int(UInt16(bigEndian: address.sin_port))
        let shared = state
        Thread { Self.serve(listening, shared) }.start()
    }

    private static func serve(_ fd: Int32, _ state: State) {
        defer { state.done.signal() }
        let client = accept(fd, nil, nil)
        guard client >= 0 else { return }
        defer { close(client) }
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while request.count < 16_384 {
            let count = read(client, &buffer, buffer.count)
            if count <= 0 { break }
            request += buffer[0..<count]
            if String(decoding: request, as: UTF8.self).contains("\r\n\r\n") { break }
        }
        let text = String(decoding: request, as: UTF8.self)
        state.line.withLock { $0 = text.components(separatedBy: "\r\n").first }
        let answer = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
        _ = answer.withUnsafeBufferPointer { write(client, $0.baseAddress, $0.count) }
    }

    /// The request line once the one connection was served (nil if none came in 30 s).
    func requestLine() -> String? {
        guard state.done.wait(timeout: .now() + 30) == .success else { return nil }
        state.done.signal()
        return state.line.withLock { $0 }
    }

    /// Ends a pending accept (shutdown wakes it), waits for the thread, closes.
    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        _ = state.done.wait(timeout: .now() + 5)
        close(fd)
    }
}
