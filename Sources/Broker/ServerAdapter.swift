import BrokerCore
import BrokerHTTP
import BrowserLoginProtocol

/// The engine's view of a login server, over the libcurl client.
struct LoginServerAdapter: LoginServerAPI {
    let client: LoginServerClient

    init(_ config: ClientConfig, transport: any HTTPTransport) {
        // The base path was validated with the client file.
        let configuration = LoginServerConfiguration(
            origin: config.server, basePath: config.basePath, caFile: config.caFile)!
        client = LoginServerClient(configuration: configuration, transport: transport)
    }

    private static func map(_ error: LoginServerError) -> ServerFailure {
        switch error {
        case .notSent(let m): .notSent(m)
        case .noAnswer(let m): .noAnswer(m)
        case .redirected(let status): .redirected(status)
        case .malformed(let status, let m): .malformed(status, m)
        case .serverFailure(let status): .serverFailure(status)
        case .refused(let status, let code, let message, let retry):
            .refused(status: status, code: code, message: message, retryAfterSeconds: retry)
        case .responseTooLarge: .responseTooLarge
        }
    }

    private func call<T>(_ body: () async throws(LoginServerError) -> T) async throws(ServerFailure) -> T {
        do { return try await body() } catch { throw Self.map(error) }
    }

    func create(_ request: CreateAttemptRequest) async throws(ServerFailure) -> CreateAttemptResponse {
        try await call { () async throws(LoginServerError) in try await client.create(request) }
    }
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(ServerFailure) -> ExchangeResponse {
        try await call { () async throws(LoginServerError) in try await client.exchange(attemptId: attemptId, request) }
    }
    func status(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StatusResponse {
        try await call { () async throws(LoginServerError) in
            try await client.status(attemptId: attemptId, recoveryKey: recoveryKey)
        }
    }
    func cancel(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StateResponse {
        try await call { () async throws(LoginServerError) in
            StateResponse(state: try await client.cancel(attemptId: attemptId, recoveryKey: recoveryKey).rawValue)
        }
    }
    func acknowledge(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StateResponse {
        try await call { () async throws(LoginServerError) in
            try await client.acknowledge(attemptId: attemptId, recoveryKey: recoveryKey)
            return StateResponse(state: "acknowledged")
        }
    }
    func revoke(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> RevokeResponse {
        try await call { () async throws(LoginServerError) in
            _ = try await client.revokeByProof(attemptId: attemptId, recoveryKey: recoveryKey)
            return RevokeResponse(revoked: true)
        }
    }
    func revoke(accessToken: String) async throws(ServerFailure) -> RevokeResponse {
        try await call { () async throws(LoginServerError) in try await client.revokeByToken(accessToken: accessToken) }
    }
    func session(accessToken: String) async throws(ServerFailure) -> SessionInfoResponse {
        try await call { () async throws(LoginServerError) in try await client.session(accessToken: accessToken) }
    }
    func refresh(refreshToken: String) async throws(ServerFailure) -> RefreshResponse {
        try await call { () async throws(LoginServerError) in try await client.refresh(refreshToken: refreshToken) }
    }
}
