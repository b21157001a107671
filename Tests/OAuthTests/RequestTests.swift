import BrokerCore
import BrowserLoginProtocol
import Testing

@testable import BrokerOAuth

@Suite struct AuthorizeURLTests {
    @Test func theAuthorizeURLCarriesEveryParameterInOrderAndEncoded() async throws {
        let settings = Fixture.settings(authorizeParams: [
            ("prompt", "select_account"), ("login_hint", "ada@example.com & co"), ("state", "injected"),
        ])
        let provider = Fixture.provider(Fixture.oidc(), settings: settings)
        let url = try await provider.authorizeURL(
            redirectURI: "http://127.0.0.1:49152/callback?x=1", state: "st/+=", nonce: "no nce", codeChallenge: "ch_-")
        #expect(
            url == Fixture.authorize + "?response_type=code&client_id=chat%20desktop"
                + "&redirect_uri=http%3A%2F%2F127.0.0.1%3A49152%2Fcallback%3Fx%3D1"
                + "&scope=openid%20email%20profile%20offline_access&state=st%2F%2B%3D&nonce=no%20nce"
                + "&code_challenge=ch_-&code_challenge_method=S256&prompt=select_account"
                + "&login_hint=ada%40example.com%20%26%20co")
        let parts = try #require(URLParts(splitting: url))
        #expect(
            parts.query?.split(separator: "&").filter { $0.hasPrefix("state=") }.count == 1,
            "a reserved name from AuthorizeParams is not sent")
    }

    @Test func anOAuth2ClientSendsNoNonceAndAnExistingQueryIsKept() async throws {
        let keys = ProviderEndpoints(
            authorization: "https://as.example.com/authorize?tenant=one", token: "https://as.example.com/token")
        let provider = Fixture.provider(
            RecordingTransport(),
            settings: Fixture.settings(kind: .oauth2, issuer: "https://as.example.com", scopes: ["read:user"], endpoints: keys))
        let url = try await provider.authorizeURL(redirectURI: "com.example.chat:/cb", state: "s", nonce: "n", codeChallenge: "c")
        #expect(
            url == "https://as.example.com/authorize?tenant=one&response_type=code&client_id=chat%20desktop"
                + "&redirect_uri=com.example.chat%3A%2Fcb&scope=read%3Auser&state=s&code_challenge=c&code_challenge_method=S256")
    }

    @Test func withoutAnAuthorizationEndpointThereIsNoBrowserSignIn() async throws {
        let provider = Fixture.provider(RecordingTransport(), settings: Fixture.settings(kind: .oauth2))
        await #expect(throws: ProviderError.unsupported("the provider has no authorization endpoint")) {
            try await provider.authorizeURL(redirectURI: "http://127.0.0.1:1/cb", state: "s", nonce: nil, codeChallenge: "c")
        }
    }
}

@Suite struct TokenRequestTests {
    func provider(secret: String? = nil, methods: String? = nil) -> (OAuthProvider, RecordingTransport) {
        let extra = methods.map { #""token_endpoint_auth_methods_supported":\#($0)"# } ?? ""
        let transport = Fixture.oidc(Fixture.oidcDocument(extra: extra))
        transport.set(Fixture.token, .json(200, Fixture.tokens))
        return (Fixture.provider(transport, settings: Fixture.settings(secret: secret)), transport)
    }

    @Test func theExchangeIsAFormPostSentOnceByAPublicClient() async throws {
        let (provider, transport) = provider()
        let tokens = try await provider.exchange(
            code: "CODE secret", redirectURI: "http://127.0.0.1:49152/callback", codeVerifier: "VERIFIER-secret")
        #expect(
            tokens
                == TokenResponse(
                    accessToken: "AT-secret-1", tokenType: "Bearer", expiresIn: 300, refreshToken: "RT-secret-1",
                    refreshExpiresIn: 1800, idToken: "ID-secret-1", scope: "openid email"))
        let request = try #require(transport.requests(to: Fixture.token).first)
        #expect(request.method == "POST")
        #expect(request.changesState)
        #expect(request.header("Content-Type") == "application/x-www-form-urlencoded")
        #expect(request.header("Accept") == "application/json")
        #expect(request.header("Authorization") == nil)
        #expect(request.caFile == "/etc/ca.pem")
        #expect(request.maximumResponseBytes == 256 * 1024)
        #expect(request.formNames == ["grant_type", "code", "redirect_uri", "code_verifier", "client_id"])
        #expect(request.formValue("grant_type") == "authorization_code")
        #expect(request.formValue("code") == "CODE secret")
        #expect(request.formValue("redirect_uri") == "http://127.0.0.1:49152/callback")
        #expect(request.formValue("code_verifier") == "VERIFIER-secret")
        #expect(request.formValue("client_id") == "chat desktop")
        #expect(String(decoding: request.body ?? [], as: UTF8.self).contains("code=CODE%20secret"))
    }

