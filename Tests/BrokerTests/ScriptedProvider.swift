import BrokerCore
import BrokerOAuth
import BrowserLoginProtocol
import BrowserLoginTestSigner
import Synchronization
import Testing

/// A small OpenID provider behind BrokerCore's `HTTPTransport` seam, for the
/// conformance suite's OAuth subject: the real `OAuthProvider` and
/// `OAuthSignIn` talk to it as to any provider. It answers discovery, the
/// token endpoint (`authorization_code` with PKCE S256 checked against the
/// challenge the authorize URL carried, `refresh_token`), revocation
/// (RFC 7009), its JWKS and userinfo. Codes are spent on first use, refresh
/// tokens rotate, and a revoked token ends its whole grant (RFC 7009 §2.1).
/// ID tokens are signed with a `TestSigner` key it publishes.
///
/// The test scripts only what a real provider cannot be told to do: whether
/// the answer to the next code exchange arrives, and when. A lost answer
/// (`Answer.lose`) is one the provider processed — the code spent, the
/// tokens issued — before the connection failed; a held one (`hold`) waits,
/// processed, until the test releases it.
final class ScriptedProvider: HTTPTransport {
    enum Answer: Sendable {
        /// The provider answers as it decides.
        case answer
        /// The provider processes the request; its answer never arrives.
        case lose
    }

    static let issuer = "https://id.example.test/realms/notes"
    static let clientId = "notes-desktop"
    static let discovery = issuer + "/.well-known/openid-configuration"
    static let authorizeEndpoint = issuer + "/protocol/openid-connect/auth"
    static let tokenEndpoint = issuer + "/protocol/openid-connect/token"
    static let revocationEndpoint = issuer + "/protocol/openid-connect/revoke"
    static let userinfoEndpoint = issuer + "/protocol/openid-connect/userinfo"
    static let jwksURI = issuer + "/protocol/openid-connect/certs"

    /// A code the provider issued for one authorization request.
    struct IssuedCode {
        var redirectURI: String
        var challenge: String
        var nonce: String?
    }
    /// One grant: the tokens a code exchange issued, as refreshes rotated them.
    struct Grant {
        var accessToken: String
        var refreshToken: String
        var revoked = false
    }
    struct State {
        /// Requests by route (`discovery`, `jwks`, `userinfo`, `revoke`)
        /// and by grant type (`authorization_code`, `refresh_token`).
        var calls: [String: Int] = [:]
        /// The fate of the next code exchanges' answers; empty: answered.
        var exchange: [Answer] = []
        var codes: [String: IssuedCode] = [:]
        var spentCodes: Set<String> = []
        var grants: [Grant] = []
        var issued = 0
        /// The access tokens of the grants revoked, in order.
        var revokedTokens: [String] = []
    }
    let state = Mutex(State())
    let signer = TestSigner(.p256, keyId: "conformance-1")
    /// Hold a code exchange and a refresh, processed, before their answers (`ExchangeHold`).
    let hold: ExchangeHold
    let refreshHold: ExchangeHold

    init(hold: ExchangeHold = ExchangeHold(), refreshHold: ExchangeHold = ExchangeHold()) {
        self.hold = hold
        self.refreshHold = refreshHold
    }

    /// The access token issued last (by an exchange or a refresh).
    var latestAccessToken: String { state.withLock { "oauth-access-\($0.issued)" } }

    func count(_ route: String) -> Int { state.withLock { $0.calls[route] ?? 0 } }

