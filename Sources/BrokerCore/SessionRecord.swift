import BrowserLoginProtocol

/// The public information the store keeps about one client's session. The
/// tokens and the session id live in the vault only.
public struct SessionRecord: Sendable, Equatable {
    public var client: String
    public var status: SessionStatus
    public var account: Account?
    public var authMethod: String?
    public var authenticatedAt: Timestamp?
    public var expiresAt: Timestamp?
    public var accessTokenExpiresAt: Timestamp?
    public var reason: String?
    /// The local attempt that issued it.
    public var attemptId: String?
    public var updatedAt: Timestamp
    /// A sign-out whose revoke at the server is still owed (the vault keeps
    /// the token under `kind=revoke` until it succeeds).
    public var revokePending: Bool
    /// When the broker last verified the session with `GET session`.
    public var verifiedAt: Timestamp?

    public init(
        client: String, status: SessionStatus, account: Account? = nil, authMethod: String? = nil,
        authenticatedAt: Timestamp? = nil, expiresAt: Timestamp? = nil, accessTokenExpiresAt: Timestamp? = nil,
        reason: String? = nil, attemptId: String? = nil, updatedAt: Timestamp, revokePending: Bool = false,
        verifiedAt: Timestamp? = nil
    ) {
        self.client = client
        self.status = status
        self.account = account
        self.authMethod = authMethod
        self.authenticatedAt = authenticatedAt
        self.expiresAt = expiresAt
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.reason = reason
        self.attemptId = attemptId
        self.updatedAt = updatedAt
        self.revokePending = revokePending
        self.verifiedAt = verifiedAt
    }

    public var view: SessionView {
        SessionView(
            client: client, status: status, account: account, authMethod: authMethod,
            authenticatedAt: authenticatedAt, expiresAt: expiresAt, reason: reason)
    }
}
