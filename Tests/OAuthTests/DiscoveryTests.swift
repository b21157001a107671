import BrokerCore
import BrowserLoginProtocol
import Testing

@testable import BrokerOAuth

@Suite struct DiscoveryTests {
    @Test func openIDMetadataIsReadWithTheExactIssuer() async throws {
        let transport = Fixture.oidc(
            Fixture.oidcDocument(
                extra:
                    #""authorization_response_iss_parameter_supported":true,"token_endpoint_auth_methods_supported":["client_secret_basic"],"unknown":{"x":[1,2]}"#
            ))
        let clock = TestClock()
        let metadata = try await Fixture.provider(transport, clock: clock).metadata()
        #expect(metadata.issuer == Fixture.issuer)
        #expect(metadata.authorizationEndpoint == Fixture.authorize)
        #expect(metadata.tokenEndpoint == Fixture.token)
        #expect(metadata.revocationEndpoint == Fixture.revoke)
        #expect(metadata.userinfoEndpoint == Fixture.userinfo)
        #expect(metadata.deviceAuthorizationEndpoint == Fixture.device)
        #expect(metadata.jwksURI == Fixture.jwks)
        #expect(metadata.codeChallengeMethodsSupported == ["plain", "S256"])
        #expect(metadata.issParameterSupported)
        #expect(metadata.tokenEndpointAuthMethodsSupported == ["client_secret_basic"])
        #expect(metadata.fetchedAt == clock.now())
        let request = try #require(transport.requests.first)
        #expect(transport.requests.count == 1)
        #expect(request.method == "GET")
        #expect(request.url == Fixture.discovery)
        #expect(request.header("Accept") == "application/json")
        #expect(request.header("Authorization") == nil)
        #expect(request.header("Cookie") == nil)
        #expect(!request.changesState)
        #expect(request.caFile == "/etc/ca.pem")
        #expect(request.maximumResponseBytes == 256 * 1024)
        #expect(request.timeoutMilliseconds == 15_000)
        #expect(request.connectTimeoutMilliseconds == 5_000)
    }

    @Test func aTrailingSlashIsAnotherIssuer() async throws {
        let transport = Fixture.oidc(Fixture.oidcDocument(issuer: Fixture.issuer + "/"))
        await #expect(throws: ProviderError.issuerMismatch(expected: Fixture.issuer, got: Fixture.issuer + "/")) {
            try await Fixture.provider(transport).metadata()
        }
        let error = ProviderError.issuerMismatch(expected: Fixture.issuer, got: Fixture.issuer + "/")
        let broker = error.brokerError(attemptId: "a_1")
        #expect(broker.code == .issuerMismatch)
        #expect(broker.message.contains("'\(Fixture.issuer)/'"))
        #expect(broker.message.contains("Issuer=\(Fixture.issuer);"))
        #expect(broker.attemptId == "a_1")
        #expect(error.isDefinite && error.certainlyNotSent)

