import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// An attempt record. `idHash` is SHA-256 of the attempt id: the id itself
/// is never stored.
struct AttemptRecord: Sendable {
    var idHash: String
    var clientId: String
    var returnUrl: String
    var codeChallenge: String
    var recoveryChallenge: String
    var state: ServerAttemptState
    var expiresAt: Int64
    var endedAt: Int64?
    var bindingHash: String?
    var browserSessionId: String?
    var codeHash: String?
    var wrongCodes: Int
    var sessionId: String?
    var issuedAt: Int64?
    var tokenDigest: String?
    /// §5.1: `"login"` (a fresh sign-in on the page) or nil.
    var prompt: String?
    /// §5.1: the address the page pre-fills, or nil.
    var loginHint: String?

    init(_ row: Row) {
        idHash = row.text("id_hash")
        clientId = row.text("client_id")
        returnUrl = row.text("return_url")
        codeChallenge = row.text("code_challenge")
        recoveryChallenge = row.text("recovery_challenge")
        state = ServerAttemptState(rawValue: row.text("state")) ?? .cancelled
        expiresAt = row.millis("expires_at")
        endedAt = row.int("ended_at")
        bindingHash = row.string("binding_hash")
        browserSessionId = row.string("browser_session_id")
        codeHash = row.string("code_hash")
        wrongCodes = Int(row.int("wrong_codes") ?? 0)
        sessionId = row.string("session_id")
        issuedAt = row.int("issued_at")
        tokenDigest = row.string("token_digest")
        prompt = row.string("prompt")
        loginHint = row.string("login_hint")
    }
}

struct UserRecord: Sendable {
    var id: String
    var email: String
    var displayName: String
    var disabled: Bool
    var account: Account { Account(userId: id, email: email, displayName: displayName) }

    init(_ row: Row) {
        id = row.text("id")
        email = row.text("email")
        displayName = row.text("display_name")
        disabled = row.bool("disabled")
    }
}

struct BrowserSessionRecord: Sendable {
    var id: String
    var userId: String
    var authMethod: String
    var authenticatedAt: Int64
    var expiresAt: Int64
    var revokedAt: Int64?
    /// A test account's session: the base address it was derived from (TestAccountSessions.swift).
    var testBase: String?

    init(_ row: Row) {
        id = row.text("id")
        userId = row.text("user_id")
        authMethod = row.text("auth_method")
        authenticatedAt = row.millis("authenticated_at")
        expiresAt = row.millis("expires_at")
        revokedAt = row.int("revoked_at")
        testBase = row.string("test_base")
    }
}

struct SessionRecord: Sendable {
    var id: String
    var userId: String
    var expiresAt: Int64
    var generation: Int64
    var rotatedAt: Int64
    var revokedAt: Int64?
    /// Inherited from the browser session that issued it.
    var testBase: String?

    init(_ row: Row) {
        id = row.text("id")
        userId = row.text("user_id")
        expiresAt = row.millis("expires_at")
        generation = row.int("generation") ?? 0
        rotatedAt = row.millis("rotated_at")
        revokedAt = row.int("revoked_at")
        testBase = row.string("test_base")
    }
}

/// Queries and updates shared by the routes and the admin commands. Every
/// function runs inside the caller's transaction.
enum Records {
    /// How long ended (cancelled, expired) attempts are kept for `status`.
    static let endedRetentionMillis: Int64 = 24 * 3_600_000

    static func hash(_ secret: String) -> String { Crypto.digest(secret) }

    /// The attempt named by `attemptId` as of `now`: a pending or authorized
    /// attempt past `expiresAt` becomes (and is recorded) expired; a
    /// completed one whose session has passed its absolute expiry, or an
    /// ended one past retention, is retired (deleted) and answers nil.
    static func attempt(_ db: Database, id attemptId: String, now: Int64) throws -> AttemptRecord? {
        let idHash = hash(attemptId)
        guard let row = try db.queryOne("SELECT * FROM attempts WHERE id_hash = ?", idHash) else { return nil }
        var attempt = AttemptRecord(row)
        switch attempt.state {
        case .pending, .authorized:
            if now >= attempt.expiresAt {
                try db.run(
                    "UPDATE attempts SET state = 'expired', ended_at = ? WHERE id_hash = ?", attempt.expiresAt, idHash)
                attempt.state = .expired
                attempt.endedAt = attempt.expiresAt
            }
        case .completed:
            let expiry = try attempt.sessionId.flatMap { try session(db, id: $0) }?.expiresAt ?? 0
            if now >= expiry {
                try db.run("DELETE FROM attempts WHERE id_hash = ?", idHash)
                return nil
            }
        case .cancelled, .expired:
            break
        }
        if attempt.state == .cancelled || attempt.state == .expired,
            now >= (attempt.endedAt ?? attempt.expiresAt) + endedRetentionMillis
        {
            try db.run("DELETE FROM attempts WHERE id_hash = ?", idHash)
            return nil
        }
        return attempt
    }