    @Test func aSecretGoesInTheFormUnlessTheProviderListsOnlyBasic() async throws {
        for methods in [
            nil, #"["client_secret_post"]"#, #"["client_secret_basic","client_secret_post"]"#, #"["private_key_jwt"]"#,
        ] {
            let (provider, transport) = provider(secret: "GOCSPX-secret", methods: methods)
            _ = try await provider.refresh(refreshToken: "RT-old")
            let request = try #require(transport.requests(to: Fixture.token).first)
            #expect(request.formValue("client_secret") == "GOCSPX-secret", "\(methods ?? "absent")")
            #expect(request.formValue("client_id") == "chat desktop")
            #expect(request.header("Authorization") == nil)
        }
        let (provider, transport) = provider(secret: "p@ss:wörd", methods: #"["client_secret_basic"]"#)
        _ = try await provider.refresh(refreshToken: "RT-old")
        let request = try #require(transport.requests(to: Fixture.token).first)
        #expect(request.formValue("client_secret") == nil)
        #expect(request.formValue("client_id") == nil)
        // base64("chat%20desktop:p%40ss%3Aw%C3%B6rd") (RFC 6749 §2.3.1: form-encoded, then base64).
        #expect(request.header("Authorization") == "Basic Y2hhdCUyMGRlc2t0b3A6cCU0MHNzJTNBdyVDMyVCNnJk")
        #expect(OAuthProvider.base64(Array("ab".utf8)) == "YWI=")
        #expect(OAuthProvider.base64([0xFB, 0xFF]) == "+/8=")
    }

    @Test func refreshSendsTheRefreshGrant() async throws {
        let (provider, transport) = provider()
        _ = try await provider.refresh(refreshToken: "RT-old")
        let request = try #require(transport.requests(to: Fixture.token).first)
        #expect(request.changesState)
        #expect(
            request.form.map { "\($0.0)=\($0.1)" } == [
                "grant_type=refresh_token", "refresh_token=RT-old", "client_id=chat desktop",
            ])
    }

    static let secrets = ["AT-secret-1", "RT-secret-1", "ID-secret-1", "CODE", "VERIFIER", "GOCSPX"]

    /// One token answer's classification.
    func classify(_ reply: Reply) async -> Result<TokenResponse, ProviderError> {
        let (provider, transport) = provider()
        transport.set(Fixture.token, reply)
        do {
            return .success(
                try await provider.exchange(code: "CODE", redirectURI: "http://127.0.0.1:1/cb", codeVerifier: "VERIFIER"))
        } catch {
            for secret in Self.secrets {
                #expect(!error.description.contains(secret))
                #expect(!error.brokerError().message.contains(secret))
            }
            return .failure(error)
        }
    }