        // The discovery URL drops the issuer's terminating slash (OpenID Connect
        // Discovery 1.0 §4); the comparison still does not.
        let slashed = RecordingTransport()
        _ = try? await Fixture.provider(slashed, settings: Fixture.settings(issuer: Fixture.issuer + "/")).metadata()
        #expect(slashed.requests.first?.url == Fixture.issuer + "/.well-known/openid-configuration")
    }

    @Test func anIssuerTemplateIsDiscoveredAtTheCommonTenantAndComparedAsWritten() async throws {
        let template = "https://login.microsoftonline.com/{tenantid}/v2.0"
        let url = "https://login.microsoftonline.com/common/v2.0/.well-known/openid-configuration"
        let transport = RecordingTransport([url: .json(200, Fixture.oidcDocument(issuer: template))])
        let metadata = try await Fixture.provider(transport, settings: Fixture.settings(issuer: template)).metadata()
        #expect(metadata.issuer == template)
        #expect(transport.requests.first?.url == url)

        let concrete = "https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0"
        let other = RecordingTransport([url: .json(200, Fixture.oidcDocument(issuer: concrete))])
        await #expect(throws: ProviderError.issuerMismatch(expected: template, got: concrete)) {
            try await Fixture.provider(other, settings: Fixture.settings(issuer: template)).metadata()
        }
    }

    @Test func rfc8414InsertsTheWellKnownPathBeforeTheIssuersPath() async throws {
        #expect(
            EndpointRule.authorizationServerMetadataURL(issuer: "https://as.example.com/tenant/one")
                == "https://as.example.com/.well-known/oauth-authorization-server/tenant/one")
        #expect(
            EndpointRule.authorizationServerMetadataURL(issuer: "https://as.example.com:8443")
                == "https://as.example.com:8443/.well-known/oauth-authorization-server")
        #expect(
            EndpointRule.authorizationServerMetadataURL(issuer: "https://as.example.com/")
                == "https://as.example.com/.well-known/oauth-authorization-server")
        #expect(
            EndpointRule.authorizationServerMetadataURL(issuer: "https://as.example.com/application/o/chat/")
                == "https://as.example.com/.well-known/oauth-authorization-server/application/o/chat")

        let issuer = "https://as.example.com/tenant/one"
        let url = "https://as.example.com/.well-known/oauth-authorization-server/tenant/one"
        let document =
            #"{"issuer":"\#(issuer)","authorization_endpoint":"https://as.example.com/a","token_endpoint":"https://as.example.com/t"}"#
        let transport = RecordingTransport([url: .json(200, document)])
        let metadata = try await Fixture.provider(
            transport, settings: Fixture.settings(kind: .oauth2, issuer: issuer)
        ).metadata()
        #expect(transport.requests.map(\.url) == [url])
        #expect(metadata.tokenEndpoint == "https://as.example.com/t")
        #expect(metadata.authorizationEndpoint == "https://as.example.com/a")
    }

    @Test func endpointsTheOpenIDDocumentLeavesOutComeFromTheRFC8414Document() async throws {
        let rfc8414 = "https://id.example.com/.well-known/oauth-authorization-server/realms/main"
        let transport = Fixture.oidc(Fixture.oidcDocument(revocation: false, device: false))
        transport.set(
            rfc8414,
            .json(
                200,
                #"{"issuer":"\#(Fixture.issuer)","revocation_endpoint":"https://id.example.com/r","device_authorization_endpoint":"https://id.example.com/d","token_endpoint":"https://elsewhere.example.com/t","revocation_endpoint_auth_methods_supported":["none"]}"#
            ))
        let metadata = try await Fixture.provider(transport).metadata()
        #expect(metadata.revocationEndpoint == "https://id.example.com/r")
        #expect(metadata.deviceAuthorizationEndpoint == "https://id.example.com/d")
        #expect(metadata.revocationEndpointAuthMethodsSupported == ["none"])
        #expect(metadata.tokenEndpoint == Fixture.token, "the OpenID document's own endpoints stay")
        #expect(transport.requests.map(\.url) == [Fixture.discovery, rfc8414])

        // A provider without one (404) is fine.
        let without = Fixture.oidc(Fixture.oidcDocument(revocation: false, device: false))
        let plain = try await Fixture.provider(without).metadata()
        #expect(plain.revocationEndpoint == nil && plain.deviceAuthorizationEndpoint == nil)
        #expect(without.requests.count == 2)

        // One failing on the path is not used; an unreachable provider is an error.
        let failing = Fixture.oidc(Fixture.oidcDocument(revocation: false, device: false))
        failing.set(rfc8414, .raw(500, []))
        #expect(try await Fixture.provider(failing).metadata().revocationEndpoint == nil)
        failing.set(rfc8414, .fail(.noAnswer("timed out")))
        await #expect(throws: ProviderError.noAnswer("timed out")) { try await Fixture.provider(failing).metadata() }

        // One for another issuer is not used.
        let foreign = Fixture.oidc(Fixture.oidcDocument(revocation: false, device: false))
        foreign.set(
            rfc8414, .json(200, #"{"issuer":"https://evil.example.com","revocation_endpoint":"https://evil.example.com/r"}"#))
        #expect(try await Fixture.provider(foreign).metadata().revocationEndpoint == nil)

        // Nothing more is asked when the document has both.
        let complete = Fixture.oidc()
        _ = try await Fixture.provider(complete).metadata()
        #expect(complete.requests.count == 1)
    }

    @Test func anEndpointKeyAlwaysWins() async throws {
        let transport = Fixture.oidc()
        let keys = ProviderEndpoints(token: "https://keys.example.com/token", revocation: "https://keys.example.com/revoke")
        let provider = Fixture.provider(transport, settings: Fixture.settings(endpoints: keys))
        let metadata = try await provider.metadata()
        #expect(metadata.tokenEndpoint == "https://keys.example.com/token")
        #expect(metadata.revocationEndpoint == "https://keys.example.com/revoke")
        #expect(metadata.authorizationEndpoint == Fixture.authorize)
        transport.set("https://keys.example.com/token", .json(200, Fixture.tokens))
        _ = try await provider.refresh(refreshToken: "RT")
        #expect(transport.requests.last?.url == "https://keys.example.com/token")
    }

    @Test func anOAuth2ProviderWithoutMetadataUsesTheEndpointKeys() async throws {
        let keys = ProviderEndpoints(
            authorization: "https://github.com/login/oauth/authorize",
            token: "https://github.com/login/oauth/access_token", userinfo: "https://api.github.com/user",
            deviceAuthorization: "https://github.com/login/device/code")
        let transport = RecordingTransport()
        let settings = Fixture.settings(kind: .oauth2, issuer: "https://github.com/login/oauth", endpoints: keys)
        let metadata = try await Fixture.provider(transport, settings: settings).metadata()
        #expect(transport.requests.map(\.url) == ["https://github.com/.well-known/oauth-authorization-server/login/oauth"])
        #expect(metadata.issuer == "https://github.com/login/oauth")
        #expect(metadata.authorizationEndpoint == keys.authorization)
        #expect(metadata.tokenEndpoint == keys.token)
        #expect(metadata.userinfoEndpoint == keys.userinfo)
        #expect(metadata.deviceAuthorizationEndpoint == keys.deviceAuthorization)
        #expect(metadata.revocationEndpoint == nil)
        #expect(metadata.codeChallengeMethodsSupported == nil)

        // Without a token endpoint at all, a token request is unsupported (and certainly not sent).
        let bare = Fixture.provider(RecordingTransport(), settings: Fixture.settings(kind: .oauth2))
        await #expect(throws: ProviderError.unsupported("the provider has no token endpoint")) {
            try await bare.refresh(refreshToken: "RT")
        }
    }

    @Test func anOpenIDProviderWithoutMetadataIsAProtocolError() async throws {
        let transport = RecordingTransport()
        do {
            _ = try await Fixture.provider(transport).metadata()
            Issue.record("no error")
        } catch {
            guard case .malformed(404, _) = error else { Issue.record("\(error)"); return }
            #expect(error.brokerError().code == .serverProtocolError)
            #expect(!error.isDefinite)
        }
    }

    @Test func everyEndpointMustBeHTTPSOrLoopbackHTTP() async throws {
        #expect(EndpointRule.isAcceptable("https://id.example.com/token"))
        #expect(EndpointRule.isAcceptable("HTTPS://id.example.com/token"))
        #expect(EndpointRule.isAcceptable("http://127.0.0.1:8080/token"))
        #expect(EndpointRule.isAcceptable("http://127.10.0.1/token"))
        #expect(EndpointRule.isAcceptable("http://[::1]:9000/token"))
        #expect(!EndpointRule.isAcceptable("http://localhost:8080/token"))
        #expect(!EndpointRule.isAcceptable("http://id.example.com/token"))
        #expect(!EndpointRule.isAcceptable("http://128.0.0.1/token"))
        #expect(!EndpointRule.isAcceptable("http://127.0.0.1.example.com/token"))
        #expect(!EndpointRule.isAcceptable("http://127.0.0.256/token"))
        #expect(!EndpointRule.isAcceptable("ftp://id.example.com/token"))
        #expect(!EndpointRule.isAcceptable("https://id.example.com/token#frag"))
        #expect(!EndpointRule.isAcceptable("https://user@id.example.com/token"))
        #expect(!EndpointRule.isAcceptable("/token"))

        let insecure = Fixture.oidc(
            Fixture.oidcDocument().replacing("\"token_endpoint\":\"https://", with: "\"token_endpoint\":\"http://"))
        await #expect(throws: ProviderError.insecureEndpoint("token_endpoint")) {
            try await Fixture.provider(insecure).metadata()
        }
        let viaKey = Fixture.provider(
            Fixture.oidc(), settings: Fixture.settings(endpoints: ProviderEndpoints(userinfo: "http://localhost/u")))
        await #expect(throws: ProviderError.insecureEndpoint("UserinfoEndpoint=")) { try await viaKey.metadata() }
        let badIssuer = RecordingTransport()
        await #expect(throws: ProviderError.insecureEndpoint("Issuer=")) {
            try await Fixture.provider(badIssuer, settings: Fixture.settings(issuer: "http://id.example.com")).metadata()
        }
        #expect(badIssuer.requests.isEmpty)
        let broker = ProviderError.insecureEndpoint("token_endpoint").brokerError()
        #expect(broker.message.contains("token_endpoint") && !broker.message.contains("http://"))

        let loopback = "http://127.0.0.1:5556/dex"
        let local = RecordingTransport([
            loopback + "/.well-known/openid-configuration": .json(
                200, #"{"issuer":"\#(loopback)","token_endpoint":"http://127.0.0.1:5556/dex/token"}"#)
        ])
        let metadata = try await Fixture.provider(local, settings: Fixture.settings(issuer: loopback)).metadata()
        #expect(metadata.tokenEndpoint == "http://127.0.0.1:5556/dex/token")
    }

    @Test func aProviderWithoutS256IsRefusedAtTheAuthorizeURL() async throws {
        let transport = Fixture.oidc(
            Fixture.oidcDocument().replacing(#"["plain","S256"]"#, with: #"["plain"]"#))
        let provider = Fixture.provider(transport)
        do {
            _ = try await provider.authorizeURL(redirectURI: "http://127.0.0.1:1/cb", state: "s", nonce: "n", codeChallenge: "c")
            Issue.record("no error")
        } catch {
            guard case .unsupported = error else { Issue.record("\(error)"); return }
            #expect(error.isDefinite)
            #expect(error.brokerError().code == .serverProtocolError)
        }
    }

    @Test func metadataIsKeptInMemoryAndInTheCacheForADay() async throws {
        let transport = Fixture.oidc()
        let clock = TestClock()
        let cache = MemoryCache()
        let provider = Fixture.provider(transport, clock: clock, cache: cache)
        let first = try await provider.metadata()
        #expect(cache.saveCount == 1)
        let saved = try #require(cache.load(issuer: Fixture.issuer))
        #expect(saved.fetchedAt == first.fetchedAt)
        #expect(try ProviderMetadata(cached: saved.json) == first)

        clock.advance(milliseconds: 23 * 3_600_000)
        #expect(try await provider.metadata() == first)
        #expect(transport.requests.count == 1)

        // Another provider (a restarted broker) uses the cache while it is younger than a day.
        let restarted = Fixture.oidc()
        #expect(try await Fixture.provider(restarted, clock: clock, cache: cache).metadata() == first)
        #expect(restarted.requests.isEmpty)

        clock.advance(milliseconds: 3_600_000)
        let refreshed = try await provider.metadata()
        #expect(transport.requests.count == 2)
        #expect(refreshed.fetchedAt == clock.now())
        #expect(cache.saveCount == 2)

        // An entry older than a day is fetched again.
        let stale = MemoryCache()
        stale.save(issuer: Fixture.issuer, json: first.encoded(), fetchedAt: first.fetchedAt)
        let later = Fixture.oidc()
        _ = try await Fixture.provider(later, clock: clock, cache: stale).metadata()
        #expect(later.requests.count == 1)
    }

    @Test func theCacheHoldsThePublishedMetadataAndTheKeysAreAppliedOnLoad() async throws {
        let cache = MemoryCache()
        let clock = TestClock()
        _ = try await Fixture.provider(Fixture.oidc(), clock: clock, cache: cache).metadata()
        let keys = ProviderEndpoints(token: "https://keys.example.com/token")
        let withKey = Fixture.provider(
            RecordingTransport(), settings: Fixture.settings(endpoints: keys), clock: clock, cache: cache)
        #expect(try await withKey.metadata().tokenEndpoint == "https://keys.example.com/token")
        let saved = try #require(cache.load(issuer: Fixture.issuer))
        #expect(!saved.json.contains("keys.example.com"))
        #expect(throws: ProviderError.self) { try ProviderMetadata(cached: "{\"issuer\":1}") }
        #expect(throws: ProviderError.self) { try ProviderMetadata(cached: "not json") }
    }

    @Test func malformedDocumentsAreRefused() async throws {
        for body in [
            #"{"issuer":"\#(Fixture.issuer)","issuer":"\#(Fixture.issuer)"}"#,
            #"{"issuer":"\#(Fixture.issuer)","token_endpoint":5}"#,
            #"{"token_endpoint":"https://x"}"#, "[]", "<html>",
        ] {
            do {
                _ = try await Fixture.provider(Fixture.oidc(body)).metadata()
                Issue.record("accepted \(body)")
            } catch {
                guard case .malformed(200, _) = error else { Issue.record("\(error)"); continue }
            }
        }
        let redirect = RecordingTransport([Fixture.discovery: .raw(302, [], headers: [HTTPHeader("Location", "https://x")])])
        await #expect(throws: ProviderError.self) { try await Fixture.provider(redirect).metadata() }
        let failing = RecordingTransport([Fixture.discovery: .raw(503, [])])
        await #expect(throws: ProviderError.serverFailure(status: 503)) { try await Fixture.provider(failing).metadata() }
    }
}