    /// The tokens no revocation has ended (the current pair of each live grant).
    var liveTokens: [String] {
        state.withLock { $0.grants.filter { !$0.revoked }.flatMap { [$0.accessToken, $0.refreshToken] } }
    }

    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    /// What the browser does with `authorizeURL`: the user signs in, the
    /// provider issues `code` for that request and redirects to its
    /// `redirect_uri` with `code`, `state` and `iss` (RFC 9207). Delivering
    /// the same code again names the same request.
    func authorize(_ authorizeURL: String, code: String) throws -> String {
        guard authorizeURL.hasPrefix(Self.authorizeEndpoint + "?"), let query = URLParts(splitting: authorizeURL)?.query
        else { throw Refusal(description: "not this provider's authorization endpoint") }
        let parameters = Self.pairs(query)
        func value(_ name: String) throws -> String {
            guard let value = parameters.first(where: { $0.0 == name })?.1 else {
                throw Refusal(description: "the authorization request has no \(name)")
            }
            return value
        }
        guard try value("response_type") == "code", try value("client_id") == Self.clientId,
            try value("code_challenge_method") == "S256"
        else { throw Refusal(description: "not a code request with PKCE S256 from this client") }
        let redirectURI = try value("redirect_uri")
        let issued = IssuedCode(
            redirectURI: redirectURI, challenge: try value("code_challenge"),
            nonce: parameters.first { $0.0 == "nonce" }?.1)
        state.withLock { if $0.codes[code] == nil { $0.codes[code] = issued } }
        return redirectURI + "?code=" + percentEncode(code) + "&state=" + percentEncode(try value("state")) + "&iss="
            + percentEncode(Self.issuer)
    }

