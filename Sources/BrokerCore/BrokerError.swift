/// The broker's application error codes (RPC.md "Error codes"), sent as
/// `data.code` of a JSON-RPC `-32000` error.
public enum BrokerErrorCode: String, Codable, Sendable, CaseIterable {
    case clientUnknown = "CLIENT_UNKNOWN"
    case alreadySignedIn = "ALREADY_SIGNED_IN"
    case attemptUnknown = "ATTEMPT_UNKNOWN"
    case attemptExpired = "ATTEMPT_EXPIRED"
    case attemptNotWaiting = "ATTEMPT_NOT_WAITING"
    case callbackInvalid = "CALLBACK_INVALID"
    case callbackMismatch = "CALLBACK_MISMATCH"
    case issuerMismatch = "ISSUER_MISMATCH"
    case accessDenied = "ACCESS_DENIED"
    case exchangeUncertain = "EXCHANGE_UNCERTAIN"
    case ackNotReconciled = "ACK_NOT_RECONCILED"
    case serverUnreachable = "SERVER_UNREACHABLE"
    case serverProtocolError = "SERVER_PROTOCOL_ERROR"
    case serverError = "SERVER_ERROR"
    case vaultUnavailable = "VAULT_UNAVAILABLE"
    case vaultLocked = "VAULT_LOCKED"
    case browserFailed = "BROWSER_FAILED"
    case ephemeralUnsupported = "EPHEMERAL_UNSUPPORTED"
    case waitTimeout = "WAIT_TIMEOUT"
    case notSignedIn = "NOT_SIGNED_IN"
    case responseTooLarge = "RESPONSE_TOO_LARGE"
    case clientForbidden = "CLIENT_FORBIDDEN"
    case storageUnavailable = "STORAGE_UNAVAILABLE"
    /// The broker's connection, subscription or memory budget is spent; try again.
    case busy = "BUSY"
}

/// An error that may reach an RPC client: a stable code, a message that
/// says what to do next, and public details (the broker's attempt id, the
/// server's code). Never a token, a URL, a path or SQL.
public struct BrokerError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: BrokerErrorCode
    public var message: String
    public var attemptId: String?
    public var serverCode: String?
    /// Seconds to wait, for a server's `RATE_LIMITED`.
    public var retryAfterSeconds: Int?

    public init(
        _ code: BrokerErrorCode, _ message: String, attemptId: String? = nil, serverCode: String? = nil,
        retryAfterSeconds: Int? = nil
    ) {
        self.code = code
        self.message = message
        self.attemptId = attemptId
        self.serverCode = serverCode
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(code.rawValue): \(message)" }

    public func with(attemptId: String) -> BrokerError {
        var copy = self
        copy.attemptId = attemptId
        return copy
    }

    public static func clientUnknown(_ client: String) -> BrokerError {
        BrokerError(
            .clientUnknown,
            "no client '\(client)' is configured; run 'browser-login clients' to list them, or add a file to ~/.config/browser-login/clients.d/"
        )
    }

    /// The state directory cannot be written now (full, read-only, an I/O error).
    public static func storageUnavailable(directory: String, cause: String) -> BrokerError {
        BrokerError(
            .storageUnavailable,
            "the broker's state directory \(directory) cannot be written (\(cause)); free space or make it writable: the broker carries on by itself once it can write again, and nothing is lost"
        )
    }

    public static func attemptUnknown() -> BrokerError {
        BrokerError(.attemptUnknown, "no such attempt; run 'browser-login status --all' to list attempts")
    }
}