    static func cancel(_ db: Database, _ attempt: AttemptRecord, now: Int64) throws {
        try db.run("UPDATE attempts SET state = 'cancelled', ended_at = ? WHERE id_hash = ?", now, attempt.idHash)
    }

    static func user(_ db: Database, id: String) throws -> UserRecord? {
        try db.queryOne("SELECT * FROM users WHERE id = ?", id).map(UserRecord.init)
    }

    static func user(_ db: Database, email: String) throws -> UserRecord? {
        try db.queryOne("SELECT * FROM users WHERE email = ?", email).map(UserRecord.init)
    }

    static func session(_ db: Database, id: String) throws -> SessionRecord? {
        try db.queryOne("SELECT * FROM sessions WHERE id = ?", id).map(SessionRecord.init)
    }

    static func browserSession(_ db: Database, id: String) throws -> BrowserSessionRecord? {
        try db.queryOne("SELECT * FROM browser_sessions WHERE id = ?", id).map(BrowserSessionRecord.init)
    }

    static func revokeSession(_ db: Database, id: String, now: Int64) throws {
        try db.run("UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", now, id)
    }

    /// Revokes a browser session and every native session issued from it.
    /// On sign-out it also cancels the attempts it authorized that were not
    /// yet exchanged; when a user is disabled those stay, so that their
    /// exchange answers AUTH_USER_DISABLED (and cancels them then).
    static func revokeBrowserSession(_ db: Database, id: String, now: Int64, cancelAttempts: Bool = true) throws {
        try db.run("UPDATE browser_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", now, id)
        try db.run("UPDATE sessions SET revoked_at = ? WHERE browser_session_id = ? AND revoked_at IS NULL", now, id)
        if cancelAttempts {
            try db.run(
                "UPDATE attempts SET state = 'cancelled', ended_at = ? WHERE browser_session_id = ? AND state = 'authorized'",
                now, id)
        }
    }

    /// Disables a user: revokes all their browser and native sessions at once.
    /// Answers false when there is no such user.
    static func setDisabled(_ db: Database, email: String, disabled: Bool, now: Int64) throws -> Bool {
        guard let user = try user(db, email: email) else { return false }
        if disabled {
            try db.run("UPDATE users SET disabled = 1, disabled_at = ? WHERE id = ?", now, user.id)
            for row in try db.query(
                "SELECT id FROM browser_sessions WHERE user_id = ? AND revoked_at IS NULL", user.id)
            {
                try revokeBrowserSession(db, id: row.text("id"), now: now, cancelAttempts: false)
            }
            try db.run("UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL", now, user.id)
        } else {
            try db.run("UPDATE users SET disabled = 0, disabled_at = NULL WHERE id = ?", user.id)
        }
        return true
    }

    /// Deletes what has ended: retired attempts, used-up sign-in codes,
    /// expired tokens and sessions long past their expiry.
    static func sweep(_ db: Database, now: Int64) throws {
        try db.run(
            "DELETE FROM attempts WHERE state IN ('cancelled', 'expired') AND COALESCE(ended_at, expires_at) <= ?",
            now - endedRetentionMillis)
        try db.run(
            "DELETE FROM attempts WHERE state IN ('pending', 'authorized') AND expires_at <= ?", now - endedRetentionMillis)
        try db.run(
            "DELETE FROM attempts WHERE state = 'completed' AND session_id IN (SELECT id FROM sessions WHERE expires_at <= ?)",
            now)
        try db.run("DELETE FROM sign_in_codes WHERE expires_at <= ?", now)
        try db.run("DELETE FROM access_tokens WHERE expires_at <= ?", now - endedRetentionMillis)
        try db.run("DELETE FROM sessions WHERE expires_at <= ?", now - endedRetentionMillis)
        try db.run(
            "DELETE FROM browser_sessions WHERE expires_at <= ? AND id NOT IN (SELECT browser_session_id FROM sessions)",
            now - endedRetentionMillis)
        try db.run("DELETE FROM upstream_round_trips WHERE expires_at <= ?", now)
        try db.run("DELETE FROM passkey_ceremonies WHERE expires_at <= ?", now)
    }
}