    @Test func eachTokenAnswerIsClassified() async throws {
        let lower = try await classify(
            .json(200, #"{"access_token":"AT-secret-1","token_type":"bearer","expires_in":"3600","refresh_expires_in":0}"#)
        ).get()
        #expect(lower.tokenType == "bearer" && lower.expiresIn == 3600 && lower.refreshExpiresIn == nil)
        #expect(lower.refreshToken == nil && lower.idToken == nil)
        let github = try await classify(
            .json(
                200,
                #"{"access_token":"AT-secret-1","token_type":"bearer","scope":"","refresh_token_expires_in":15811200,"refresh_token":"RT-secret-1"}"#
            )
        ).get()
        #expect(github.refreshExpiresIn == 15_811_200)

        let cases: [(Reply, ProviderError)] = [
            (.json(200, #"{"access_token":"AT-secret-1"}"#), .malformed(status: 200, "")),
            (.json(200, #"{"access_token":"AT-secret-1","token_type":"mac"}"#), .malformed(status: 200, "")),
            (.json(200, #"{"token_type":"Bearer"}"#), .malformed(status: 200, "")),
            (
                .json(200, #"{"access_token":"AT-secret-1","access_token":"AT-secret-1","token_type":"Bearer"}"#),
                .malformed(status: 200, "")
            ),
            (.json(200, #"{"access_token":"AT-secret-1","token_type":"Bearer","expires_in":-5}"#), .malformed(status: 200, "")),
            (.raw(200, Array("access_token=AT-secret-1&token_type=bearer".utf8)), .malformed(status: 200, "")),
            (.json(201, Fixture.tokens), .malformed(status: 201, "")),
            (
                .json(400, #"{"error":"invalid_grant","error_description":"Code not valid"}"#),
                .refused(status: 400, error: "invalid_grant", description: "Code not valid")
            ),
            (.json(401, #"{"error":"invalid_client"}"#), .refused(status: 401, error: "invalid_client", description: nil)),
            (
                .json(
                    200,
                    #"{"error":"bad_verification_code","error_description":"The code passed is incorrect or expired.","error_uri":"https://docs.github.com/x"}"#
                ),
                .refused(status: 200, error: "bad_verification_code", description: "The code passed is incorrect or expired.")
            ),
            (.raw(400, Array("<html>Bad Request</html>".utf8)), .malformed(status: 400, "")),
            (.json(400, #"{"error":""}"#), .malformed(status: 400, "")),
            // Another 4xx with an OAuth error body is a refusal too (Glewlwyd's `403 invalid_code`).
            (.json(403, #"{"error":"invalid_code"}"#), .refused(status: 403, error: "invalid_code", description: nil)),
            (.raw(403, Array("<html>Forbidden</html>".utf8)), .malformed(status: 403, "")),
            (.json(429, #"{"error":"slow_down"}"#), .malformed(status: 429, "")),
            (.raw(302, [], headers: [HTTPHeader("Location", "https://id.example.com/login")]), .malformed(status: 302, "")),
            (.raw(500, []), .serverFailure(status: 500)),
            (.raw(502, Array("{\"error\":\"invalid_grant\"}".utf8)), .serverFailure(status: 502)),
            (.fail(.notSent("could not connect to id.example.com")), .notSent("could not connect to id.example.com")),
            (.fail(.invalidRequest("bad URL")), .notSent("")),
            (.fail(.noAnswer("timed out")), .noAnswer("timed out")),
            (.fail(.responseTooLarge), .responseTooLarge),
        ]
        for (reply, expected) in cases {
            let result = await classify(reply)
            guard case .failure(let error) = result else {
                Issue.record("\(reply) was accepted")
                continue
            }
            switch (error, expected) {
            case (.malformed(let a, _), .malformed(let b, _)): #expect(a == b, "\(reply)")
            case (.notSent, .notSent("")): break
            default: #expect(error == expected, "\(reply)")
            }
            #expect(error.isDefinite == (expected.providerErrorCode != nil), "\(reply)")
            #expect(
                error.certainlyNotSent
                    == (error == .notSent("could not connect to id.example.com")
                        || error == .notSent("the request could not be built: bad URL")))
        }
    }

    @Test func aRefusalMapsToProviderErrorAsPlainText() async throws {
        let error = ProviderError.refused(
            status: 400, error: "invalid_grant",
            description: "Token\u{1B}[31m expired;\nsee https://evil.example.com/phish or www.evil.example.com now"
                + String(repeating: "x", count: 400))
        let broker = error.brokerError(attemptId: "a_2")
        #expect(broker.code == .providerError)
        #expect(broker.providerError == "invalid_grant")
        #expect(broker.attemptId == "a_2")
        #expect(!broker.message.contains("https://") && !broker.message.contains("www."))
        #expect(!broker.message.unicodeScalars.contains { $0.value < 0x20 })
        #expect(broker.message.contains("Token [31m expired; see (link removed) or (link removed) now"))
        #expect(broker.message.count < 200 + 200)
        #expect(ProviderError.plainText(String(repeating: "y", count: 500)).count == 200)

        #expect(ProviderError.noAnswer("timed out").brokerError().code == .providerUnreachable)
        #expect(ProviderError.notSent("no route").brokerError().code == .providerUnreachable)
        #expect(ProviderError.serverFailure(status: 503).brokerError().code == .providerUnreachable)
        #expect(ProviderError.malformed(status: 200, "x").brokerError().code == .serverProtocolError)
        #expect(ProviderError.responseTooLarge.brokerError().code == .serverProtocolError)
        #expect(ProviderError.noDeviceEndpoint.brokerError().code == .deviceFlowUnsupported)
        for e in [ProviderError.noAnswer("t"), .serverFailure(status: 500), .malformed(status: 1, "m"), .responseTooLarge] {
            #expect(!e.isDefinite && !e.certainlyNotSent)
        }
    }

    @Test func aStateChangingRequestWhoseMetadataCannotBeHadWasNotSent() async throws {
        let transport = RecordingTransport([Fixture.discovery: .fail(.noAnswer("timed out"))])
        do {
            _ = try await Fixture.provider(transport).exchange(
                code: "CODE", redirectURI: "http://127.0.0.1:1/cb", codeVerifier: "V")
            Issue.record("no error")
        } catch {
            #expect(error.certainlyNotSent)
            guard case .notSent = error else { Issue.record("\(error)"); return }
        }
        #expect(transport.requests.allSatisfy { !$0.changesState })
    }

    @Test func tokensNeverShowInDescriptions() async throws {
        let tokens = TokenResponse(
            accessToken: "AT-secret-1", tokenType: "Bearer", expiresIn: 1, refreshToken: "RT-secret-1", idToken: "ID-secret-1")
        let device = DeviceAuthorization(
            deviceCode: "DC-secret-1", userCode: "WDJB-MJHT", verificationURI: "https://id.example.com/device", expiresIn: 600,
            interval: 5)
        var dumped = ""
        dump(tokens, to: &dumped)
        dump(DevicePoll.tokens(tokens), to: &dumped)
        dump(device, to: &dumped)
        for text in [
            "\(tokens)", String(reflecting: tokens), "\(DevicePoll.tokens(tokens))",
            String(reflecting: DevicePoll.tokens(tokens)),
            "\(device)", String(reflecting: device), dumped,
        ] {
            for secret in ["AT-secret-1", "RT-secret-1", "ID-secret-1", "DC-secret-1"] {
                #expect(!text.contains(secret), "\(text)")
            }
        }
        #expect("\(device)".contains("WDJB-MJHT"))
    }
}

@Suite struct RevocationTests {
    @Test func aPublicClientRevokesWithItsClientId() async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.revoke, .raw(200, Array("whatever".utf8)))
        let provider = Fixture.provider(transport)
        #expect(await provider.hasRevocation)
        try await provider.revoke(token: "RT-secret", hint: "refresh_token", accessToken: "AT-secret")
        let request = try #require(transport.requests(to: Fixture.revoke).first)
        #expect(request.method == "POST" && request.changesState)
        #expect(request.header("Content-Type") == "application/x-www-form-urlencoded")
        #expect(request.header("Authorization") == nil)
        #expect(
            request.form.map { "\($0.0)=\($0.1)" } == [
                "token=RT-secret", "token_type_hint=refresh_token", "client_id=chat desktop",
            ])
    }

    @Test func bearerRevocationSendsTheAccessToken() async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.revoke, .raw(200, []))
        let provider = Fixture.provider(transport, settings: Fixture.settings(secret: "S-secret", revocationAuth: .bearer))
        try await provider.revoke(token: "AT-secret", hint: "access_token", accessToken: "AT-secret")
        let request = try #require(transport.requests(to: Fixture.revoke).first)
        #expect(request.header("Authorization") == "Bearer AT-secret")
        #expect(request.form.map { "\($0.0)=\($0.1)" } == ["token=AT-secret", "token_type_hint=access_token"])
    }

    @Test func aConfidentialClientUsesTheRevocationAuthMethods() async throws {
        let transport = Fixture.oidc(
            Fixture.oidcDocument(
                extra:
                    #""token_endpoint_auth_methods_supported":["client_secret_post"],"revocation_endpoint_auth_methods_supported":["client_secret_basic"]"#
            ))
        transport.set(Fixture.revoke, .raw(200, []))
        try await Fixture.provider(transport, settings: Fixture.settings(secret: "S")).revoke(
            token: "RT", hint: "refresh_token", accessToken: nil)
        let request = try #require(transport.requests(to: Fixture.revoke).first)
        #expect(request.header("Authorization")?.hasPrefix("Basic ") == true)
        #expect(request.formValue("client_secret") == nil)
    }

    @Test func revocationAnswers() async throws {
        let transport = Fixture.oidc()
        let provider = Fixture.provider(transport)
        transport.set(Fixture.revoke, .raw(503, [], headers: [HTTPHeader("Retry-After", "5")]))
        await #expect(throws: ProviderError.serverFailure(status: 503)) {
            try await provider.revoke(token: "RT", hint: "refresh_token", accessToken: nil)
        }
        transport.set(Fixture.revoke, .json(400, #"{"error":"unsupported_token_type"}"#))
        await #expect(throws: ProviderError.refused(status: 400, error: "unsupported_token_type", description: nil)) {
            try await provider.revoke(token: "RT", hint: "refresh_token", accessToken: nil)
        }
        transport.set(Fixture.revoke, .fail(.notSent("connection refused")))
        await #expect(throws: ProviderError.notSent("connection refused")) {
            try await provider.revoke(token: "RT", hint: "refresh_token", accessToken: nil)
        }
    }

    @Test func aProviderWithoutRevocationCannotRevoke() async throws {
        let transport = Fixture.oidc(Fixture.oidcDocument(revocation: false))
        let provider = Fixture.provider(transport)
        #expect(await !provider.hasRevocation)
        await #expect(throws: ProviderError.noRevocationEndpoint) {
            try await provider.revoke(token: "RT", hint: "refresh_token", accessToken: nil)
        }
        #expect(transport.requests.allSatisfy { !$0.changesState })
    }
}

@Suite struct DeviceTests {
    func provider() -> (OAuthProvider, RecordingTransport) {
        let transport = Fixture.oidc()
        return (Fixture.provider(transport), transport)
    }

    @Test func deviceAuthorizationPostsClientIdAndScope() async throws {
        let (provider, transport) = provider()
        transport.set(
            Fixture.device,
            .json(
                200,
                #"{"device_code":"DC-secret","user_code":"WDJB-MJHT","verification_uri":"https://id.example.com/device","verification_uri_complete":"https://id.example.com/device?user_code=WDJB-MJHT","expires_in":1800,"interval":5}"#
            ))
        let answer = try await provider.deviceAuthorization()
        #expect(
            answer
                == DeviceAuthorization(
                    deviceCode: "DC-secret", userCode: "WDJB-MJHT", verificationURI: "https://id.example.com/device",
                    verificationURIComplete: "https://id.example.com/device?user_code=WDJB-MJHT", expiresIn: 1800,
                    interval: 5))
        let request = try #require(transport.requests(to: Fixture.device).first)
        #expect(request.method == "POST" && request.changesState)
        #expect(request.header("Accept") == "application/json")
        #expect(
            request.form.map { "\($0.0)=\($0.1)" } == ["scope=openid email profile offline_access", "client_id=chat desktop"])
    }

    @Test func googlesVerificationURLAndADefaultIntervalAreRead() async throws {
        let (provider, transport) = provider()
        transport.set(
            Fixture.device,
            .json(
                200,
                #"{"device_code":"DC","user_code":"ABC-DEF","verification_url":"https://www.google.com/device","expires_in":"1800"}"#
            ))
        let answer = try await provider.deviceAuthorization()
        #expect(answer.verificationURI == "https://www.google.com/device")
        #expect(answer.interval == 5 && answer.expiresIn == 1800 && answer.verificationURIComplete == nil)

        for body in [
            #"{"device_code":"DC","user_code":"A\u0007B","verification_uri":"https://x.example.com","expires_in":60}"#,
            #"{"device_code":"DC","user_code":"AB","verification_uri":"javascript:alert(1)","expires_in":60}"#,
            #"{"device_code":"DC","user_code":"AB","verification_uri":"https://x.example.com"}"#,
            #"{"user_code":"AB","verification_uri":"https://x.example.com","expires_in":60}"#,
        ] {
            transport.set(Fixture.device, .json(200, body))
            do {
                _ = try await provider.deviceAuthorization()
                Issue.record("accepted \(body)")
            } catch {
                guard case .malformed(200, _) = error else { Issue.record("\(error)"); continue }
            }
        }
        transport.set(Fixture.device, .json(400, #"{"error":"invalid_client"}"#))
        await #expect(throws: ProviderError.refused(status: 400, error: "invalid_client", description: nil)) {
            try await provider.deviceAuthorization()
        }
    }

    @Test func withoutADeviceEndpointTheDeviceFlowIsUnsupported() async throws {
        let transport = Fixture.oidc(Fixture.oidcDocument(device: false))
        let provider = Fixture.provider(transport)
        do {
            _ = try await provider.deviceAuthorization()
            Issue.record("no error")
        } catch {
            #expect(error == .noDeviceEndpoint)
            #expect(error.brokerError().code == .deviceFlowUnsupported)
        }
        #expect(transport.requests.allSatisfy { !$0.changesState })
    }

    @Test func eachPollAnswerIsClassified() async throws {
        let (provider, transport) = provider()
        let cases: [(Reply, DevicePoll)] = [
            (.json(400, #"{"error":"authorization_pending"}"#), .pending),
            (.json(400, #"{"error":"slow_down"}"#), .slowDown),
            (.json(400, #"{"error":"access_denied","error_description":"The user said no"}"#), .denied),
            (.json(400, #"{"error":"expired_token"}"#), .expired),
            (
                .json(
                    200, #"{"error":"authorization_pending","error_description":"pending","error_uri":"https://docs.github.com"}"#
                ), .pending
            ),
            (.json(200, #"{"error":"slow_down","interval":10}"#), .slowDown),
            (
                .json(200, Fixture.tokens),
                .tokens(
                    TokenResponse(
                        accessToken: "AT-secret-1", tokenType: "Bearer", expiresIn: 300, refreshToken: "RT-secret-1",
                        refreshExpiresIn: 1800, idToken: "ID-secret-1", scope: "openid email"))
            ),
        ]
        for (reply, expected) in cases {
            transport.set(Fixture.token, reply)
            #expect(try await provider.pollDevice(deviceCode: "DC-secret") == expected, "\(reply)")
        }
        let request = try #require(transport.requests(to: Fixture.token).first)
        #expect(request.changesState)
        #expect(
            request.form.map { "\($0.0)=\($0.1)" } == [
                "grant_type=urn:ietf:params:oauth:grant-type:device_code", "device_code=DC-secret", "client_id=chat desktop",
            ])
        transport.set(Fixture.token, .json(400, #"{"error":"incorrect_device_code"}"#))
        await #expect(throws: ProviderError.refused(status: 400, error: "incorrect_device_code", description: nil)) {
            try await provider.pollDevice(deviceCode: "DC-secret")
        }
        transport.set(Fixture.token, .fail(.noAnswer("timed out")))
        await #expect(throws: ProviderError.noAnswer("timed out")) { try await provider.pollDevice(deviceCode: "DC-secret") }
    }
}

@Suite struct UserinfoAndJWKSTests {
    @Test func userinfoReadsOpenIDClaims() async throws {
        let transport = Fixture.oidc()
        transport.set(
            Fixture.userinfo,
            .json(
                200,
                #"{"sub":"248289761001","email":"ada@example.com","name":"Ada Lovelace","preferred_username":"ada","email_verified":true}"#
            ))
        let info = try await Fixture.provider(transport).userinfo(accessToken: "AT-secret")
        #expect(
            info
                == UserInfo(
                    subject: "248289761001", email: "ada@example.com", name: "Ada Lovelace", preferredUsername: "ada",
                    emailVerified: true))
        let request = try #require(transport.requests(to: Fixture.userinfo).first)
        #expect(request.method == "GET" && !request.changesState)
        #expect(request.header("Authorization") == "Bearer AT-secret")
        #expect(request.header("Accept") == "application/json")
    }

    @Test func userinfoReadsGitHubsNumericId() async throws {
        let keys = ProviderEndpoints(
            token: "https://github.com/login/oauth/access_token", userinfo: "https://api.github.com/user")
        let transport = RecordingTransport([
            "https://api.github.com/user": .json(
                200, #"{"login":"octocat","id":583231,"node_id":"MDQ6","name":null,"email":null}"#)
        ])
        let provider = Fixture.provider(
            transport, settings: Fixture.settings(kind: .oauth2, issuer: "https://github.com/login/oauth", endpoints: keys))
        let info = try await provider.userinfo(accessToken: "gho_secret")
        #expect(info == UserInfo(subject: "583231", email: nil, name: nil, preferredUsername: "octocat"))
    }

    @Test func userinfoRefusalsAndMistakes() async throws {
        let transport = Fixture.oidc()
        let provider = Fixture.provider(transport)
        transport.set(
            Fixture.userinfo,
            .raw(
                401, [],
                headers: [HTTPHeader("WWW-Authenticate", #"Bearer realm="x", error_description="gone", error="invalid_token""#)]))
        await #expect(throws: ProviderError.refused(status: 401, error: "invalid_token", description: nil)) {
            try await provider.userinfo(accessToken: "AT")
        }
        #expect(OAuthProvider.bearerError("Bearer error=insufficient_scope, scope=\"a\"") == "insufficient_scope")
        #expect(OAuthProvider.bearerError("Bearer realm=\"x\"") == nil)
        transport.set(Fixture.userinfo, .json(200, #"{"sub":12.5}"#))
        await #expect(throws: ProviderError.self) { try await provider.userinfo(accessToken: "AT") }
        transport.set(
            Fixture.userinfo, .raw(200, Array("eyJhbGciOi.x.y".utf8), headers: [HTTPHeader("Content-Type", "application/jwt")]))
        await #expect(throws: ProviderError.self) { try await provider.userinfo(accessToken: "AT") }
    }

    @Test func theJWKSIsKeptAndRefetchedAtMostOnceAMinute() async throws {
        let transport = Fixture.oidc()
        let keys = #"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#
        transport.set(Fixture.jwks, .json(200, keys))
        let clock = TestClock()
        let provider = Fixture.provider(transport, clock: clock)
        #expect(try await provider.jwks(refetch: false) == Array(keys.utf8))
        let request = try #require(transport.requests(to: Fixture.jwks).first)
        #expect(request.maximumResponseBytes == 512 * 1024)
        #expect(!request.changesState)

        let rotated = #"{"keys":[]}"#
        transport.set(Fixture.jwks, .json(200, rotated))
        #expect(try await provider.jwks(refetch: false) == Array(keys.utf8))
        #expect(try await provider.jwks(refetch: true) == Array(keys.utf8), "a refetch within a minute answers the kept bytes")
        #expect(transport.requests(to: Fixture.jwks).count == 1)
        clock.advance(milliseconds: 60_000)
        #expect(try await provider.jwks(refetch: true) == Array(rotated.utf8))
        #expect(transport.requests(to: Fixture.jwks).count == 2)
        #expect(transport.requests(to: Fixture.discovery).count == 2, "the metadata is fetched again with an unknown key")

        transport.set(Fixture.jwks, .json(200, #"{"keys":[],"keys":[]}"#))
        clock.advance(milliseconds: 60_000)
        await #expect(throws: ProviderError.self) { try await provider.jwks(refetch: true) }
        transport.set(Fixture.jwks, .fail(.responseTooLarge))
        clock.advance(milliseconds: 60_000)
        await #expect(throws: ProviderError.responseTooLarge) { try await provider.jwks(refetch: true) }
    }
}

/// A failed refresh reaches the app in the provider's words, not the login server's.
@Suite struct SignInWordingTests {
    @Test func aProviderFailureNamesTheProviderAndItsIssuer() throws {
        let unreachable = OAuthSignIn.failure(.notSent("connect to id.example.com failed")).brokerError
        #expect(unreachable.code == .providerUnreachable)
        #expect(unreachable.message.contains("Issuer="))
        #expect(!unreachable.message.contains("login server"))
        let refused = OAuthSignIn.failure(.refused(status: 400, error: "invalid_request", description: nil))
        guard case .refused(let error, _) = refused else {
            Issue.record("\(refused)")
            return
        }
        #expect(error.code == .providerError && error.providerError == "invalid_request")
    }
}
