import BrowserLoginProtocol

/// Why a call to the login server did not answer with its success body.
public enum ServerFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request certainly never reached the server.
    case notSent(String)
    /// Sent, but no answer came (connection lost, timeout).
    case noAnswer(String)
    /// Any 3xx: servers never redirect on native routes.
    case redirected(Int)
    /// An answer that is not a well-formed answer of the protocol.
    case malformed(Int, String)
    /// A 5xx.
    case serverFailure(Int)
    /// A well-formed 4xx error body.
    case refused(status: Int, code: ServerErrorCode, message: String, retryAfterSeconds: Int?)
    /// The answer was larger than allowed.
    case responseTooLarge

    public var description: String {
        switch self {
        case .notSent(let m): "the server could not be reached (\(m))"
        case .noAnswer(let m): "the server did not answer (\(m))"
        case .redirected(let s): "the server answered a redirect (\(s)), which the protocol forbids"
        case .malformed(let s, let m): "the server's answer (\(s)) is not a protocol answer: \(m)"
        case .serverFailure(let s): "the server failed (\(s))"
        case .refused(let s, let code, _, _): "the server refused (\(s) \(code))"
        case .responseTooLarge: "the server's answer is too large"
        }
    }

    /// The broker error for a call that failed this way.
    public func brokerError(attemptId: String? = nil) -> BrokerError {
        switch self {
        case .notSent(let detail), .noAnswer(let detail):
            // The detail names only the host and what failed (a TLS
            // handshake, a timeout), never a path, a token or an id.
            return BrokerError(
                .serverUnreachable,
                "the login server could not be reached (\(detail)); check the network and the client's Server= origin, then try again",
                attemptId: attemptId)
        case .serverFailure(let status):
            return BrokerError(
                .serverProtocolError,
                "the login server failed (HTTP \(status)); try again later, and tell its operator if it persists",
                attemptId: attemptId)
        case .redirected, .malformed, .responseTooLarge:
            return BrokerError(
                .serverProtocolError,
                "the login server's answer broke the protocol (\(self)); check the client's Server= and BasePath=",
                attemptId: attemptId)
        case .refused(_, let code, let message, let retryAfter):
            let safeMessage = message.count <= 200 ? message : String(message.prefix(200))
            return BrokerError(
                .serverError, "the login server refused: \(code.rawValue) (\(safeMessage))", attemptId: attemptId,
                serverCode: code.rawValue, retryAfterSeconds: retryAfter)
        }
    }
}

/// The native routes of the login server (PROTOCOL.md §5) for one client.
public protocol LoginServerAPI: Sendable {
    func create(_ request: CreateAttemptRequest) async throws(ServerFailure) -> CreateAttemptResponse
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(ServerFailure) -> ExchangeResponse
    func status(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StatusResponse
    func cancel(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StateResponse
    func acknowledge(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> StateResponse
    func revoke(attemptId: String, recoveryKey: String) async throws(ServerFailure) -> RevokeResponse
    func revoke(accessToken: String) async throws(ServerFailure) -> RevokeResponse
    func session(accessToken: String) async throws(ServerFailure) -> SessionInfoResponse
    func refresh(refreshToken: String) async throws(ServerFailure) -> RefreshResponse
}