    // MARK: HTTPTransport

    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        let url = request.url
        switch (request.method, url) {
        case ("GET", Self.discovery):
            called("discovery")
            return Self.json(200, discoveryDocument)
        case ("GET", Self.jwksURI):
            called("jwks")
            return HTTPResponse(status: 200, headers: [], body: TestSigner.jwks([signer.jwk()]))
        case ("GET", Self.userinfoEndpoint):
            called("userinfo")
            return userinfo(request)
        case ("POST", Self.tokenEndpoint):
            let form = Self.pairs(String(decoding: request.body ?? [], as: UTF8.self))
            let answer = token(form)
            if form.contains(where: { $0 == ("grant_type", "authorization_code") }) { await hold.arrive() }
            if form.contains(where: { $0 == ("grant_type", "refresh_token") }) { await refreshHold.arrive() }
            return try answer.get()
        case ("POST", Self.revocationEndpoint):
            called("revoke")
            return revoke(Self.pairs(String(decoding: request.body ?? [], as: UTF8.self)))
        default:
            // No RFC 8414 document (the OpenID one is complete), nothing else.
            return HTTPResponse(status: 404, headers: [], body: Array("not found".utf8))
        }
    }

    private func called(_ route: String) { state.withLock { $0.calls[route, default: 0] += 1 } }

    private var discoveryDocument: String {
        """
        {"issuer":"\(Self.issuer)","authorization_endpoint":"\(Self.authorizeEndpoint)",\
        "token_endpoint":"\(Self.tokenEndpoint)","revocation_endpoint":"\(Self.revocationEndpoint)",\
        "userinfo_endpoint":"\(Self.userinfoEndpoint)","jwks_uri":"\(Self.jwksURI)",\
        "code_challenge_methods_supported":["S256"],"authorization_response_iss_parameter_supported":true,\
        "token_endpoint_auth_methods_supported":["none"]}
        """
    }

    private func token(_ form: [(String, String)]) -> Result<HTTPResponse, HTTPTransportError> {
        func value(_ name: String) -> String? { form.first { $0.0 == name }?.1 }
        guard value("client_id") == Self.clientId else { return .success(Self.refusal(401, "invalid_client")) }
        switch value("grant_type") {
        case "authorization_code":
            called("authorization_code")
            let answer = state.withLock { $0.exchange.isEmpty ? Answer.answer : $0.exchange.removeFirst() }
            let response = exchange(
                code: value("code") ?? "", redirectURI: value("redirect_uri"), verifier: value("code_verifier"))
            guard answer == .answer else { return .failure(.noAnswer("the connection was lost after the request was sent")) }
            return .success(response)
        case "refresh_token":
            called("refresh_token")
            return .success(refresh(value("refresh_token") ?? ""))
        default:
            return .success(Self.refusal(400, "unsupported_grant_type"))
        }
    }

    /// RFC 6749 §4.1.3, RFC 7636 §4.6: a code is spent by its first use, whatever the outcome.
    private func exchange(code: String, redirectURI: String?, verifier: String?) -> HTTPResponse {
        let issued: IssuedCode? = state.withLock {
            guard !$0.spentCodes.contains(code) else { return nil }
            $0.spentCodes.insert(code)
            return $0.codes[code]
        }
        guard let issued, redirectURI == issued.redirectURI, let verifier,
            ProofSecret(value: verifier).verifies(challenge: issued.challenge)
        else { return Self.refusal(400, "invalid_grant") }
        let grant = state.withLock {
            $0.issued += 1
            let grant = Grant(accessToken: "oauth-access-\($0.issued)", refreshToken: "oauth-refresh-\($0.issued)")
            $0.grants.append(grant)
            return grant
        }
        return tokens(grant, idToken: idToken(nonce: issued.nonce))
    }

    /// RFC 6749 §6 with rotation: the refresh token used is spent.
    private func refresh(_ refreshToken: String) -> HTTPResponse {
        let grant: Grant? = state.withLock {
            guard let index = $0.grants.firstIndex(where: { $0.refreshToken == refreshToken && !$0.revoked }) else {
                return nil
            }
            $0.issued += 1
            $0.grants[index].accessToken = "oauth-access-\($0.issued)"
            $0.grants[index].refreshToken = "oauth-refresh-\($0.issued)"
            return $0.grants[index]
        }
        guard let grant else { return Self.refusal(400, "invalid_grant") }
        return tokens(grant, idToken: nil)
    }

    private func tokens(_ grant: Grant, idToken: String?) -> HTTPResponse {
        var members = [
            ("access_token", TestSigner.quoted(grant.accessToken)), ("token_type", TestSigner.quoted("Bearer")),
            ("expires_in", "600"), ("refresh_token", TestSigner.quoted(grant.refreshToken)),
            ("refresh_expires_in", "3600"), ("scope", TestSigner.quoted("openid email profile")),
        ]
        if let idToken { members.append(("id_token", TestSigner.quoted(idToken))) }
        return Self.json(200, TestSigner.object(members))
    }

    private func idToken(nonce: String?) -> String {
        let now = Timestamp.now().millisecondsSince1970 / 1000
        var claims = [
            ("iss", TestSigner.quoted(Self.issuer)), ("sub", TestSigner.quoted("u1")),
            ("aud", TestSigner.quoted(Self.clientId)), ("exp", "\(now + 600)"), ("iat", "\(now)"),
            ("email", TestSigner.quoted("ada@example.com")), ("name", TestSigner.quoted("Ada")),
        ]
        if let nonce { claims.append(("nonce", TestSigner.quoted(nonce))) }
        return signer.token(claims: TestSigner.object(claims))
    }

    /// RFC 7009 §2.1–2.2: either token of a grant ends the grant; 200 for any token.
    private func revoke(_ form: [(String, String)]) -> HTTPResponse {
        guard form.contains(where: { $0 == ("client_id", Self.clientId) }) else {
            return Self.refusal(401, "invalid_client")
        }
        let token = form.first { $0.0 == "token" }?.1 ?? ""
        state.withLock {
            guard
                let index = $0.grants.firstIndex(where: {
                    !$0.revoked && ($0.accessToken == token || $0.refreshToken == token)
                })
            else { return }
            $0.grants[index].revoked = true
            $0.revokedTokens.append($0.grants[index].accessToken)
        }
        return HTTPResponse(status: 200, headers: [], body: [])
    }

    /// OIDC Core §5.3 for a live access token; RFC 6750 §3.1 otherwise.
    private func userinfo(_ request: HTTPRequest) -> HTTPResponse {
        let authorization = request.headers.first { $0.name.lowercased() == "authorization" }?.value ?? ""
        let live = state.withLock { s in
            s.grants.contains { !$0.revoked && "Bearer " + $0.accessToken == authorization }
        }
        guard live else {
            return HTTPResponse(
                status: 401, headers: [HTTPHeader("WWW-Authenticate", #"Bearer error="invalid_token""#)], body: [])
        }
        return Self.json(200, #"{"sub":"u1","email":"ada@example.com","name":"Ada"}"#)
    }

    // MARK: Plumbing

    /// `application/x-www-form-urlencoded` (or a query) as ordered pairs.
    static func pairs(_ text: String) -> [(String, String)] {
        text.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (percentDecode(parts[0]) ?? "", percentDecode(parts.count > 1 ? parts[1] : "") ?? "")
        }
    }

    static func json(_ status: Int, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [HTTPHeader("Content-Type", "application/json")], body: Array(text.utf8))
    }

    static func refusal(_ status: Int, _ error: String) -> HTTPResponse {
        json(status, #"{"error":"\#(error)"}"#)
    }
}

/// The scripted provider checks what a provider checks, so that the OAuth
/// subject of the conformance suite proves something: PKCE, one-time codes,
/// rotated refresh tokens and revocation, through the real `OAuthProvider`.
@Suite struct ConformanceProviderTests {
    static let redirect = "com.example.notes:/callback"
    static let refused = ProviderError.refused(status: 400, error: "invalid_grant", description: nil)

    @Test func codesAreOneTimeAndBoundToTheChallenge() async throws {
        let scripted = ScriptedProvider()
        let oauth = OAuthProvider(
            settings: ConformanceHarness.providerSettings, transport: scripted, caFile: nil, clock: SystemClock(),
            cache: nil)
        let verifier = try ProofSecret.generate()
        let url = try await oauth.authorizeURL(
            redirectURI: Self.redirect, state: "state-1", nonce: "nonce-1", codeChallenge: verifier.challenge)
        let callback = try scripted.authorize(url, code: "c1")
        #expect(callback.hasPrefix(Self.redirect + "?code=c1&state=state-1&iss="))
        // Another verifier is refused, and spends the code.
        await #expect(throws: Self.refused) {
            try await oauth.exchange(
                code: "c1", redirectURI: Self.redirect, codeVerifier: try ProofSecret.generate().value)
        }
        await #expect(throws: Self.refused) {
            try await oauth.exchange(code: "c1", redirectURI: Self.redirect, codeVerifier: verifier.value)
        }
        _ = try scripted.authorize(url, code: "c2")
        let tokens = try await oauth.exchange(code: "c2", redirectURI: Self.redirect, codeVerifier: verifier.value)
        #expect(tokens.idToken != nil)
        #expect(scripted.count("authorization_code") == 3)
    }

    @Test func refreshTokensRotateAndRevocationEndsTheGrant() async throws {
        let scripted = ScriptedProvider()
        let oauth = OAuthProvider(
            settings: ConformanceHarness.providerSettings, transport: scripted, caFile: nil, clock: SystemClock(),
            cache: nil)
        let verifier = try ProofSecret.generate()
        let url = try await oauth.authorizeURL(
            redirectURI: Self.redirect, state: "state-1", nonce: nil, codeChallenge: verifier.challenge)
        _ = try scripted.authorize(url, code: "c1")
        let tokens = try await oauth.exchange(code: "c1", redirectURI: Self.redirect, codeVerifier: verifier.value)
        let first = try #require(tokens.refreshToken)
        let next = try await oauth.refresh(refreshToken: first)
        await #expect(throws: Self.refused) { try await oauth.refresh(refreshToken: first) }
        #expect(try await oauth.userinfo(accessToken: next.accessToken).subject == "u1")
        try await oauth.revoke(token: try #require(next.refreshToken), hint: "refresh_token", accessToken: nil)
        #expect(scripted.state.withLock { $0.revokedTokens } == [next.accessToken])
        #expect(scripted.liveTokens.isEmpty)
        await #expect(throws: ProviderError.self) { try await oauth.userinfo(accessToken: next.accessToken) }
    }
}
