import BrokerCore
import BrokerCurl
import BrowserLoginProtocol
import Foundation
import Testing

@testable import BrokerBrowserLogin
@testable import BrokerHTTP

@Suite struct LoginServerClientTests {
    static let challenge = String(repeating: "a", count: 43)

    func client(_ server: TestHTTPServer, transport: any HTTPTransport = CurlTransport()) throws -> LoginServerClient {
        let origin = try Origin(server.url)
        let configuration = try #require(
            LoginServerConfiguration(origin: origin, basePath: "/auth/bl", timeoutMilliseconds: 3_000))
        return LoginServerClient(configuration: configuration, transport: transport)
    }

    static func json(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Reply {
        .respond(status: status, headers: [("Content-Type", "application/json")] + headers, body: Array(text.utf8))
    }

    static let sessionJSON = """
        {"sessionId":"s_1","accessToken":"AT-secret","accessTokenExpiresAt":"2026-11-30T16:30:00.000Z",\
        "refreshToken":"RT-secret","expiresAt":"2026-12-30T16:20:38.123Z","authenticatedAt":"2026-11-30T16:00:00.000Z",\
        "authMethod":"email","account":{"userId":"u_1","email":"ada@example.com","displayName":"Ada"}}
        """

    static func exchangeJSON(attemptId: String, digest: String = Crypto.digest("AT-secret")) -> String {
        """
        {"session":\(sessionJSON),"receipt":{"attemptId":"\(attemptId)","sessionId":"s_1",\
        "issuedAt":"2026-11-30T16:20:38.123Z","tokenDigest":"\(digest)"}}
        """
    }

    @Test func createPostsJSONWithoutCookieOrOrigin() async throws {
        let server = try TestHTTPServer { _ in
            Self.json(
                201,
                #"{"attemptId":"att_1","authorizeUrl":"http://127.0.0.1/x","expiresAt":"2026-11-30T16:22:38.123Z","issuer":"http://127.0.0.1","extra":1}"#
            )
        }
        defer { server.stop() }
        let answer = try await client(server).create(
            CreateAttemptRequest(
                clientId: "com.example.notes", returnUrl: "com.example.notes:/callback", codeChallenge: Self.challenge,
                recoveryChallenge: Self.challenge))
        #expect(answer.attemptId == "att_1")
        let seen = try #require(server.requests.first)
        #expect(seen.method == "POST")
        #expect(seen.target == "/auth/bl/native/attempts")
        #expect(seen.header("Content-Type") == "application/json")
        #expect(seen.header("Accept") == "application/json")
        for name in ["Cookie", "Origin", "Sec-Fetch-Site", "Authorization"] { #expect(seen.header(name) == nil) }
        let body = try JSONSerialization.jsonObject(with: Data(seen.body)) as? [String: Any]
        #expect(body?["codeChallengeMethod"] as? String == "S256")
        #expect(body?["ephemeral"] as? Bool == false)
    }

    @Test func exchangePercentEncodesTheAttemptAndChecksTheReceipt() async throws {
        let attemptId = "a b/c"
        let server = try TestHTTPServer { request in
            Self.json(200, Self.exchangeJSON(attemptId: request.target.contains("bad") ? "other" : attemptId))
        }
        defer { server.stop() }
        let answer = try await client(server).exchange(
            attemptId: attemptId, ExchangeRequest(code: "c", codeVerifier: Self.challenge))
        #expect(answer.session.account.email == "ada@example.com")
        #expect(server.requests.first?.target == "/auth/bl/native/attempts/a%20b%2Fc/exchange")
        await #expect(
            throws: LoginServerError.malformed(status: 200, "the receipt does not match the attempt or the issued session")
        ) {
            try await client(server).exchange(attemptId: "bad", ExchangeRequest(code: "c", codeVerifier: Self.challenge))
        }
    }

    @Test func exchangeRefusesAReceiptWhoseDigestIsNotTheToken() async throws {
        let server = try TestHTTPServer { _ in Self.json(200, Self.exchangeJSON(attemptId: "att", digest: Self.challenge)) }
        defer { server.stop() }
        let error = await #expect(throws: LoginServerError.self) {
            try await client(server).exchange(attemptId: "att", ExchangeRequest(code: "c", codeVerifier: Self.challenge))
        }
        #expect(error?.isDefinite == false)
    }

    @Test func mapsEveryKindOfAnswer() async throws {
        let server = try TestHTTPServer { request in
            switch request.target.split(separator: "/").dropFirst(4).first ?? "" {
            case "redirect": .respond(status: 302, headers: [("Location", "/elsewhere")])
            case "refused": Self.json(400, #"{"error":{"code":"INVALID_GRANT","message":"wrong code"}}"#)
            case "limited":
                Self.json(429, #"{"error":{"code":"RATE_LIMITED","message":"slow down"}}"#, headers: [("Retry-After", "7")])
            case "unknowncode": Self.json(409, #"{"error":{"code":"SOMETHING_NEW","message":"newer server"}}"#)
            case "html": .respond(status: 404, headers: [("Content-Type", "text/html")], body: Array("<h1>no</h1>".utf8))
            case "dup": Self.json(400, #"{"error":{"code":"INVALID_GRANT","message":"a","message":"b"}}"#)
            case "broken": .respond(status: 503)
            case "okdup": Self.json(200, Self.exchangeJSON(attemptId: "okdup").dropLast() + #","session":{}}"#)
            case "oknotjson": .respond(status: 200, body: Array("OK".utf8))
            case "wrong2xx": Self.json(201, Self.exchangeJSON(attemptId: "wrong2xx"))
            case "drop": .close
            default: .respond(status: 500)
            }
        }
        defer { server.stop() }
        let client = try client(server)
        func exchange(_ id: String) async -> LoginServerError? {
            do {
                _ = try await client.exchange(attemptId: id, ExchangeRequest(code: "c", codeVerifier: Self.challenge))
                return nil
            } catch { return error }
        }
        #expect(await exchange("redirect") == .redirected(status: 302))
        let refused = await exchange("refused")
        #expect(refused == .refused(status: 400, code: .invalidGrant, message: "wrong code", retryAfterSeconds: nil))
        #expect(refused?.isDefinite == true)
        #expect(
            await exchange("limited")
                == .refused(status: 429, code: .rateLimited, message: "slow down", retryAfterSeconds: 7))
        #expect(await exchange("unknowncode")?.serverCode == ServerErrorCode("SOMETHING_NEW"))
        for id in ["html", "dup", "okdup", "oknotjson", "wrong2xx"] {
            let error = await exchange(id)
            guard case .malformed = error else {
                Issue.record("\(id): expected malformed, got \(String(describing: error))")
                continue
            }
            #expect(error?.isDefinite == false)
        }
        #expect(await exchange("broken") == .serverFailure(status: 503))
        #expect(await exchange("broken")?.isDefinite == false)
        let dropped = await exchange("drop")
        guard case .noAnswer = dropped else {
            Issue.record("expected noAnswer, got \(String(describing: dropped))")
            return
        }
        #expect(dropped?.isDefinite == false)
    }

    @Test func anUnreachableServerIsNotSent() async throws {
        let port = try unusedPort()
        let origin = try Origin("http://127.0.0.1:\(port)")
        let client = LoginServerClient(
            configuration: try #require(LoginServerConfiguration(origin: origin)), transport: CurlTransport())
        let error = await #expect(throws: LoginServerError.self) {
            try await client.cancel(attemptId: "att", recoveryKey: Self.challenge)
        }
        #expect(error?.certainlyNotSent == true)
        #expect(error?.isDefinite == false)
    }

    @Test func recoveryCallsSendTheKeyInTheBodyOnly() async throws {
        let server = try TestHTTPServer { request in
            if request.target.hasSuffix("/status") {
                return Self.json(200, #"{"state":"pending","expiresAt":"2026-11-30T16:22:38.123Z"}"#)
            }
            if request.target.hasSuffix("/cancel") { return Self.json(200, #"{"state":"cancelled"}"#) }
            if request.target.hasSuffix("/acknowledge") { return Self.json(200, #"{"state":"acknowledged"}"#) }
            if request.target.hasSuffix("/revoke") { return Self.json(200, #"{"revoked":true}"#) }
            return .respond(status: 500)
        }
        defer { server.stop() }
        let client = try client(server)
        let key = "RK-" + Self.challenge
        #expect(try await client.status(attemptId: "att", recoveryKey: key).state == .pending)
        #expect(try await client.cancel(attemptId: "att", recoveryKey: key) == .cancelled)
        try await client.acknowledge(attemptId: "att", recoveryKey: key)
        #expect(try await client.revokeByProof(attemptId: "att", recoveryKey: key).revoked)
        let requests = server.requests
        #expect(
            requests.map(\.target) == [
                "/auth/bl/native/attempts/att/status", "/auth/bl/native/attempts/att/cancel",
                "/auth/bl/native/attempts/att/acknowledge", "/auth/bl/native/sessions/revoke",
            ])
        for request in requests {
            #expect(!request.target.contains(key))
            #expect(String(decoding: request.body, as: UTF8.self).contains(key))
        }
        let revoke = try JSONSerialization.jsonObject(with: Data(requests[3].body)) as? [String: String]
        #expect(revoke == ["attemptId": "att", "recoveryKey": key])
    }

    @Test func statusRefusesCompletedMembersOnAPendingAttempt() async throws {
        let server = try TestHTTPServer { _ in
            Self.json(200, #"{"state":"pending","expiresAt":"2026-11-30T16:22:38.123Z","sessionRevoked":false}"#)
        }
        defer { server.stop() }
        let error = await #expect(throws: LoginServerError.self) {
            try await client(server).status(attemptId: "att", recoveryKey: Self.challenge)
        }
        guard case .malformed = error else {
            Issue.record("expected malformed, got \(String(describing: error))")
            return
        }
    }

    @Test func sessionCallsCarryTheBearerToken() async throws {
        let server = try TestHTTPServer { request in
            switch request.target {
            case "/auth/bl/native/session":
                Self.json(
                    200,
                    #"{"sessionId":"s_1","expiresAt":"2026-12-30T16:20:38.123Z","account":{"userId":"u_1","email":"a@example.com","displayName":"Ada"}}"#
                )
            case "/auth/bl/native/sessions/revoke": Self.json(200, #"{"revoked":true}"#)
            case "/auth/bl/native/sessions/refresh":
                Self.json(
                    200,
                    #"{"accessToken":"AT2","accessTokenExpiresAt":"2026-11-30T16:40:00.000Z","refreshToken":"RT2","expiresAt":"2026-12-30T16:20:38.123Z"}"#
                )
            default: .respond(status: 404)
            }
        }
        defer { server.stop() }
        let client = try client(server)
        #expect(try await client.session(accessToken: "AT-secret").sessionId == "s_1")
        #expect(try await client.revokeByToken(accessToken: "AT-secret").revoked)
        #expect(try await client.refresh(refreshToken: "RT-secret").refreshToken == "RT2")
        let requests = server.requests
        #expect(requests[0].method == "GET")
        #expect(requests[0].body.isEmpty)
        #expect(requests[0].header("Content-Type") == nil)
        #expect(requests[0].header("Authorization") == "Bearer AT-secret")
        #expect(requests[1].method == "POST")
        #expect(requests[1].body == Array("{}".utf8))
        #expect(requests[1].header("Authorization") == "Bearer AT-secret")
        #expect(requests[2].header("Authorization") == nil)
        let refresh = try JSONSerialization.jsonObject(with: Data(requests[2].body)) as? [String: String]
        #expect(refresh == ["refreshToken": "RT-secret"])
    }

    @Test func stateChangingCallsAreMarkedSoAndSafeOnesAreNot() async throws {
        let recorder = RecordingTransport()
        let configuration = try #require(LoginServerConfiguration(origin: try Origin("https://login.example.com")))
        let client = LoginServerClient(configuration: configuration, transport: recorder)
        let key = Self.challenge
        _ = try? await client.create(
            CreateAttemptRequest(clientId: "c", returnUrl: "c:/cb", codeChallenge: key, recoveryChallenge: key))
        _ = try? await client.exchange(attemptId: "a", ExchangeRequest(code: "c", codeVerifier: key))
        _ = try? await client.status(attemptId: "a", recoveryKey: key)
        _ = try? await client.cancel(attemptId: "a", recoveryKey: key)
        _ = try? await client.acknowledge(attemptId: "a", recoveryKey: key)
        _ = try? await client.revokeByProof(attemptId: "a", recoveryKey: key)
        _ = try? await client.revokeByToken(accessToken: "t")
        _ = try? await client.session(accessToken: "t")
        _ = try? await client.refresh(refreshToken: "r")
        let sent = await recorder.requests
        #expect(sent.map(\.changesState) == [true, true, false, true, true, true, true, false, true])
        #expect(sent.allSatisfy { $0.url.hasPrefix("https://login.example.com/browser-login/native/") })
        #expect(sent.allSatisfy { $0.caFile == nil && $0.maximumResponseBytes == 256 * 1024 })
        #expect(sent.allSatisfy { r in !r.headers.contains { ["cookie", "origin"].contains($0.name.lowercased()) } })
    }

    @Test func refusesAnInvalidBasePath() throws {
        let origin = try Origin("https://login.example.com")
        for path in ["", "/", "/a/", "a", "/a//b", "/a b", "/%2e"] {
            #expect(LoginServerConfiguration(origin: origin, basePath: path) == nil)
        }
        #expect(LoginServerConfiguration(origin: origin, basePath: "/a.b/c_d~-") != nil)
    }

    @Test func parsesRetryAfterSeconds() {
        #expect(LoginServerClient.parseRetryAfter("120") == 120)
        #expect(LoginServerClient.parseRetryAfter(" 3 ") == 3)
        #expect(LoginServerClient.parseRetryAfter("Wed, 21 Oct 2026 07:28:00 GMT") == nil)
        #expect(LoginServerClient.parseRetryAfter("-1") == nil)
    }
}

/// Records requests and answers every one with "not sent".
actor RecordingTransport: HTTPTransport {
    var requests: [HTTPRequest] = []
    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        requests.append(request)
        throw .notSent("recorded")
    }
}

/// Browser Login as the engine sees it: a `SignInProtocol` chosen by the client's configuration.
@Suite struct BrowserLoginProtocolTests {
    @Test func theClientsProtocolSpeaksToItsServerAndBasePathAndControlsItsAttempts() async throws {
        let server = try TestHTTPServer { request in
            switch request.target {
            case "/auth/bl/native/attempts/att/status":
                LoginServerClientTests.json(200, #"{"state":"expired","expiresAt":"2026-11-30T16:22:38.123Z"}"#)
            case "/auth/bl/native/attempts/att/exchange":
                LoginServerClientTests.json(200, LoginServerClientTests.exchangeJSON(attemptId: "other"))
            default: LoginServerClientTests.json(404, #"{"error":{"code":"NOT_FOUND","message":"no"}}"#)
            }
        }
        defer { server.stop() }
        let config = ClientConfig(
            id: "com.example.notes", appName: "Notes", server: try Origin(server.url), basePath: "/auth/bl",
            returnURL: try ReturnURL("com.example.notes:/callback"))
        let signIn: any SignInProtocol = LoginServerClient.signIn(for: config, transport: CurlTransport())
        let attempts = try #require(signIn.serverAttempts)
        let ref = ServerAttemptRef(key: "att", recoveryKey: LoginServerClientTests.challenge)
        #expect(try await attempts.status(ref).state == .expired)
        // The receipt is checked by the protocol: a receipt of another attempt never reaches the engine,
        // and an answer that breaks the protocol is no definite answer (the code is never sent again).
        let error = await #expect(throws: LocalRedeemFailure.self) {
            try await signIn.redeem(
                code: "c", key: "att",
                proofs: LocalProofs(
                    codeVerifier: LoginServerClientTests.challenge, state: nil, nonce: nil,
                    redirectURI: "com.example.notes:/callback"))
        }
        guard case .uncertain(_, let brokerError) = error else {
            Issue.record("expected no definite answer, got \(String(describing: error))")
            return
        }
        #expect(
            brokerError.message
                == "the login server's answer broke the protocol (the server's answer (200) is not a protocol answer: the receipt does not match the attempt or the issued session); check the client's Server= and BasePath="
        )
        #expect(
            server.requests.map(\.target) == ["/auth/bl/native/attempts/att/status", "/auth/bl/native/attempts/att/exchange"])
    }

    @Test func aProtocolWithoutServerAttemptsKnowsNone() async throws {
        let error = await #expect(throws: ServerAttemptFailure.self) {
            try await NoServerAttempts().status(ServerAttemptRef(key: "att", recoveryKey: "k"))
        }
        #expect(error?.kind == .unknown)
    }
}
