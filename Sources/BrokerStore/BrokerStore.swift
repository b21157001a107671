import BrokerCore
import BrowserLoginProtocol
import SQLiteSupport

/// The broker's SQLite state: attempts with their history of states, and
/// public session information. Never a secret (the server's attempt id is the
/// one server value kept, as docs/protocol.md allows).
///
/// Not `Sendable`: owned by the broker's engine actor, the only code that
/// touches it.
public final class BrokerStore {
    public static let migrations: [Migration] = [
        Migration(
            "001-attempts",
            """
            CREATE TABLE attempts (
                id TEXT PRIMARY KEY NOT NULL,
                client TEXT NOT NULL,
                state TEXT NOT NULL,
                server_attempt_id TEXT,
                return_url TEXT NOT NULL,
                issuer TEXT NOT NULL,
                ephemeral INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                expires_at INTEGER,
                error_code TEXT,
                error_message TEXT,
                error_server_code TEXT,
                receipt_issued_at INTEGER,
                receipt_session_expires_at INTEGER,
                resolution TEXT NOT NULL DEFAULT 'none',
                follow_up TEXT NOT NULL DEFAULT 'none',
                reconcile_tries INTEGER NOT NULL DEFAULT 0,
                next_reconcile_at INTEGER,
                callback_digest TEXT
            );
            CREATE UNIQUE INDEX attempts_client_server_id ON attempts (client, server_attempt_id)
                WHERE server_attempt_id IS NOT NULL;
            CREATE INDEX attempts_server_id ON attempts (server_attempt_id);
            CREATE INDEX attempts_state ON attempts (state, created_at);
            CREATE INDEX attempts_created ON attempts (created_at);
            CREATE INDEX attempts_follow_up ON attempts (follow_up) WHERE follow_up != 'none';
            CREATE TABLE attempt_history (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                attempt_id TEXT NOT NULL REFERENCES attempts (id) ON DELETE CASCADE,
                at INTEGER NOT NULL,
                from_state TEXT,
                to_state TEXT NOT NULL,
                code TEXT
            );
            CREATE INDEX attempt_history_attempt ON attempt_history (attempt_id, seq);
            """),
        Migration(
            "002-sessions",
            """
            CREATE TABLE sessions (
                client TEXT PRIMARY KEY NOT NULL,
                status TEXT NOT NULL,
                user_id TEXT,
                email TEXT,
                display_name TEXT,
                auth_method TEXT,
                authenticated_at INTEGER,
                expires_at INTEGER,
                access_token_expires_at INTEGER,
                reason TEXT,
                attempt_id TEXT,
                updated_at INTEGER NOT NULL,
                revoke_pending INTEGER NOT NULL DEFAULT 0,
                verified_at INTEGER
            );
            """),
        // A standard provider's metadata document (docs/providers.md), with its fetch time.
        Migration(
            "003-provider-metadata",
            """
            CREATE TABLE provider_metadata (
                issuer TEXT PRIMARY KEY NOT NULL,
                json TEXT NOT NULL,
                fetched_at INTEGER NOT NULL
            );
            """),
        // Several accounts per client (docs/rpc.md): a session per client and
        // account. Each client's one session becomes its current account; its
        // key ('' here: SQLite has no SHA-256) is filled in at start-up
        // (`fillAccountKey`), its vault items stay keyed by client only.
        Migration(
            "004-accounts",
            """
            CREATE TABLE account_sessions (
                client TEXT NOT NULL,
                account_key TEXT NOT NULL,
                status TEXT NOT NULL,
                user_id TEXT,
                email TEXT,
                display_name TEXT,
                auth_method TEXT,
                authenticated_at INTEGER,
                expires_at INTEGER,
                access_token_expires_at INTEGER,
                reason TEXT,
                attempt_id TEXT,
                updated_at INTEGER NOT NULL,
                revoke_pending INTEGER NOT NULL DEFAULT 0,
                verified_at INTEGER,
                is_current INTEGER NOT NULL DEFAULT 0,
                used_at INTEGER,
                vault_keyed INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (client, account_key)
            );
            INSERT INTO account_sessions (
                client, account_key, status, user_id, email, display_name, auth_method, authenticated_at, expires_at,
                access_token_expires_at, reason, attempt_id, updated_at, revoke_pending, verified_at, is_current,
                used_at, vault_keyed)
            SELECT client, '', status, user_id, email, display_name, auth_method, authenticated_at, expires_at,
                access_token_expires_at, reason, attempt_id, updated_at, revoke_pending, verified_at, 1, updated_at, 0
            FROM sessions;
            DROP TABLE sessions;
            ALTER TABLE account_sessions RENAME TO sessions;
            CREATE UNIQUE INDEX sessions_current ON sessions (client) WHERE is_current = 1;
            """),
    ]

