import BrokerRPC
import BrowserLoginAPI

/// Every failure of a `BrowserLoginClient` call: a refusal of the broker
/// (its `data.code`, docs/rpc.md "Errors") or a local failure (no broker, a
/// lost connection, an answer that could not be read). Branch on `code`,
/// never on `message`; the message says what to do next and is safe to show.
public struct BrowserLoginError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable error code: the broker's `data.code`, or one of the local codes below.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ broker: BrokerErrorCode) { rawValue = broker.rawValue }
        public var description: String { rawValue }
        /// The broker's code as the API's enum (nil for a local code, or a code newer than this library).
        public var brokerCode: BrokerErrorCode? { BrokerErrorCode(rawValue: rawValue) }

        // Local codes: the call never got an answer from the broker.
        /// Nothing listens at the socket (it is missing, or stale).
        public static let brokerNotRunning = Code(rawValue: "BROKER_NOT_RUNNING")
        /// The socket is there but cannot be used (permission denied, path too long, another I/O error).
        public static let brokerUnreachable = Code(rawValue: "BROKER_UNREACHABLE")
        /// No socket path: none given, `$BROWSER_LOGIN_SOCKET` and `$XDG_RUNTIME_DIR` unset.
        public static let noSocket = Code(rawValue: "NO_SOCKET")
        /// The connection broke while a call was in flight (the broker stopped or restarted).
        public static let connectionLost = Code(rawValue: "CONNECTION_LOST")
        /// The broker did not answer in time.
        public static let timedOut = Code(rawValue: "TIMED_OUT")
        /// The task that made the call was cancelled (the broker may still finish what it was asked).
        public static let cancelled = Code(rawValue: "CANCELLED")
        /// The broker's answer could not be read (framing, JSON, or a view this library does not know).
        public static let protocolError = Code(rawValue: "PROTOCOL_ERROR")
        /// The broker refused the call's parameters (JSON-RPC `-32602`: for example an `http.request`
        /// path with `..`, or a header it does not allow).
        public static let invalidParams = Code(rawValue: "INVALID_PARAMS")
        /// The broker failed unexpectedly (JSON-RPC `-32603`); its log says why.
        public static let internalError = Code(rawValue: "INTERNAL_ERROR")

        // The broker's codes most apps branch on (every code arrives, known here or not).
        public static let clientUnknown = Code(.clientUnknown)
        public static let clientForbidden = Code(.clientForbidden)
        public static let alreadySignedIn = Code(.alreadySignedIn)
        public static let attemptUnknown = Code(.attemptUnknown)
        public static let notSignedIn = Code(.notSignedIn)
        public static let waitTimeout = Code(.waitTimeout)
        public static let browserFailed = Code(.browserFailed)
        public static let busy = Code(.busy)
        public static let accountUnknown = Code(.accountUnknown)
        public static let accountLimit = Code(.accountLimit)
    }

    /// What the broker adds to some errors (docs/rpc.md "Errors").
    public struct Details: Sendable, Equatable {
        /// The broker's id of the attempt concerned.
        public var attemptId: String?
        /// The login server's own code, for `SERVER_ERROR` (`AUTH_USER_DISABLED`, `RATE_LIMITED`, …).
        public var serverCode: String?
        /// A standard provider's OAuth `error`, for `PROVIDER_ERROR` (`invalid_grant`, …).
        public var providerError: String?
        /// When to try again, for `BUSY` and rate limits.
        public var retryAfterSeconds: Int?

        public init(
            attemptId: String? = nil, serverCode: String? = nil, providerError: String? = nil,
            retryAfterSeconds: Int? = nil
        ) {
            self.attemptId = attemptId
            self.serverCode = serverCode
            self.providerError = providerError
            self.retryAfterSeconds = retryAfterSeconds
        }
    }

    public var code: Code
    public var message: String
    public var data: Details

    public init(_ code: Code, _ message: String, data: Details = Details()) {
        self.code = code
        self.message = message
        self.data = data
    }

    /// A local failure (no broker, a lost connection, an unreadable answer,
    /// a cancelled task) rather than the broker's answer.
    public var isLocal: Bool {
        [Code.noSocket, .brokerNotRunning, .brokerUnreachable, .connectionLost, .timedOut, .protocolError, .cancelled]
            .contains(code)
    }

    /// `CODE: message`, with the server's or provider's code and the attempt.
    public var description: String {
        var text = "\(code): \(message)"
        if let server = data.serverCode { text += " [server: \(server)]" }
        if let provider = data.providerError { text += " [provider: \(provider)]" }
        if let attempt = data.attemptId { text += " (attempt \(attempt))" }
        return text
    }
}

extension BrowserLoginError {
    /// A JSON-RPC error response.
    init(_ error: RPCError) {
        let data = Details(
            attemptId: error.data?["attemptId"]?.stringValue, serverCode: error.data?["serverCode"]?.stringValue,
            providerError: error.data?["providerError"]?.stringValue,
            retryAfterSeconds: error.data?["retryAfterSeconds"]?.intValue.map { Int($0) })
        if let code = error.applicationCode {
            self.init(Code(rawValue: code), error.message, data: data)
            return
        }
        switch error.code {
        case .invalidParams: self.init(.invalidParams, error.message, data: data)
        case .internalError: self.init(.internalError, error.message, data: data)
        default: self.init(.protocolError, "the broker answered JSON-RPC error \(error.code): \(error.message)")
        }
    }

    /// A transport failure while connecting to `path`.
    init(connecting error: RPCClientError, path: String) {
        if error.meansNotRunning {
            self.init(
                .brokerNotRunning,
                "the broker is not running (no answer at \(path)); start it with 'systemctl --user start browser-login-broker.socket' or run 'browser-login-broker'"
            )
        } else {
            self.init(.brokerUnreachable, "cannot reach the broker at \(path): \(error)")
        }
    }

    /// A transport failure during a call.
    init(calling error: RPCClientError) {
        switch error {
        case .timedOut: self.init(.timedOut, "the broker did not answer in time")
        case .invalidMessage, .framing: self.init(.protocolError, "the broker's answer could not be read: \(error)")
        default: self.init(.connectionLost, "the broker connection failed: \(error)")
        }
    }

    static func unreadable(_ error: any Error) -> BrowserLoginError {
        BrowserLoginError(.protocolError, "the broker's answer could not be read: \(error)")
    }
}
