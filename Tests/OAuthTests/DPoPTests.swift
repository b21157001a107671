import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol
import Foundation
import Testing

@testable import BrokerOAuth

/// DPoP (RFC 9449) and PAR (RFC 9126) on the wire, against the in-memory provider.
@Suite struct DPoPTests {
    static let dpopDocument = Fixture.oidcDocument(
        extra: #""dpop_signing_alg_values_supported":["RS256","ES256"],"pushed_authorization_request_endpoint":"\#(par)""#)
    static let par = Fixture.issuer + "/protocol/openid-connect/par"
    static let dpopTokens =
        #"{"access_token":"AT-dpop","token_type":"DPoP","expires_in":300,"refresh_token":"RT-dpop"}"#

    func claims(_ request: HTTPRequest) throws -> [String: Any] {
        let proof = try #require(request.header("DPoP"))
        let payload = try #require(Base64URL.decode(String(proof.split(separator: ".")[1])))
        return try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
    }

    @Test func theExchangeCarriesAProofAndANonceChallengeIsAnsweredOnce() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        transport.queue(
            Fixture.token,
            [.json(400, #"{"error":"use_dpop_nonce"}"#, headers: [HTTPHeader("DPoP-Nonce", "nonce-1")])])
        transport.set(Fixture.token, .json(200, Self.dpopTokens))
        let provider = Fixture.provider(transport)
        let key = try DPoPKey.generate()
        let tokens = try await provider.exchange(code: "C", redirectURI: "http://127.0.0.1:1/cb", codeVerifier: "V", dpop: key)
        #expect(tokens.tokenType == "DPoP")
        let sent = transport.requests(to: Fixture.token)
        #expect(sent.count == 2, "refused before processing: sent once more with the nonce")
        let first = try claims(sent[0])
        let second = try claims(sent[1])
        #expect(first["htm"] as? String == "POST" && first["htu"] as? String == Fixture.token)
        #expect(first["nonce"] == nil && second["nonce"] as? String == "nonce-1")
        #expect(first["ath"] == nil, "no access token yet")
        #expect(first["jti"] as? String != second["jti"] as? String)
        #expect(provider.nonce(for: Fixture.token) == "nonce-1", "kept for the origin")
        #expect(provider.nonce(for: Fixture.userinfo) == "nonce-1", "one origin")
    }

    @Test func aSecondNonceChallengeIsNotAnsweredAgain() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        for n in 1...3 {
            transport.queue(
                Fixture.token, [.json(400, #"{"error":"use_dpop_nonce"}"#, headers: [HTTPHeader("DPoP-Nonce", "n-\(n)")])])
        }
        let provider = Fixture.provider(transport)
        await #expect(throws: ProviderError.self) {
            try await provider.refresh(refreshToken: "RT", dpop: try DPoPKey.generate())
        }
        #expect(transport.requests(to: Fixture.token).count == 2)
    }

    @Test func userinfoAndRevokeProveTheAccessToken() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        transport.set(Fixture.userinfo, .json(200, #"{"sub":"u1","email":"ada@example.com"}"#))
        transport.set(Fixture.revoke, .json(200, "{}"))
        let provider = Fixture.provider(transport, settings: Fixture.settings(revocationAuth: .bearer))
        let key = try DPoPKey.generate()
        _ = try await provider.userinfo(accessToken: "AT-dpop", dpop: key)
        try await provider.revoke(token: "RT-dpop", hint: "refresh_token", accessToken: "AT-dpop", dpop: key)
        for url in [Fixture.userinfo, Fixture.revoke] {
            let request = try #require(transport.requests(to: url).first)
            #expect(request.header("Authorization") == "DPoP AT-dpop")
            let c = try claims(request)
            #expect(c["ath"] as? String == Crypto.digest("AT-dpop"))
            #expect(c["htu"] as? String == url)
            #expect(c["htm"] as? String == (url == Fixture.userinfo ? "GET" : "POST"))
        }
    }

    @Test func tokenTypeRules() throws {
        let dpop = HTTPResponse(status: 200, headers: [], body: Array(Self.dpopTokens.utf8))
        let bearer = HTTPResponse(status: 200, headers: [], body: Array(Fixture.tokens.utf8))
        #expect(throws: ProviderError.self) { try OAuthProvider.tokenAnswer(dpop, dpop: false) }
        #expect(try OAuthProvider.tokenAnswer(dpop, dpop: true).tokenType == "DPoP")
        #expect(try OAuthProvider.tokenAnswer(bearer, dpop: true, usage: .auto).tokenType == "Bearer")
        #expect(throws: ProviderError.self) { try OAuthProvider.tokenAnswer(bearer, dpop: true, usage: .yes) }
    }

    @Test func usageFollowsTheMetadataAndTheKeys() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        let metadata = try await Fixture.provider(transport).metadata()
        func settings(_ dpop: ProviderUsage, _ par: ProviderUsage) -> ProviderSettings {
            var s = Fixture.settings()
            s.dpop = dpop
            s.par = par
            return s
        }
        #expect(try Fixture.provider(transport, settings: settings(.auto, .auto)).usesDPoP(metadata))
        #expect(try !Fixture.provider(transport, settings: settings(.no, .auto)).usesDPoP(metadata))
        #expect(try Fixture.provider(transport, settings: settings(.auto, .auto)).pushEndpoint(metadata) == Self.par)
        #expect(try Fixture.provider(transport, settings: settings(.auto, .no)).pushEndpoint(metadata) == nil)
        var bare = metadata
        bare.dpopSigningAlgValuesSupported = ["RS256"]
        bare.pushedAuthorizationRequestEndpoint = nil
        #expect(try !Fixture.provider(transport, settings: settings(.auto, .auto)).usesDPoP(bare))
        #expect(throws: ProviderError.self) { try Fixture.provider(transport, settings: settings(.yes, .auto)).usesDPoP(bare) }
        #expect(throws: ProviderError.self) {
            try Fixture.provider(transport, settings: settings(.auto, .yes)).pushEndpoint(bare)
        }
        var required = metadata
        required.requirePushedAuthorizationRequests = true
        #expect(throws: ProviderError.self) {
            try Fixture.provider(transport, settings: settings(.auto, .no)).pushEndpoint(required)
        }
    }

    @Test func thePushSendsTheRequestAndTheBrowserGetsOnlyClientIdAndRequestURI() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        transport.set(Self.par, .json(201, #"{"request_uri":"urn:ietf:params:oauth:request_uri:abc","expires_in":90}"#))
        let provider = Fixture.provider(transport)
        let (endpoint, parameters) = try await provider.authorizeParameters(
            redirectURI: "http://127.0.0.1:1/cb", state: "S", nonce: "N", codeChallenge: "C")
        let url = try await provider.pushAuthorization(to: Self.par, authorizationEndpoint: endpoint, parameters: parameters)
        #expect(
            url == Fixture.authorize + "?client_id=chat%20desktop&request_uri=urn%3Aietf%3Aparams%3Aoauth%3Arequest_uri%3Aabc")
        let pushed = try #require(transport.requests(to: Self.par).first)
        #expect(pushed.formValue("state") == "S" && pushed.formValue("code_challenge") == "C")
        #expect(pushed.formNames.filter { $0 == "client_id" }.count == 1)
        transport.set(Self.par, .json(400, #"{"error":"invalid_request"}"#))
        await #expect(throws: ProviderError.self) {
            try await provider.pushAuthorization(to: Self.par, authorizationEndpoint: endpoint, parameters: parameters)
        }
    }

    @Test func httpRequestsCarryTheSessionsProofAndTakeTheAPIsNonce() throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        let signIn = OAuthSignIn(provider: Fixture.provider(transport), clock: TestClock())
        var session = IssuedSession(
            sessionId: "ses_1", accessToken: "AT-dpop", accessTokenExpiresAt: nil, refreshToken: "RT", expiresAt: nil,
            authenticatedAt: Timestamp(millisecondsSince1970: 0), authMethod: "oidc",
            account: Account(userId: "u", email: "", displayName: ""))
        let url = "https://api.example.com/items?page=2"
        #expect(try signIn.authorizationHeaders(session, method: "GET", url: url).map(\.value) == ["Bearer AT-dpop"])
        let key = try DPoPKey.generate()
        session.dpopKey = key.serialized
        let challenge = HTTPResponse(
            status: 401,
            headers: [
                HTTPHeader("WWW-Authenticate", #"DPoP error="use_dpop_nonce", error_description="fresh""#),
                HTTPHeader("DPoP-Nonce", "api-nonce"),
            ], body: [])
        #expect(signIn.wantsFreshNonce(challenge, url: url))
        let invalid = HTTPResponse(
            status: 401, headers: [HTTPHeader("WWW-Authenticate", #"DPoP error="invalid_token""#)], body: [])
        #expect(!signIn.wantsFreshNonce(invalid, url: url))
        let headers = try signIn.authorizationHeaders(session, method: "PATCH", url: url)
        #expect(headers.first { $0.name == "Authorization" }?.value == "DPoP AT-dpop")
        let proof = HTTPRequest(
            method: "PATCH", url: url, headers: headers, body: nil, timeoutMilliseconds: 1, connectTimeoutMilliseconds: 1,
            maximumResponseBytes: 1, caFile: nil, changesState: true)
        let c = try claims(proof)
        #expect(c["htm"] as? String == "PATCH" && c["htu"] as? String == "https://api.example.com/items")
        #expect(c["ath"] as? String == Crypto.digest("AT-dpop") && c["nonce"] as? String == "api-nonce")
        session.dpopKey = "not-a-key"
        #expect(throws: BrokerError.self) { try signIn.authorizationHeaders(session, method: "GET", url: url) }
    }

    /// Issue 31: a session whose DPoP key cannot be read is refreshed and
    /// revoked by nothing: no request leaves, and the failure is "not sent"
    /// with `DPOP_KEY_UNAVAILABLE` — never a refusal that ends the session.
    @Test func aSessionsUnreadableKeyIsNotSentAndEndsNothing() async throws {
        let transport = Fixture.oidc(Self.dpopDocument)
        transport.set(Fixture.token, .json(200, Self.dpopTokens))
        let signIn = OAuthSignIn(provider: Fixture.provider(transport), clock: TestClock())
        var session = IssuedSession(
            sessionId: "ses_1", accessToken: "AT-dpop", accessTokenExpiresAt: nil, refreshToken: "RT-dpop",
            expiresAt: nil, authenticatedAt: Timestamp(millisecondsSince1970: 0), authMethod: "oidc",
            account: Account(userId: "u", email: "", displayName: ""))
        session.dpopKey = "not-a-key"
        for call in ["refresh", "revoke"] {
            let failure = await #expect(throws: SignInFailure.self) {
                if call == "refresh" { _ = try await signIn.refresh(session) } else { _ = try await signIn.revoke(session) }
            }
            guard case .notSent(let error, let detail)? = failure else {
                Issue.record("\(call): \(String(describing: failure))")
                continue
            }
            #expect(error.code == .dpopKeyUnavailable, "\(call)")
            #expect(error.message.contains("sign in again"))
            #expect(!detail.contains("not-a-key") && !error.message.contains("not-a-key"))
        }
        #expect(transport.requests(to: Fixture.token).isEmpty, "nothing was sent")
        // A usable key refreshes as before.
        session.dpopKey = try DPoPKey.generate().serialized
        #expect(try await signIn.refresh(session).accessToken == "AT-dpop")
    }

    /// OAUTH.md §4 in the seam's words: a refusal that ends the grant, one that does not.
    @Test func refreshRefusalsMapOntoTheSeam() async throws {
        let session = IssuedSession(
            sessionId: "ses_1", accessToken: "AT", accessTokenExpiresAt: nil, refreshToken: "RT",
            expiresAt: nil, authenticatedAt: Timestamp(millisecondsSince1970: 0), authMethod: "oidc",
            account: Account(userId: "u", email: "", displayName: ""))
        let answers: [(Reply, Bool)] = [
            (.json(400, #"{"error":"invalid_grant"}"#), true),
            (.raw(400, []), true),
            (.json(401, #"{"error":"invalid_client"}"#), true),
            (.json(400, #"{"error":"invalid_scope"}"#), false),
        ]
        for (answer, ends) in answers {
            let transport = Fixture.oidc(Fixture.oidcDocument())
            transport.set(Fixture.token, answer)
            let signIn = OAuthSignIn(provider: Fixture.provider(transport), clock: TestClock())
            let failure = await #expect(throws: SignInFailure.self) { _ = try await signIn.refresh(session) }
            switch failure {
            case .ended(let ending, let error, _)?:
                #expect(ends)
                #expect(ending.status == .expired && ending.reason == "REFRESH_REJECTED")
                #expect(error.code == .notSignedIn)
                #expect((ending.warning != nil) == (error.providerError == "invalid_client"))
            case .refused(let error, _)?:
                #expect(!ends)
                #expect(error.code == .providerError && error.providerError == "invalid_scope")
            default:
                Issue.record("\(String(describing: failure))")
            }
        }
    }

    /// A key or proof made here, not at the provider: its own code, never "the provider could not be reached".
    @Test func aKeyOrProofThatCannotBeMadeIsDPoPKeyUnavailable() {
        for failure in [ProviderError.keyNotMade, .proofNotMade] {
            let error = failure.brokerError(attemptId: "att_1")
            #expect(error.code == .dpopKeyUnavailable)
            #expect(error.message.contains("nothing was sent"), "\(error.message)")
            #expect(error.attemptId == "att_1")
        }
        #expect(ProviderError.notSent("a timeout").brokerError().code == .providerUnreachable)
    }

    /// A nonce asked for again (or a refused proof) is not a client-file mistake: the message says what it is.
    @Test func aRefusedProofIsNotBlamedOnTheClientFile() {
        for code in ["use_dpop_nonce", "invalid_dpop_proof"] {
            let error = ProviderError.refused(status: 400, error: code, description: nil).brokerError()
            #expect(error.code == .providerError)
            #expect(error.providerError == code)
            #expect(error.message.contains("DPoP proof"), "\(error.message)")
            #expect(!error.message.contains("ClientId="), "\(error.message)")
        }
        let other = ProviderError.refused(status: 400, error: "invalid_client", description: nil).brokerError()
        #expect(other.message.contains("ClientId="), "\(other.message)")
    }
}