    let db: Database

    /// Opens (creating) the store at `path` and runs its migrations.
    public init(path: String) throws {
        // A new file gives the pages that pruning frees back to the file system
        // (`compact()`); a file made before keeps its size and reuses them.
        db = try Database(path: path, incrementalVacuum: true)
        // 512 KiB of page cache instead of SQLite's default 2 MiB: what the broker
        // reads often (live attempts, sessions) is a few pages, and the file grows
        // by every ended attempt, which would otherwise fill the cache for good.
        try db.execute("PRAGMA cache_size = -512")
        try db.migrate(Self.migrations)
    }

    public func close() throws { try db.close() }

    /// Gives back the page cache (`Database.releaseMemory`); the broker calls it once it has gone quiet.
    public func releaseMemory() { db.releaseMemory() }

    // MARK: Attempts

    private static let attemptColumns = """
        id, client, state, server_attempt_id, return_url, issuer, ephemeral, created_at, updated_at, expires_at,
        error_code, error_message, error_server_code, receipt_issued_at, receipt_session_expires_at, resolution,
        follow_up, reconcile_tries, next_reconcile_at, callback_digest
        """

    private func arguments(_ r: AttemptRecord) -> [DatabaseBindable] {
        [
            r.id, r.client, r.state.rawValue, r.serverAttemptId, r.returnURL, r.issuer, r.ephemeral,
            r.createdAt.millisecondsSince1970, r.updatedAt.millisecondsSince1970, r.expiresAt?.millisecondsSince1970,
            r.error?.code, r.error?.message, r.error?.serverCode, r.receiptIssuedAt?.millisecondsSince1970,
            r.receiptSessionExpiresAt?.millisecondsSince1970, r.resolution.rawValue, r.followUp.rawValue,
            r.reconcileTries, r.nextReconcileAt?.millisecondsSince1970, r.callbackDigest,
        ]
    }

    private func record(_ row: Row) -> AttemptRecord {
        func ts(_ name: String) -> Timestamp? { row.int(name).map(Timestamp.init(millisecondsSince1970:)) }
        let error = row.string("error_code").map {
            AttemptError(code: $0, message: row.string("error_message") ?? "", serverCode: row.string("error_server_code"))
        }
        return AttemptRecord(
            id: row.string("id") ?? "", client: row.string("client") ?? "",
            state: AttemptState(rawValue: row.string("state") ?? "") ?? .failed,
            serverAttemptId: row.string("server_attempt_id"), returnURL: row.string("return_url") ?? "",
            issuer: row.string("issuer") ?? "", ephemeral: row.bool("ephemeral"),
            createdAt: ts("created_at") ?? Timestamp(millisecondsSince1970: 0), updatedAt: ts("updated_at"),
            expiresAt: ts("expires_at"), error: error, receiptIssuedAt: ts("receipt_issued_at"),
            receiptSessionExpiresAt: ts("receipt_session_expires_at"),
            resolution: Resolution(rawValue: row.string("resolution") ?? "") ?? .none,
            followUp: ServerFollowUp(rawValue: row.string("follow_up") ?? "") ?? .none,
            reconcileTries: Int(row.int("reconcile_tries") ?? 0), nextReconcileAt: ts("next_reconcile_at"),
            callbackDigest: row.string("callback_digest"))
    }

