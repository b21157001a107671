import BrokerCore
import BrowserLoginProtocol
import SystemSupport

/// Where a client's login server is, and how to talk to it.
public struct LoginServerConfiguration: Sendable, Equatable {
    /// The server origin (also the expected `issuer`).
    public var origin: Origin
    /// The server's `basePath` (docs/protocol.md §1), default `/browser-login`.
    public var basePath: String
    /// A PEM file of CAs to trust instead of the system's (a private or test CA).
    public var caFile: String?
    /// Total time allowed per request, connect included.
    public var timeoutMilliseconds: Int
    public var connectTimeoutMilliseconds: Int
    /// The largest answer accepted from a native route.
    public var maximumResponseBytes: Int

    /// Fails when `basePath` does not match `^(/[A-Za-z0-9._~-]+)+$`.
    public init?(
        origin: Origin, basePath: String = "/browser-login", caFile: String? = nil,
        timeoutMilliseconds: Int = 15_000, connectTimeoutMilliseconds: Int = 5_000,
        maximumResponseBytes: Int = 256 * 1024
    ) {
        guard Registration.isValidBasePath(basePath) else { return nil }
        self.origin = origin
        self.basePath = basePath
        self.caFile = caFile
        self.timeoutMilliseconds = timeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.maximumResponseBytes = maximumResponseBytes
    }

    /// `{origin}{basePath}/native`.
    var nativeBase: String { origin.serialized + basePath + "/native" }
}

/// Browser Login (docs/protocol.md §5), the first `SignInProtocol`: typed
/// calls over any `HTTPTransport`. Requests carry no cookie and no `Origin`;
/// state-changing calls are marked so and are never repeated.
public struct LoginServerClient: BrowserLoginRoutes {
    public let configuration: LoginServerConfiguration
    public let transport: any HTTPTransport

    public init(configuration: LoginServerConfiguration, transport: any HTTPTransport) {
        self.configuration = configuration
        self.transport = transport
    }

    /// The sign-in protocol of a client, chosen by its configuration (today always Browser Login).
    public static func signIn(for client: ClientConfig, transport: any HTTPTransport) -> any SignInProtocol {
        // The base path was validated with the client file.
        let configuration = LoginServerConfiguration(
            origin: client.server, basePath: client.basePath, caFile: client.caFile)!
        return LoginServerClient(configuration: configuration, transport: transport)
    }

    public var origin: Origin { configuration.origin }

    // MARK: §5 routes

    /// §5.1 `POST {base}/native/attempts` → 201.
    public func create(_ body: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse {
        try await post(path: "/attempts", body: body, expect: 201, as: CreateAttemptResponse.self)
    }

    /// §5.2 `POST {base}/native/attempts/{attemptId}/exchange` → 200. A
    /// success is also checked for consistency: the receipt names this
    /// attempt and the session, and its `tokenDigest` is the digest of this
    /// access token.
    public func exchange(attemptId: String, _ body: ExchangeRequest) async throws(LoginServerError)
        -> ExchangeResponse
    {
        let answer = try await post(
            path: "/attempts/\(percentEncode(attemptId))/exchange", body: body, expect: 200, as: ExchangeResponse.self)
        guard answer.receipt.attemptId == attemptId, answer.receipt.sessionId == answer.session.sessionId,
            Crypto.constantTimeEquals(answer.receipt.tokenDigest, Crypto.digest(answer.session.accessToken))
        else {
            throw .malformed(status: 200, "the receipt does not match the attempt or the issued session")
        }
        guard answer.session.refreshToken != nil, answer.session.expiresAt != nil,
            answer.session.accessTokenExpiresAt != nil
        else {
            throw .malformed(status: 200, "the session lacks its refresh token or an expiry")
        }
        return answer
    }

    /// §5.3 `POST {base}/native/attempts/{attemptId}/status` → 200 (safe to repeat).
    public func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse {
        let answer = try await post(
            path: "/attempts/\(percentEncode(attemptId))/status", body: RecoveryRequest(recoveryKey: recoveryKey),
            expect: 200, as: StatusResponse.self, changesState: false)
        guard answer.isWellFormed else {
            throw .malformed(status: 200, "receipt, sessionExpiresAt and sessionRevoked must be present exactly when completed")
        }
        return answer
    }

    /// §5.4 `POST {base}/native/attempts/{attemptId}/cancel` → 200 `{"state"}`
    /// (`cancelled`, or `expired` when it had already expired).
    public func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState {
        let answer = try await post(
            path: "/attempts/\(percentEncode(attemptId))/cancel", body: RecoveryRequest(recoveryKey: recoveryKey),
            expect: 200, as: StateResponse.self)
        guard let state = ServerAttemptState(rawValue: answer.state), state == .cancelled || state == .expired else {
            throw .malformed(status: 200, "a cancel answers the state cancelled or expired")
        }
        return state
    }

    /// §5.5 `POST {base}/native/attempts/{attemptId}/acknowledge` → 200 `{"state": "acknowledged"}`.
    public func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError) {
        let answer = try await post(
            path: "/attempts/\(percentEncode(attemptId))/acknowledge", body: RecoveryRequest(recoveryKey: recoveryKey),
            expect: 200, as: StateResponse.self)
        guard answer.state == "acknowledged" else {
            throw .malformed(status: 200, "an acknowledge answers the state acknowledged")
        }
    }

