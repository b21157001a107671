import BrowserLoginProtocol

/// The public information the store keeps about one account's session of a
/// client. The tokens and the session id live in the vault only.
public struct SessionRecord: Sendable, Equatable {
    public var client: String
    /// The account (`AccountKeys.key`); empty only for a session row that
    /// predates accounts and has no user (never signed in).
    public var accountKey: String
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
    /// The client's current account: one row per client at most.
    public var current: Bool
    /// When it was last signed in, made current or used by `http.request`.
    public var usedAt: Timestamp?
    /// Whether its vault items carry the `account` attribute (a session
    /// signed in before accounts, or of a `single` client, has items keyed
    /// by client only, as before).
    public var vaultKeyed: Bool

    public init(
        client: String, accountKey: String = "", status: SessionStatus, account: Account? = nil,
        authMethod: String? = nil, authenticatedAt: Timestamp? = nil, expiresAt: Timestamp? = nil,
        accessTokenExpiresAt: Timestamp? = nil, reason: String? = nil, attemptId: String? = nil, updatedAt: Timestamp,
        revokePending: Bool = false, verifiedAt: Timestamp? = nil, current: Bool = true, usedAt: Timestamp? = nil,
        vaultKeyed: Bool = false
    ) {
        self.client = client
        self.accountKey = accountKey
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
        self.current = current
        self.usedAt = usedAt
        self.vaultKeyed = vaultKeyed
    }

    public var view: SessionView {
        SessionView(
            client: client, status: status, account: account, authMethod: authMethod,
            authenticatedAt: authenticatedAt, expiresAt: expiresAt, reason: reason,
            accountKey: accountKey.isEmpty ? nil : accountKey, current: current)
    }
}

/// Account keys (docs/rpc.md "Several accounts per client"): a digest of
/// the issuer (a Browser Login server's origin, or the provider's issuer)
/// and the user id (`sub`). Never made of a token, a session id or an attempt id.
public enum AccountKeys {
    public static func key(issuer: String, userId: String) -> String {
        "acct_" + String(Crypto.digest("browser-login account\n\(issuer)\n\(userId)").prefix(22))
    }

    /// Whether `text` may be an account key (checked before any lookup).
    public static func isWellFormed(_ text: String) -> Bool {
        text.utf8.count == 27 && text.hasPrefix("acct_") && Base64URL.isEncoded(String(text.dropFirst(5)), length: 22)
    }
}