    /// Inserts a new attempt and its first history entry, in one transaction.
    public func insert(_ attempt: AttemptRecord) throws {
        try db.transaction {
            try db.run(
                "INSERT INTO attempts (\(Self.attemptColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                arguments: arguments(attempt))
            try appendHistory(attempt, from: nil)
        }
    }

    /// Deletes an attempt (and its history) that never left the broker: its
    /// proofs could not be kept, so nothing was ever sent for it.
    public func delete(attemptId: String) throws {
        _ = try db.run("DELETE FROM attempts WHERE id = ? AND state = 'starting'", attemptId)
    }

    /// Writes the attempt; when its state changed from `previous`, records
    /// the change in its history, in the same transaction.
    public func update(_ attempt: AttemptRecord, previous: AttemptState) throws {
        try db.transaction {
            var args = Array(arguments(attempt).dropFirst())
            args.append(attempt.id)
            try db.run(
                """
                UPDATE attempts SET client = ?, state = ?, server_attempt_id = ?, return_url = ?, issuer = ?,
                    ephemeral = ?, created_at = ?, updated_at = ?, expires_at = ?, error_code = ?, error_message = ?,
                    error_server_code = ?, receipt_issued_at = ?, receipt_session_expires_at = ?, resolution = ?,
                    follow_up = ?, reconcile_tries = ?, next_reconcile_at = ?, callback_digest = ?
                WHERE id = ?
                """, arguments: args)
            if previous != attempt.state { try appendHistory(attempt, from: previous) }
        }
    }

    private func appendHistory(_ attempt: AttemptRecord, from: AttemptState?) throws {
        try db.run(
            "INSERT INTO attempt_history (attempt_id, at, from_state, to_state, code) VALUES (?, ?, ?, ?, ?)",
            attempt.id, attempt.updatedAt.millisecondsSince1970, from?.rawValue, attempt.state.rawValue,
            attempt.error?.code)
    }

    public func attempt(id: String) throws -> AttemptRecord? {
        try db.queryOne("SELECT \(Self.attemptColumns) FROM attempts WHERE id = ?", id).map(record)
    }

    /// The attempts with this server attempt id (normally one; one per client at most).
    public func attempts(serverAttemptId: String) throws -> [AttemptRecord] {
        try db.query("SELECT \(Self.attemptColumns) FROM attempts WHERE server_attempt_id = ?", serverAttemptId)
            .map(record)
    }

    /// Attempts, newest first, optionally filtered by client and states.
    public func list(client: String? = nil, states: [AttemptState]? = nil, limit: Int = 1000) throws -> [AttemptRecord] {
        var sql = "SELECT \(Self.attemptColumns) FROM attempts"
        var conditions: [String] = []
        var args: [DatabaseBindable] = []
        if let client {
            conditions.append("client = ?")
            args.append(client)
        }
        if let states {
            if states.isEmpty { return [] }
            conditions.append("state IN (\(states.map { _ in "?" }.joined(separator: ", ")))")
            args.append(contentsOf: states.map(\.rawValue))
        }
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        args.append(limit)
        return try db.query(sql, arguments: args).map(record)
    }

    /// Attempts that have local or server work pending: waiting (expiry),
    /// exchanging, uncertain (reconcile) or with a server follow-up.
    public func attemptsNeedingWork() throws -> [AttemptRecord] {
        try db.query(
            """
            SELECT \(Self.attemptColumns) FROM attempts
            WHERE state IN ('starting', 'waiting', 'exchanging', 'uncertain') OR follow_up != 'none'
            ORDER BY created_at
            """
        ).map(record)
    }

    /// The number of attempts, optionally in these states.
    public func count(states: [AttemptState]? = nil) throws -> Int {
        if let states {
            let marks = states.map { _ in "?" }.joined(separator: ", ")
            return Int(
                try db.query("SELECT COUNT(*) AS n FROM attempts WHERE state IN (\(marks))", arguments: states.map(\.rawValue))
                    .first?.int("n") ?? 0)
        }
        return Int(try db.queryOne("SELECT COUNT(*) AS n FROM attempts")?.int("n") ?? 0)
    }

    /// The states of attempts that are over with nothing owed for them: they
    /// are kept for the retention time, then pruned. `uncertain` is not
    /// among them: an uncertain attempt stays until it is settled.
    public static let prunableStates: [AttemptState] = [
        .completed, .cancelled, .expired, .denied, .failed, .acknowledged,
    ]

    /// Attempts the broker deletes per transaction (`prune`).
    public static let pruneBatch = 500

    /// Deletes at most `limit` attempts (with their history) that ended
    /// before `cutoff` and have nothing owed (no server follow-up), oldest
    /// first; never the attempt a session names. Answers how many it deleted:
    /// fewer than `limit` means none is left to prune. One transaction, so a
    /// batch is a short pause for the engine, never a long one.
    public func prune(endedBefore cutoff: Timestamp, limit: Int) throws -> Int {
        let states = Self.prunableStates.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        return try db.transaction {
            try db.run(
                """
                DELETE FROM attempts WHERE id IN (
                    SELECT id FROM attempts
                    WHERE state IN (\(states)) AND created_at < ? AND updated_at < ? AND follow_up = 'none'
                        AND id NOT IN (SELECT attempt_id FROM sessions WHERE attempt_id IS NOT NULL)
                    ORDER BY created_at LIMIT ?)
                """, cutoff.millisecondsSince1970, cutoff.millisecondsSince1970, limit)
        }
    }

    /// Gives up to `pages` free pages back to the file system (a file made
    /// with incremental auto-vacuum; a no-op on an older file, which reuses
    /// its free pages instead).
    public func compact(pages: Int) throws {
        try db.execute("PRAGMA incremental_vacuum(\(max(0, pages)))")
    }

    /// Folds the write-ahead log into the file (tests and the benchmark
    /// measure the file's own size).
    public func checkpoint() throws { try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }

    /// The history of one attempt: (time, from, to, code), oldest first.
    public func history(attemptId: String) throws -> [(Timestamp, AttemptState?, AttemptState, String?)] {
        try db.query(
            "SELECT at, from_state, to_state, code FROM attempt_history WHERE attempt_id = ? ORDER BY seq", attemptId
        ).map { row in
            (
                Timestamp(millisecondsSince1970: row.int("at") ?? 0),
                row.string("from_state").flatMap(AttemptState.init(rawValue:)),
                AttemptState(rawValue: row.string("to_state") ?? "") ?? .failed, row.string("code")
            )
        }
    }

    // MARK: Sessions

    private static let sessionColumns = """
        client, account_key, status, user_id, email, display_name, auth_method, authenticated_at, expires_at,
        access_token_expires_at, reason, attempt_id, updated_at, revoke_pending, verified_at, is_current, used_at,
        vault_keyed
        """

    /// The client's current account's session.
    public func session(client: String) throws -> SessionRecord? {
        try db.queryOne("SELECT \(Self.sessionColumns) FROM sessions WHERE client = ? AND is_current = 1", client)
            .map(session)
    }

    /// One account's session.
    public func session(client: String, account: String) throws -> SessionRecord? {
        try db.queryOne(
            "SELECT \(Self.sessionColumns) FROM sessions WHERE client = ? AND account_key = ?", client, account
        ).map(session)
    }

    /// The client's sessions: the current one first, then the most recently used.
    public func sessions(client: String) throws -> [SessionRecord] {
        try db.query(
            """
            SELECT \(Self.sessionColumns) FROM sessions WHERE client = ?
            ORDER BY is_current DESC, COALESCE(used_at, updated_at) DESC, account_key
            """, client
        ).map(session)
    }

    /// Every session of every client.
    public func sessions() throws -> [SessionRecord] {
        try db.query("SELECT \(Self.sessionColumns) FROM sessions ORDER BY client, account_key").map(session)
    }

    private func session(_ row: Row) -> SessionRecord {
        func ts(_ name: String) -> Timestamp? { row.int(name).map(Timestamp.init(millisecondsSince1970:)) }
        var account: Account?
        if let userId = row.string("user_id") {
            account = Account(
                userId: userId, email: row.string("email") ?? "", displayName: row.string("display_name") ?? "")
        }
        return SessionRecord(
            client: row.string("client") ?? "", accountKey: row.string("account_key") ?? "",
            status: SessionStatus(rawValue: row.string("status") ?? "") ?? .signedOut,
            account: account, authMethod: row.string("auth_method"), authenticatedAt: ts("authenticated_at"),
            expiresAt: ts("expires_at"), accessTokenExpiresAt: ts("access_token_expires_at"),
            reason: row.string("reason"), attemptId: row.string("attempt_id"),
            updatedAt: ts("updated_at") ?? Timestamp(millisecondsSince1970: 0), revokePending: row.bool("revoke_pending"),
            verifiedAt: ts("verified_at"), current: row.bool("is_current"), usedAt: ts("used_at"),
            vaultKeyed: row.bool("vault_keyed"))
    }

    /// Saves one account's session. A current one makes the client's other
    /// accounts not current, in the same transaction.
    public func save(_ s: SessionRecord) throws {
        try db.transaction {
            if s.current {
                try db.run(
                    "UPDATE sessions SET is_current = 0 WHERE client = ? AND account_key != ? AND is_current = 1",
                    s.client, s.accountKey)
            }
            try db.run(
                """
                INSERT INTO sessions (\(Self.sessionColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (client, account_key) DO UPDATE SET status = excluded.status, user_id = excluded.user_id,
                    email = excluded.email, display_name = excluded.display_name, auth_method = excluded.auth_method,
                    authenticated_at = excluded.authenticated_at, expires_at = excluded.expires_at,
                    access_token_expires_at = excluded.access_token_expires_at, reason = excluded.reason,
                    attempt_id = excluded.attempt_id, updated_at = excluded.updated_at,
                    revoke_pending = excluded.revoke_pending, verified_at = excluded.verified_at,
                    is_current = excluded.is_current, used_at = excluded.used_at, vault_keyed = excluded.vault_keyed
                """,
                arguments: [
                    s.client, s.accountKey, s.status.rawValue, s.account?.userId, s.account?.email,
                    s.account?.displayName, s.authMethod, s.authenticatedAt?.millisecondsSince1970,
                    s.expiresAt?.millisecondsSince1970, s.accessTokenExpiresAt?.millisecondsSince1970, s.reason,
                    s.attemptId, s.updatedAt.millisecondsSince1970, s.revokePending, s.verifiedAt?.millisecondsSince1970,
                    s.current, s.usedAt?.millisecondsSince1970, s.vaultKeyed,
                ])
        }
    }

    /// Deletes one account's session row (nothing is owed for it any more).
    public func deleteSession(client: String, account: String) throws {
        _ = try db.run("DELETE FROM sessions WHERE client = ? AND account_key = ?", client, account)
    }

    /// Gives a session migrated from before accounts its key (`004-accounts`).
    public func fillAccountKey(client: String, key: String) throws {
        _ = try db.run(
            "UPDATE sessions SET account_key = ? WHERE client = ? AND account_key = '' AND NOT EXISTS "
                + "(SELECT 1 FROM sessions WHERE client = ? AND account_key = ?)", key, client, client, key)
    }

    // MARK: Provider metadata

    /// The cached metadata document of a provider, with its fetch time.
    public func providerMetadata(issuer: String) throws -> (json: String, fetchedAt: Timestamp)? {
        try db.queryOne("SELECT json, fetched_at FROM provider_metadata WHERE issuer = ?", issuer).flatMap { row in
            guard let json = row.string("json"), let at = row.int("fetched_at") else { return nil }
            return (json, Timestamp(millisecondsSince1970: at))
        }
    }

    public func saveProviderMetadata(issuer: String, json: String, fetchedAt: Timestamp) throws {
        try db.run(
            """
            INSERT INTO provider_metadata (issuer, json, fetched_at) VALUES (?, ?, ?)
            ON CONFLICT (issuer) DO UPDATE SET json = excluded.json, fetched_at = excluded.fetched_at
            """,
            arguments: [issuer, json, fetchedAt.millisecondsSince1970])
    }
}