    /// §5.8, recovery form: `{"attemptId", "recoveryKey"}`.
    public func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError)
        -> RevokeResponse
    {
        try await post(
            path: "/sessions/revoke", body: RevokeByProofRequest(attemptId: attemptId, recoveryKey: recoveryKey),
            expect: 200, as: RevokeResponse.self)
    }

    /// §5.7 for the seam: its failures in the seam's terms (`signInFailure`).
    public func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        guard let token = session.refreshToken else {
            throw LoginServerError.notSent("the session has no refresh token").signInFailure(.refresh)
        }
        do { return Self.refreshed(session, by: try await refresh(refreshToken: token)) } catch {
            throw error.signInFailure(.refresh)
        }
    }

    /// §5.8's sign-out form for the seam.
    public func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        do { return try await revokeByToken(accessToken: session.accessToken) } catch {
            throw error.signInFailure(.revoke)
        }
    }

    /// §5.6 for the seam: `TOKEN_EXPIRED` is a live session with an expired access token.
    public func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        try await LoginServerError.verification(of: session) { () async throws(LoginServerError) in
            try await self.session(accessToken: session.accessToken)
        }
    }

    /// §5.8, sign-out form: `Authorization: Bearer` and body `{}`.
    public func revokeByToken(accessToken: String) async throws(LoginServerError) -> RevokeResponse {
        try await post(
            path: "/sessions/revoke", body: EmptyObject(), expect: 200, as: RevokeResponse.self,
            bearer: accessToken)
    }

    /// §5.6 `GET {base}/native/session` with `Authorization: Bearer` (safe to repeat).
    public func session(accessToken: String) async throws(LoginServerError) -> SessionInfoResponse {
        let request = makeRequest(
            method: "GET", path: "/session", body: nil, bearer: accessToken, changesState: false)
        return try await perform(request, expect: 200, as: SessionInfoResponse.self)
    }

    /// §5.7 `POST {base}/native/sessions/refresh`. Rotates the tokens, so it
    /// is sent as a state-changing request (the caller may repeat it inside
    /// the grace window; the transport never does).
    public func refresh(refreshToken: String) async throws(LoginServerError) -> RefreshResponse {
        try await post(
            path: "/sessions/refresh", body: RefreshRequest(refreshToken: refreshToken), expect: 200,
            as: RefreshResponse.self)
    }

    // MARK: Plumbing

    struct EmptyObject: Encodable {}

    func makeRequest(method: String, path: String, body: [UInt8]?, bearer: String?, changesState: Bool)
        -> HTTPRequest
    {
        var headers = [HTTPHeader("Accept", "application/json")]
        if body != nil { headers.append(HTTPHeader("Content-Type", "application/json")) }
        if let bearer { headers.append(HTTPHeader("Authorization", "Bearer \(bearer)")) }
        return HTTPRequest(
            method: method, url: configuration.nativeBase + path, headers: headers, body: body,
            timeoutMilliseconds: configuration.timeoutMilliseconds,
            connectTimeoutMilliseconds: configuration.connectTimeoutMilliseconds,
            maximumResponseBytes: configuration.maximumResponseBytes, caFile: configuration.caFile,
            changesState: changesState)
    }

    private func post<Body: Encodable, Answer: Decodable>(
        path: String, body: Body, expect: Int, as: Answer.Type, changesState: Bool = true, bearer: String? = nil
    ) async throws(LoginServerError) -> Answer {
        let encoded: [UInt8]
        do {
            encoded = try ProtocolJSON.encode(body)
        } catch {
            throw .notSent("the request body could not be encoded")
        }
        let request = makeRequest(method: "POST", path: path, body: encoded, bearer: bearer, changesState: changesState)
        return try await perform(request, expect: expect, as: Answer.self)
    }

    private func perform<Answer: Decodable>(_ request: HTTPRequest, expect: Int, as: Answer.Type)
        async throws(LoginServerError) -> Answer
    {
        let response: HTTPResponse
        do {
            response = try await transport.send(request)
        } catch {
            switch error {
            case .notSent(let m): throw .notSent(m)
            case .invalidRequest(let m): throw .notSent("the request could not be built: \(m)")
            case .noAnswer(let m): throw .noAnswer(m)
            case .responseTooLarge: throw .responseTooLarge
            }
        }
        return try LoginServerClient.interpret(response, expect: expect, as: Answer.self)
    }

    /// Maps one answer of a native route to its body or a `LoginServerError`.
    static func interpret<Answer: Decodable>(_ response: HTTPResponse, expect: Int, as: Answer.Type)
        throws(LoginServerError) -> Answer
    {
        let status = response.status
        switch status {
        case 200...299:
            guard status == expect else {
                throw .malformed(status: status, "expected the status \(expect)")
            }
            do {
                return try StrictJSON.decode(Answer.self, from: response.body)
            } catch {
                throw .malformed(status: status, error.description)
            }
        case 300...399:
            throw .redirected(status: status)
        case 400...499:
            let body: ErrorBody
            do {
                body = try StrictJSON.decode(ErrorBody.self, from: response.body)
            } catch {
                throw .malformed(status: status, "the error body is not {\"error\": {\"code\", \"message\"}} (\(error))")
            }
            throw .refused(
                status: status, code: body.error.code, message: body.error.message,
                retryAfterSeconds: response.header("Retry-After").flatMap(parseRetryAfter))
        case 500...599:
            throw .serverFailure(status: status)
        default:
            throw .malformed(status: status, "the status is not one of HTTP's")
        }
    }

    /// `Retry-After` as delta-seconds (RFC 9110 §10.2.3); an HTTP-date or
    /// anything else is nil.
    static func parseRetryAfter(_ text: String) -> Int? {
        let trimmed = text.trimmingBlanks()
        guard !trimmed.isEmpty, trimmed.count <= 9, trimmed.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return nil
        }
        return Int(trimmed)
    }
}
