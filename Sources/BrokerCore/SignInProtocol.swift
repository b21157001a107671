import BrowserLoginProtocol

/// Why a call to the login server did not answer with its success body: the
/// one error of every sign-in protocol. Messages never hold a token, a proof,
/// a code or the server's attempt id.
public enum LoginServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request certainly never reached the server.
    case notSent(String)
    /// Sent, but no answer came (connection lost, timeout).
    case noAnswer(String)
    /// Any 3xx: servers never redirect on native routes.
    case redirected(status: Int)
    /// An answer that is not a well-formed answer of the protocol.
    case malformed(status: Int, String)
    /// A 5xx.
    case serverFailure(status: Int)
    /// A well-formed 4xx error body.
    case refused(status: Int, code: ServerErrorCode, message: String, retryAfterSeconds: Int?)
    /// The answer was larger than allowed.
    case responseTooLarge
    /// A well-formed OAuth 2.0 error body (RFC 6749 §5.2) from a standard
    /// provider: `error` is its code (`invalid_grant` …), `description` its
    /// `error_description`, already reduced to plain text.
    case providerRefused(status: Int, error: String, description: String?)

    /// docs/protocol.md §7: only a success or a well-formed 4xx error body is
    /// a definite answer; anything else may hide a processed request.
    public var isDefinite: Bool {
        switch self {
        case .refused, .providerRefused: true
        default: false
        }
    }

    /// True when the request certainly did not reach the server.
    public var certainlyNotSent: Bool {
        if case .notSent = self { return true }
        return false
    }

    /// The server's code for a well-formed refusal.
    public var serverCode: ServerErrorCode? {
        if case .refused(_, let code, _, _) = self { return code }
        return nil
    }

    public var description: String {
        switch self {
        case .notSent(let m): "the server could not be reached (\(m))"
        case .noAnswer(let m): "the server did not answer (\(m))"
        case .redirected(let s): "the server answered a redirect (\(s)), which the protocol forbids"
        case .malformed(let s, let m): "the server's answer (\(s)) is not a protocol answer: \(m)"
        case .serverFailure(let s): "the server failed (\(s))"
        case .refused(let s, let code, _, _): "the server refused (\(s) \(code))"
        case .responseTooLarge: "the server's answer is too large"
        case .providerRefused(let s, let error, _): "the provider refused (\(s) \(error))"
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
        case .providerRefused(_, let error, let description):
            return BrokerError(
                .providerError,
                "the identity provider refused: \(error)\(description.map { " (\($0))" } ?? ""); sign in again, and check the client file if it persists",
                attemptId: attemptId, providerError: error)
        case .refused(_, let code, let message, let retryAfter):
            let safeMessage = message.count <= 200 ? message : String(message.prefix(200))
            return BrokerError(
                .serverError, "the login server refused: \(code.rawValue) (\(safeMessage))", attemptId: attemptId,
                serverCode: code.rawValue, retryAfterSeconds: retryAfter)
        }
    }
}

/// A sign-in protocol as the engine drives it, one per client (chosen from
/// the client's configuration). Browser Login (docs/protocol.md) is the first;
/// a protocol maps its server's answers onto these values and checks them
/// (the exchange's receipt included) before it returns, so the engine, the
/// attempt machine, the store and the RPC layer never see its wire.
public protocol SignInProtocol: Sendable {
    /// Rotates the session's tokens (§5.7): the session as it is after the
    /// refresh (new access token, the rotated refresh token, expiries).
    func refresh(_ session: IssuedSession) async throws(LoginServerError) -> IssuedSession
    /// Revokes the session of a signed-out client (§5.8, RFC 7009).
    func revoke(_ session: IssuedSession) async throws(LoginServerError) -> RevokeResponse
    /// Checks the session with the server (§5.6).
    func session(accessToken: String) async throws(LoginServerError) -> SessionInfoResponse
    /// The server's routes for one attempt (create, exchange, status,
    /// cancel, acknowledge, revoke by proof), which sign-in, reconciliation
    /// and follow-ups use; nil for a protocol whose server keeps no attempt a
    /// client can ask about (it has `localAttempts` instead).
    var attemptControl: (any ServerAttemptControl)? { get }
    /// The sign-in steps of a protocol whose server keeps no attempt (its
    /// attempts live in the broker only); nil for one whose server keeps them.
    var localAttempts: (any LocalAttemptSignIn)? { get }
    /// True when a refresh whose answer was lost may be sent once more at
    /// once (Browser Login's grace window gives the same successor); false
    /// for a standard provider, whose next refresh waits for the next need.
    var repeatsLostRefresh: Bool { get }
    /// False for a protocol without a session check (standard providers):
    /// their sessions are not verified on the slow interval.
    var checksSessions: Bool { get }
    /// False when the server cannot be told of a sign-out (a provider without
    /// a revocation endpoint): the `session.signOut` reply says so.
    var canRevoke: Bool { get async }
    /// Whether the app's API answered a `401` because the access token is no
    /// longer good (the request was not processed): refresh, send once more.
    func rejectsAccessToken(_ response: HTTPResponse) -> Bool
    /// The headers that authorize an app's request (`http.request`) to
    /// `method` `url` with the session's access token: `Authorization:
    /// Bearer`, or for a DPoP-bound session `Authorization: DPoP` and a proof.
    func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    /// True when the API refused the request for want of a fresh DPoP nonce
    /// (now kept): it was not processed, so it is sent once more.
    func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool
    /// True for an app path that belongs to the sign-in server, not the app
    /// (`http.request` refuses it).
    func reservesAppPath(_ path: String, client: ClientConfig) -> Bool
    /// The public error for a failed call, in this protocol's words (a
    /// standard provider is not "the login server").
    func brokerError(_ failure: LoginServerError) -> BrokerError
}

