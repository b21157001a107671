import BrowserLoginProtocol

/// How an uncertain attempt was settled with the server (§7 Reconcile).
/// Acknowledge is allowed only once this is not `.none`.
public enum Resolution: String, Codable, Sendable {
    /// Not reconciled yet.
    case none
    /// The issued session was verified and adopted (the attempt is completed).
    case adopted
    /// The possibly issued session was revoked by proof.
    case revoked
    /// The server attempt was still pending or authorized and was cancelled.
    case cancelledAtServer
    /// The server no longer knows the attempt (404: retired).
    case retired
    /// The session it may have issued has passed its absolute expiry.
    case sessionExpired
}

/// An error recorded on an attempt that ended in a refusal. Public: it never
/// carries a secret.
public struct AttemptError: Codable, Sendable, Equatable {
    public var code: String
    public var message: String
    public var serverCode: String?
    public init(code: String, message: String, serverCode: String? = nil) {
        self.code = code
        self.message = message
        self.serverCode = serverCode
    }
}

/// Server-side work still owed for an attempt, retried on the reconcile timer.
public enum ServerFollowUp: String, Codable, Sendable {
    case none
    /// Cancel the server attempt, then acknowledge it.
    case cancel
    /// Revoke by proof whatever session the attempt issued, then acknowledge
    /// (a cancel that lost the race with a callback on another path).
    case revoke
    /// Acknowledge the server attempt (its session is settled).
    case acknowledge
}

/// One local attempt as the store keeps it. Holds no secret: the server's
/// attempt id is the only server value here (docs/protocol.md allows it in the
/// store; it never reaches logs or the RPC API).
public struct AttemptRecord: Sendable, Equatable {
    public var id: String
    public var client: String
    public var state: AttemptState
    public var serverAttemptId: String?
    public var returnURL: String
    public var issuer: String
    public var ephemeral: Bool
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    public var expiresAt: Timestamp?
    public var error: AttemptError?
    public var receiptIssuedAt: Timestamp?
    public var receiptSessionExpiresAt: Timestamp?
    public var resolution: Resolution
    public var followUp: ServerFollowUp
    /// Reconcile attempts so far (for back-off) and when to try next.
    public var reconcileTries: Int
    public var nextReconcileAt: Timestamp?
    /// BASE64URL(SHA-256(code)) of the callback that began the exchange, so a
    /// repeat of that callback is recognised without keeping the code.
    public var callbackDigest: String?

    public init(
        id: String, client: String, state: AttemptState, serverAttemptId: String? = nil, returnURL: String,
        issuer: String, ephemeral: Bool = false, createdAt: Timestamp, updatedAt: Timestamp? = nil,
        expiresAt: Timestamp? = nil, error: AttemptError? = nil, receiptIssuedAt: Timestamp? = nil,
        receiptSessionExpiresAt: Timestamp? = nil, resolution: Resolution = .none, followUp: ServerFollowUp = .none,
        reconcileTries: Int = 0, nextReconcileAt: Timestamp? = nil, callbackDigest: String? = nil
    ) {
        self.id = id
        self.client = client
        self.state = state
        self.serverAttemptId = serverAttemptId
        self.returnURL = returnURL
        self.issuer = issuer
        self.ephemeral = ephemeral
        self.createdAt = createdAt
        self.updatedAt = updatedAt ?? createdAt
        self.expiresAt = expiresAt
        self.error = error
        self.receiptIssuedAt = receiptIssuedAt
        self.receiptSessionExpiresAt = receiptSessionExpiresAt
        self.resolution = resolution
        self.followUp = followUp
        self.reconcileTries = reconcileTries
        self.nextReconcileAt = nextReconcileAt
        self.callbackDigest = callbackDigest
    }
}
