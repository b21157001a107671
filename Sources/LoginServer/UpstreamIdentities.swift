import BrowserLoginProtocol
import SQLiteSupport

/// Durable upstream identities (docs/server.md "Accounts and provider
/// identities"): an upstream provider's account is its issuer and `sub`,
/// linked to one user on its first sign-in and resolved by them from then
/// on, whatever address the provider shows later. A link never moves to
/// another user, and a user is linked to at most one `sub` of an issuer.
enum UpstreamIdentities {
    static let migration = Migration(
        "0010-upstream-identities",
        """
        CREATE TABLE upstream_identities (
            issuer TEXT NOT NULL,
            subject TEXT NOT NULL,
            user_id TEXT NOT NULL REFERENCES users(id),
            provider TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT NOT NULL,
            PRIMARY KEY (issuer, subject)
        );
        CREATE INDEX upstream_identities_user ON upstream_identities(user_id, issuer);
        """)

    /// A sign-in whose address belongs to a user already linked to another
    /// account of the same provider (say, a recycled address): refused.
    static let conflict = ServerErrorCode("UPSTREAM_ACCOUNT_CONFLICT")

    /// The user the identity is linked to, its last use recorded; nil when it is not linked yet.
    static func linkedUser(_ db: Database, _ identity: UpstreamSubject, now: Int64) throws -> UserRecord? {
        guard
            let row = try db.queryOne(
                "SELECT user_id FROM upstream_identities WHERE issuer = ? AND subject = ?", identity.issuer, identity.subject)
        else { return nil }
        try db.run(
            "UPDATE upstream_identities SET last_used_at = ? WHERE issuer = ? AND subject = ?", now, identity.issuer,
            identity.subject)
        guard let user = try Records.user(db, id: row.text("user_id")) else {
            throw APIError(.internalError, "the linked user is missing")
        }
        return user
    }

    /// Links the identity to `user`; throws UPSTREAM_ACCOUNT_CONFLICT when
    /// the user is already linked to another account of this issuer.
    static func link(_ db: Database, _ identity: UpstreamSubject, to user: UserRecord, now: Int64) throws {
        if try db.queryOne(
            "SELECT subject FROM upstream_identities WHERE user_id = ? AND issuer = ?", user.id, identity.issuer) != nil
        {
            throw APIError(
                conflict,
                "this address belongs to an account already linked to another \(identity.provider) account; sign in "
                    + "with that one, or by email")
        }
        try db.run(
            """
            INSERT INTO upstream_identities (issuer, subject, user_id, provider, created_at, last_used_at)
            VALUES (?, ?, ?, ?, ?, ?)
            """, identity.issuer, identity.subject, user.id, identity.provider, now, now)
        Log.info("upstream identity linked", ["user.id": user.id, "provider": identity.provider])
    }
}

/// An upstream provider's account: the issuer and the ID token's `sub`.
struct UpstreamSubject: Sendable {
    var issuer: String
    var subject: String
    /// The provider's configured name (for logs and messages).
    var provider: String
}
