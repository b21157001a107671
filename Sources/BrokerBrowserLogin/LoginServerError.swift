import BrokerCore
import BrowserLoginProtocol

/// Why a call to a Browser Login server (docs/protocol.md) did not answer
/// with its success body: the wire error of Browser Login's routes and of its
/// server-kept attempts (mapped onto `ServerAttemptFailure`). The session calls of the
/// seam answer a `SignInFailure` instead (`signInFailure(_:)`). Messages
/// never hold a token, a proof, a code or the server's attempt id.
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

    /// docs/protocol.md §7: only a success or a well-formed 4xx error body is
    /// a definite answer; anything else may hide a processed request.
    public var isDefinite: Bool {
        switch self {
        case .refused: true
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

/// The session calls of Browser Login, whose refusals mean different things
/// (docs/protocol.md §5.6–§5.8).
public enum SessionCall: Sendable {
    case refresh
    case revoke
    case verify
}

extension LoginServerError {
    /// Browser Login's failure of a session call in the seam's terms
    /// (docs/protocol.md §7): only `notSent` certainly never left; only a
    /// well-formed 4xx error body is definite. A refresh refused as
    /// `SESSION_REVOKED`, `SESSION_EXPIRED` or `AUTH_USER_DISABLED`, and a
    /// session check refused as those or `UNAUTHENTICATED`, end the session
    /// with the server's code as the reason.
    public func signInFailure(_ call: SessionCall) -> SignInFailure {
        let detail = description
        switch self {
        case .notSent: return .notSent(brokerError(), detail: detail)
        case .noAnswer: return .unanswered(brokerError(), detail: detail)
        case .redirected, .malformed, .serverFailure, .responseTooLarge: return .indefinite(brokerError(), detail: detail)
        case .refused(_, let code, _, _):
            switch (call, code) {
            case (.refresh, .sessionRevoked), (.refresh, .sessionExpired), (.refresh, .authUserDisabled):
                let ending = SessionEnding(status: code == .sessionExpired ? .expired : .revoked, reason: code.rawValue)
                return .ended(
                    ending,
                    BrokerError(
                        .notSignedIn,
                        code == .authUserDisabled
                            ? "the account is disabled at the server (AUTH_USER_DISABLED); contact your administrator to enable it"
                            : "the session ended at the server (\(code.rawValue)); sign in again",
                        serverCode: code.rawValue),
                    detail: detail)
            case (.verify, .sessionRevoked), (.verify, .authUserDisabled), (.verify, .unauthenticated):
                return .ended(SessionEnding(status: .revoked, reason: code.rawValue), brokerError(), detail: detail)
            case (.verify, .sessionExpired):
                return .ended(SessionEnding(status: .expired, reason: code.rawValue), brokerError(), detail: detail)
            default:
                return .refused(brokerError(), detail: detail)
            }
        }
    }

    /// Browser Login's session check (§5.6) in the seam's terms: `TOKEN_EXPIRED`
    /// says the session lives and its access token does not.
    public static func verification(
        of session: IssuedSession, _ check: () async throws(LoginServerError) -> SessionInfoResponse
    ) async throws(SignInFailure) -> SessionCheck {
        do {
            return try await check().sessionId == session.sessionId ? .alive : .anotherSession
        } catch {
            if case .refused(_, .tokenExpired, _, _) = error { return .accessTokenExpired }
            throw error.signInFailure(.verify)
        }
    }
}

extension LoginServerError {
    /// Browser Login's failure of a call about a server-kept attempt (status,
    /// cancel, acknowledge, revoke by proof) in the seam's terms.
    public var attemptFailure: ServerAttemptFailure {
        let kind: ServerAttemptFailure.Kind
        switch self {
        case .refused(_, .attemptUnknown, _, _): kind = .unknown
        case .refused(_, .proofInvalid, _, _): kind = .proofRefused
        case .refused(_, .attemptAlreadyExchanged, _, _): kind = .alreadyExchanged
        case .refused(_, .attemptActive, _, _): kind = .stillActive
        case .refused: kind = .refused
        default: kind = .unanswered
        }
        return ServerAttemptFailure(kind, brokerError(), detail: description)
    }

    /// Browser Login's failure of an exchange (§5.2) in the seam's terms:
    /// only `notSent` certainly never left; only a well-formed 4xx error body
    /// is definite, and its code says what becomes of the attempt (§7).
    public var redeemFailure: LocalRedeemFailure {
        switch self {
        case .notSent: return .notSent(brokerError())
        case .refused(_, let code, _, _):
            let then: AfterRefusal
            switch code {
            // Only an INVALID_GRANT lets a callback kept during the exchange be tried (§7).
            case .invalidGrant: then = .waits(triesKept: true)
            case .attemptNotAuthorized, .rateLimited: then = .waits(triesKept: false)
            case .attemptCancelled: then = .cancelled
            case .attemptExpired: then = .expired
            // Someone else redeemed the code; the server revoked that session.
            case .attemptAlreadyExchanged: then = .redeemedElsewhere
            default: then = .fails
            }
            return .refused(brokerError(), then: then)
        default: return .uncertain(description, brokerError())
        }
    }
}
