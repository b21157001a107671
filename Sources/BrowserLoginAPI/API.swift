/// The broker's wire API (docs/rpc.md): method and notification names, typed
/// params and results, views, error codes. Shared by the daemon, the CLI and
/// client libraries; it holds no behaviour.
public enum BrowserLoginAPI {
    /// `protocol` in `broker.info`: the version of this API.
    public static let protocolVersion = 1
}

/// The JSON-RPC methods of docs/rpc.md "Methods".
public enum RPCMethod: String, Sendable, CaseIterable {
    case brokerInfo = "broker.info"
    case clientsList = "clients.list"
    case loginStart = "login.start"
    case loginResume = "login.resume"
    case loginFinish = "login.finish"
    case loginCancel = "login.cancel"
    case loginStatus = "login.status"
    case loginAcknowledge = "login.acknowledge"
    case loginList = "login.list"
    case sessionGet = "session.get"
    case sessionWait = "session.wait"
    case sessionSignOut = "session.signOut"
    case sessionList = "session.list"
    case sessionUse = "session.use"
    case httpRequest = "http.request"
    case eventsSubscribe = "events.subscribe"
    case eventsUnsubscribe = "events.unsubscribe"
}

/// The notifications a subscribed connection receives (docs/rpc.md "Notifications").
public enum RPCNotification: String, Sendable, CaseIterable {
    case sessionChanged = "session.changed"
    case loginChanged = "login.changed"
}

/// `session.changed` params.
public struct SessionChanged: Codable, Sendable, Equatable {
    public var session: SessionView
    public init(session: SessionView) { self.session = session }
}

/// `login.changed` params.
public struct LoginChanged: Codable, Sendable, Equatable {
    public var attempt: AttemptView
    public init(attempt: AttemptView) { self.attempt = attempt }
}

/// The broker's application error codes (docs/rpc.md "Errors"), sent as
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
    /// An OAuth 2.0 / OpenID Connect provider could not be reached (docs/providers.md).
    case providerUnreachable = "PROVIDER_UNREACHABLE"
    /// The provider refused; its `error` is in `data.providerError`.
    case providerError = "PROVIDER_ERROR"
    /// The provider's ID token failed a check of OpenID Connect Core §3.1.3.7.
    case idTokenInvalid = "ID_TOKEN_INVALID"
    /// A device sign-in was asked of a client whose provider has no device authorization endpoint.
    case deviceFlowUnsupported = "DEVICE_FLOW_UNSUPPORTED"
    /// The session's DPoP key is gone from the vault (docs/providers.md): sign in again.
    case dpopKeyUnavailable = "DPOP_KEY_UNAVAILABLE"
    /// A pushed authorization request (RFC 9126) was refused or not answered; nothing was opened.
    case parFailed = "PAR_FAILED"
    /// An `account` that is not one of the client's accounts.
    case accountUnknown = "ACCOUNT_UNKNOWN"
    /// `login.start` with `addAccount` on a client that holds its 16 accounts.
    case accountLimit = "ACCOUNT_LIMIT"
}