extension SignInProtocol {
    /// The session after a Browser Login refresh answer (§5.7).
    public static func refreshed(_ session: IssuedSession, by answer: RefreshResponse) -> IssuedSession {
        var next = session
        next.accessToken = answer.accessToken
        next.accessTokenExpiresAt = answer.accessTokenExpiresAt
        next.refreshToken = answer.refreshToken
        next.expiresAt = answer.expiresAt
        return next
    }
    public var repeatsLostRefresh: Bool { true }
    public var checksSessions: Bool { true }
    public var canRevoke: Bool { get async { true } }
    public var localAttempts: (any LocalAttemptSignIn)? { nil }
    /// Browser Login's routes under the client's `BasePath=` on its API origin.
    public func reservesAppPath(_ path: String, client: ClientConfig) -> Bool {
        client.apiOrigin == client.server && (path == client.basePath || path.hasPrefix(client.basePath + "/"))
    }
    /// Browser Login's API says `TOKEN_EXPIRED` in its error body (docs/protocol.md §6).
    public func rejectsAccessToken(_ response: HTTPResponse) -> Bool {
        response.status == 401 && response.body.count < 65_536
            && (try? JSONValue.parse(response.body).decode(ErrorBody.self))?.error.code == .tokenExpired
    }
    public func brokerError(_ failure: LoginServerError) -> BrokerError { failure.brokerError() }
    public func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    { [HTTPHeader("Authorization", "Bearer " + session.accessToken)] }
    public func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool { false }
}

/// The optional capability of a sign-in protocol whose server keeps each
/// attempt and answers for it with the attempt's recovery key (§5.3–§5.5, §5.8).
public protocol ServerAttemptControl: Sendable {
    /// Begins an attempt at the server (§5.1): its id there, the authorize
    /// URL the browser opens, its expiry and the server's issuer. The proofs
    /// behind the request's challenges are in the vault before this is sent.
    func create(_ request: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse
    /// Redeems the accepted callback's code for a session (§5.2).
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(LoginServerError) -> ExchangeResponse
    func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse
    func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState
    func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError)
    func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> RevokeResponse
}

/// The attempt control of a protocol without one: every attempt is unknown to
/// its server (404 `ATTEMPT_UNKNOWN`), so nothing is owed there and an
/// uncertain attempt is retired.
public struct NoServerAttempts: ServerAttemptControl {
    public init() {}
    static let unknown = LoginServerError.refused(
        status: 404, code: .attemptUnknown, message: "the protocol keeps no attempt at the server",
        retryAfterSeconds: nil)
    public func create(_ request: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse {
        throw Self.unknown
    }
    public func exchange(attemptId: String, _ request: ExchangeRequest) async throws(LoginServerError)
        -> ExchangeResponse
    { throw Self.unknown }
    public func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse {
        throw Self.unknown
    }
    public func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState {
        throw Self.unknown
    }
    public func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError) { throw Self.unknown }
    public func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> RevokeResponse {
        throw Self.unknown
    }
}
