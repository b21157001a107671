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
    /// An OAuth provider's `error` (`invalid_grant` …), for `PROVIDER_ERROR`.
    public var providerError: String?

    public init(
        _ code: BrokerErrorCode, _ message: String, attemptId: String? = nil, serverCode: String? = nil,
        retryAfterSeconds: Int? = nil, providerError: String? = nil
    ) {
        self.code = code
        self.message = message
        self.attemptId = attemptId
        self.serverCode = serverCode
        self.retryAfterSeconds = retryAfterSeconds
        self.providerError = providerError
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
