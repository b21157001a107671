import BrowserLoginProtocol

/// The public session of one client (docs/rpc.md "Public views").
public enum SessionStatus: String, Codable, Sendable {
    case signedOut
    case signingIn
    case signedIn
    case expired
    case revoked
}

public struct SessionView: Codable, Sendable, Equatable {
    public var client: String
    public var status: SessionStatus
    public var account: Account?
    public var authMethod: String?
    public var authenticatedAt: Timestamp?
    public var expiresAt: Timestamp?
    public var reason: String?
    /// Only in a `session.signOut` reply: false when the provider has no
    /// revocation endpoint (docs/providers.md), so only its own sign-out
    /// page ends the browser session there.
    public var revokedAtServer: Bool?
    /// The account this session is of (docs/rpc.md "Several accounts per
    /// client"): opaque, stable for one user at one server or issuer; nil
    /// when the client has never been signed in.
    public var accountKey: String?
    /// Whether this is the client's current account (always true in `single` mode).
    public var current: Bool

    public init(
        client: String, status: SessionStatus, account: Account? = nil, authMethod: String? = nil,
        authenticatedAt: Timestamp? = nil, expiresAt: Timestamp? = nil, reason: String? = nil,
        accountKey: String? = nil, current: Bool = true
    ) {
        self.client = client
        self.status = status
        self.account = account
        self.authMethod = authMethod
        self.authenticatedAt = authenticatedAt
        self.expiresAt = expiresAt
        self.reason = reason
        self.accountKey = accountKey
        self.current = current
    }

    private enum CodingKeys: String, CodingKey {
        case client, status, account, authMethod, authenticatedAt, expiresAt, reason, revokedAtServer, accountKey,
            current
    }

    /// A broker before accounts sends neither `accountKey` nor `current`: its one session is current.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        client = try c.decode(String.self, forKey: .client)
        status = try c.decode(SessionStatus.self, forKey: .status)
        account = try c.decodeIfPresent(Account.self, forKey: .account)
        authMethod = try c.decodeIfPresent(String.self, forKey: .authMethod)
        authenticatedAt = try c.decodeIfPresent(Timestamp.self, forKey: .authenticatedAt)
        expiresAt = try c.decodeIfPresent(Timestamp.self, forKey: .expiresAt)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        revokedAtServer = try c.decodeIfPresent(Bool.self, forKey: .revokedAtServer)
        accountKey = try c.decodeIfPresent(String.self, forKey: .accountKey)
        current = try c.decodeIfPresent(Bool.self, forKey: .current) ?? true
    }

    public static func signedOut(_ client: String) -> SessionView { SessionView(client: client, status: .signedOut) }

    // Explicit nulls: the view always has every member.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(client, forKey: .client)
        try c.encode(status, forKey: .status)
        try c.encode(account, forKey: .account)
        try c.encode(authMethod, forKey: .authMethod)
        try c.encode(authenticatedAt, forKey: .authenticatedAt)
        try c.encode(expiresAt, forKey: .expiresAt)
        try c.encode(reason, forKey: .reason)
        try c.encode(accountKey, forKey: .accountKey)
        try c.encode(current, forKey: .current)
        try c.encodeIfPresent(revokedAtServer, forKey: .revokedAtServer)
    }
}

/// The broker's attempt states (docs/rpc.md "Public views", docs/protocol.md).
public enum AttemptState: String, Codable, Sendable, CaseIterable {
    case starting
    case waiting
    case exchanging
    case completed
    case uncertain
    case cancelled
    case expired
    case denied
    case failed
    case acknowledged

    /// No event moves an attempt out of a terminal state but acknowledge.
    public var isTerminal: Bool {
        switch self {
        case .cancelled, .expired, .denied, .failed, .acknowledged: true
        default: false
        }
    }

    /// States that `browser-login status` shows without `--all`.
    public var needsAttention: Bool {
        switch self {
        case .starting, .waiting, .exchanging, .uncertain: true
        default: false
        }
    }
}

/// The public attempt view. `authorizeUrl` only in replies to
/// `login.start` and `login.resume`; `session` only in `login.finish` once
/// completed; `serverState` only from `login.status` with reconcile.
public struct AttemptView: Codable, Sendable, Equatable {
    public struct ReceiptView: Codable, Sendable, Equatable {
        public var issuedAt: Timestamp
        public var sessionExpiresAt: Timestamp?
        public init(issuedAt: Timestamp, sessionExpiresAt: Timestamp?) {
            self.issuedAt = issuedAt
            self.sessionExpiresAt = sessionExpiresAt
        }
    }
    public struct ErrorView: Codable, Sendable, Equatable {
        public var code: String
        public var message: String
        public var serverCode: String?
        public init(code: String, message: String, serverCode: String?) {
            self.code = code
            self.message = message
            self.serverCode = serverCode
        }
    }

    /// What a device sign-in (RFC 8628) shows the user: meant to cross the
    /// socket, unlike the device code, which never does.
    public struct DeviceView: Codable, Sendable, Equatable {
        public var userCode: String
        public var verificationUri: String
        public var verificationUriComplete: String?
        /// Seconds between polls.
        public var interval: Int
        public init(userCode: String, verificationUri: String, verificationUriComplete: String?, interval: Int) {
            self.userCode = userCode
            self.verificationUri = verificationUri
            self.verificationUriComplete = verificationUriComplete
            self.interval = interval
        }
    }

    public var attemptId: String
    public var client: String
    public var state: AttemptState
    public var createdAt: Timestamp
    public var expiresAt: Timestamp?
    public var updatedAt: Timestamp
    public var error: ErrorView?
    public var receipt: ReceiptView?
    /// True once an uncertain attempt has been settled with the server, so
    /// that `login.acknowledge` is allowed.
    public var reconciled: Bool
    public var authorizeUrl: String?
    public var session: SessionView?
    public var serverState: String?
    /// Only for a waiting device sign-in.
    public var device: DeviceView?
    /// How the browser returns to the broker: `scheme` (the client's custom
    /// scheme, through its URL handler) or `loopback` (a listener of the
    /// broker on 127.0.0.1 or [::1]); absent for a device sign-in. A client
    /// that lists both gets the one the broker chose (docs/desktop.md).
    public var returnVia: String?

    public init(
        attemptId: String, client: String, state: AttemptState, createdAt: Timestamp, expiresAt: Timestamp?,
        updatedAt: Timestamp, error: ErrorView?, receipt: ReceiptView?, reconciled: Bool
    ) {
        self.attemptId = attemptId
        self.client = client
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.updatedAt = updatedAt
        self.error = error
        self.receipt = receipt
        self.reconciled = reconciled
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(attemptId, forKey: .attemptId)
        try c.encode(client, forKey: .client)
        try c.encode(state, forKey: .state)
        try c.encode(createdAt, forKey: .createdAt)
        try c.encode(expiresAt, forKey: .expiresAt)
        try c.encode(updatedAt, forKey: .updatedAt)
        try c.encode(error, forKey: .error)
        try c.encode(receipt, forKey: .receipt)
        try c.encode(reconciled, forKey: .reconciled)
        try c.encodeIfPresent(authorizeUrl, forKey: .authorizeUrl)
        try c.encodeIfPresent(session, forKey: .session)
        try c.encodeIfPresent(serverState, forKey: .serverState)
        try c.encodeIfPresent(device, forKey: .device)
        try c.encodeIfPresent(returnVia, forKey: .returnVia)
    }
}
