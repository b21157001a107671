import BrowserLoginProtocol
import Foundation
import PostgresSupport
import SQLiteSupport
import Synchronization

/// The server's schema. Named, ordered, never edited once shipped: add a new
/// migration instead. Secrets are stored only as SHA-256 digests
/// (base64url): attempt ids, codes, binding cookies, browser session
/// cookies, sign-in codes, access and refresh tokens.
///
/// The same migrations build the SQLite and the PostgreSQL schema (one
/// `schema_migrations` table on each). On PostgreSQL a migration's text is
/// `Migration.postgresSQL`: its `postgres:` text when it has one, else its
/// SQLite text with `INTEGER` mapped to `BIGINT` (PostgreSQL's INTEGER is 32
/// bits; times are milliseconds). New migrations are written portable
/// (BIGINT, TEXT, `ON CONFLICT`, no SQLite-only functions) and need neither.
enum Schema {
    static let migrations: [Migration] = [
        Migration(
            "0001-users",
            """
            CREATE TABLE users (
                id TEXT PRIMARY KEY NOT NULL,
                email TEXT NOT NULL UNIQUE,
                display_name TEXT NOT NULL,
                disabled INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL,
                disabled_at INTEGER
            );
            """),
        Migration(
            "0002-browser-sessions",
            """
            CREATE TABLE browser_sessions (
                id TEXT PRIMARY KEY NOT NULL,
                secret_hash TEXT NOT NULL UNIQUE,
                user_id TEXT NOT NULL REFERENCES users(id),
                auth_method TEXT NOT NULL,
                authenticated_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                revoked_at INTEGER
            );
            CREATE INDEX browser_sessions_user ON browser_sessions(user_id);
            """),
        Migration(
            "0003-sign-in-codes",
            """
            CREATE TABLE sign_in_codes (
                email TEXT PRIMARY KEY NOT NULL,
                code_hash TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                wrong_count INTEGER NOT NULL DEFAULT 0
            );
            """),
        Migration(
            "0004-attempts",
            """
            CREATE TABLE attempts (
                id_hash TEXT PRIMARY KEY NOT NULL,
                client_id TEXT NOT NULL,
                return_url TEXT NOT NULL,
                code_challenge TEXT NOT NULL,
                recovery_challenge TEXT NOT NULL,
                ephemeral INTEGER NOT NULL,
                state TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                ended_at INTEGER,
                binding_hash TEXT,
                browser_session_id TEXT,
                code_hash TEXT,
                authorized_at INTEGER,
                wrong_codes INTEGER NOT NULL DEFAULT 0,
                session_id TEXT,
                issued_at INTEGER,
                token_digest TEXT
            );
            """),
        Migration(
            "0005-sessions",
            """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY NOT NULL,
                user_id TEXT NOT NULL REFERENCES users(id),
                browser_session_id TEXT NOT NULL,
                client_id TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                authenticated_at INTEGER NOT NULL,
                auth_method TEXT NOT NULL,
                generation INTEGER NOT NULL,
                rotated_at INTEGER NOT NULL,
                revoked_at INTEGER
            );
            CREATE INDEX sessions_user ON sessions(user_id);
            CREATE INDEX sessions_browser ON sessions(browser_session_id);
            CREATE TABLE refresh_tokens (
                hash TEXT PRIMARY KEY NOT NULL,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                generation INTEGER NOT NULL
            );
            CREATE TABLE access_tokens (
                hash TEXT PRIMARY KEY NOT NULL,
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                expires_at INTEGER NOT NULL
            );
            """),
        Migration(
            "0006-notes",
            """
            CREATE TABLE notes (
                id TEXT PRIMARY KEY NOT NULL,
                user_id TEXT NOT NULL REFERENCES users(id),
                text TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX notes_user ON notes(user_id, created_at);
            """),
        EmailLinks.migration,
        Migration(
            "0008-signup",
            """
            CREATE TABLE members (
                email TEXT PRIMARY KEY NOT NULL,
                added_at BIGINT NOT NULL
            );
            CREATE TABLE invitations (
                id TEXT PRIMARY KEY NOT NULL,
                token_hash TEXT NOT NULL UNIQUE,
                email TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                used_at BIGINT,
                used_by TEXT,
                revoked_at BIGINT
            );
            CREATE TABLE waitlist (
                email TEXT PRIMARY KEY NOT NULL,
                requested_at BIGINT NOT NULL
            );
            """),
        // An upstream provider's round trip (UpstreamSignIn.swift): the digest
        // of the handle in the browser's cookie; state, nonce and verifier are
        // derived from the handle, never stored.
        Migration(
            "0009-upstream-round-trips",
            """
            CREATE TABLE upstream_round_trips (
                handle_hash TEXT PRIMARY KEY NOT NULL,
                provider TEXT NOT NULL,
                redirect_uri TEXT NOT NULL,
                attempt_hash TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL
            );
            CREATE INDEX upstream_round_trips_expiry ON upstream_round_trips(expires_at);
            """),
        // The rate limits' token buckets, shared by every instance on one
        // PostgreSQL database (`tokens` in thousandths). A server on SQLite
        // keeps its buckets in memory (one process owns the file) and leaves
        // this table empty.
        Migration(
            "pg-0001-rate-limits",
            """
            CREATE TABLE rate_limits (
                key TEXT PRIMARY KEY NOT NULL,
                tokens BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                allowed BIGINT NOT NULL
            );
            """),
        UpstreamIdentities.migration,
        TestAccountSessions.migration,
        Passkeys.migration,
        // §5.1's optional `prompt` ("login") and `loginHint` of a create request.
        Migration(
            "0012-attempt-prompt",
            """
            ALTER TABLE attempts ADD COLUMN prompt TEXT;
            ALTER TABLE attempts ADD COLUMN login_hint TEXT;
            """),
    ]
}

/// The server's database: one SQLite connection, or a bounded pool of
/// PostgreSQL connections. Every use is one transaction (`perform`) on the
/// caller's thread, with a `Database` the body runs its SQL on.
///
/// SQLite: the one connection sits behind a mutex and every transaction is
/// `BEGIN IMMEDIATE`, so transactions run one at a time and the routes'
/// read-then-write code is trivially serial. Other processes (the admin
/// subcommands) open their own connection; WAL and the busy timeout let
/// them run side by side.
///
/// PostgreSQL: several server instances share the database, so the at-most-
/// once rules (single-use codes, the exchange, refresh rotation, sign-in
/// code attempts, cancel/acknowledge) must hold across processes. Every
/// transaction runs at SERIALIZABLE: PostgreSQL then guarantees that the
/// committed transactions have the effect of some serial order, so the same
/// read-then-write code that is correct under SQLite's single writer is
/// correct here, including code added later that does not know about
/// locks. A transaction that loses a race fails with 40001 (or 40P01) and
/// nothing of it is kept; `perform` runs the whole body again on a fresh
/// snapshot (with a growing, jittered pause), for up to
/// `PostgresStore.retryBudgetMillis`. A body may therefore run more than
/// once: it must not have effects outside the database (mail is sent after
/// `perform` returns). Rate limits are single-statement upserts outside
/// these transactions (`takeRateToken`).
final class Store: Sendable {
    private enum Backend: Sendable {
        case sqlite(SQLiteStore)
        case postgres(PostgresStore)
    }
    private let backend: Backend
    /// The SQLite store's rate-limit buckets (one process owns an SQLite file).
    private let localLimiter = RateLimiter()
    let location: DatabaseLocation

    /// Opens (creating, for SQLite) and migrates the database at `location`.
    /// PostgreSQL: connects once to prove the database is reachable, and
    /// migrates under an advisory lock.
    init(
        location: DatabaseLocation, poolSize: Int = PostgresStore.defaultPoolSize,
        walRestartFrames: Int = Store.walRestartFrames
    ) throws {
        self.location = location
        switch location {
        case .sqlite(let path): backend = .sqlite(try SQLiteStore(path: path, walRestartFrames: walRestartFrames))
        case .postgres(let url): backend = .postgres(try PostgresStore(url: url, poolSize: poolSize))
        }
    }

    convenience init(path: String) throws { try self.init(location: .sqlite(path: path)) }

    /// SQLite: the WAL is started over once it holds this many frames (32 MiB of 4 KiB pages; `SQLiteStore`).
    static let walRestartFrames = 8_192

    /// Runs `body` in one transaction. An `APIError` the body throws still
    /// commits what it changed (a counted wrong code, a revoked session);
    /// only a database error rolls back. A database that cannot be reached
    /// answers 503 SERVICE_UNAVAILABLE with `Retry-After`; any other
    /// database error 500 INTERNAL_ERROR (logged, never sent).
    @discardableResult
    func perform<T: Sendable>(_ body: (Database) throws -> T) throws(APIError) -> T {
        let outcome: Result<T, APIError>
        do {
            outcome = try transaction(body)
        } catch let error as PostgresError where error.isUnavailable {
            Log.error("database unavailable", ["error": "\(error)"])
            throw Self.unavailable
        } catch let error as StoreUnavailable {
            Log.error("database unavailable", ["error": error.reason])
            throw Self.unavailable
        } catch {
            Log.error("database error", ["error": "\(error)"])
            throw APIError(.internalError, "the server could not complete the request")
        }
        return try outcome.get()
    }

    static var unavailable: APIError {
        APIError(.serviceUnavailable, "the server's database is unavailable; retry later", retryAfterSeconds: 2)
    }

    /// Runs `body` in one transaction; a database error is thrown as it is,
    /// an `APIError` from the body is answered (after committing) as
    /// `.failure`. For the admin commands, which print the database's error.
    func transaction<T>(_ body: (Database) throws -> T) throws -> Result<T, APIError> {
        switch backend {
        case .sqlite(let store): return try store.transaction(body)
        case .postgres(let store): return try store.transaction(body)
        }
    }

    /// True when a transaction started now would run at once, without
    /// waiting for others: the SQLite writer is idle and nothing is queued
    /// for it. Always false on PostgreSQL (a pooled connection's round trips
    /// over the network are a wait of their own).
    var writerIsIdle: Bool {
        switch backend {
        case .sqlite(let store): store.isIdle
        case .postgres: false
        }
    }

    /// True when the rate limits live in the database, shared by every
    /// instance (PostgreSQL); false when they are this process's, in memory
    /// (SQLite), and so may be taken inside a transaction's body.
    var sharesRateLimits: Bool {
        switch backend {
        case .sqlite: false
        case .postgres: true
        }
    }

    /// Takes one token from the rate-limit bucket `key`; answers nil when
    /// allowed, else the seconds until a token is available. SQLite: the
    /// in-memory buckets. PostgreSQL: the `rate_limits` table, one atomic
    /// upsert (at READ COMMITTED its row lock serializes the instances), so a
    /// limit holds across instances.
    func takeRateToken(_ key: String, limit: RateLimit, now: Int64) throws(APIError) -> Int? {
        switch backend {
        case .sqlite: return localLimiter.take(key, limit: limit, now: now)
        case .postgres(let store):
            do { return try store.takeRateToken(key, limit: limit, now: now) } catch let error as PostgresError
                where error.isUnavailable
            {
                Log.error("database unavailable", ["error": "\(error)"])
                throw Self.unavailable
            } catch {
                Log.error("database error", ["error": "\(error)"])
                throw APIError(.internalError, "the server could not complete the request")
            }
        }
    }

    /// Runs the periodic clean-up `body` (deletes of what has ended). On
    /// PostgreSQL it runs at READ COMMITTED: its deletes are idempotent and
    /// need no serial order, and at SERIALIZABLE their table scans would make
    /// every request writing those tables meanwhile run again; and only one
    /// instance sweeps at a time (a transaction advisory lock; the others skip
    /// that round). Errors are logged, never thrown.
    func sweep(_ body: (Database) throws -> Void) {
        do {
            switch backend {
            case .sqlite(let store): _ = try store.transaction(body).get()
            case .postgres(let store): try store.sweep(body)
            }
        } catch {
            Log.error("the periodic clean-up failed", ["error": "\(error)"])
        }
    }

    func close() {
        switch backend {
        case .sqlite(let store): store.close()
        case .postgres(let store): store.close()
        }
    }
}

/// A pooled connection found dead at the start of a transaction.
private struct StaleConnection: Error {
    var error: PostgresError
}

/// The database could not be used in time (no pooled connection free, or
/// the retries of a contended transaction ran out). `reason` is for logs.
struct StoreUnavailable: Error {
    var reason: String
}

/// Runs `body` with `database`, keeping an `APIError` it throws as `.failure`.
private func capture<T>(_ database: Database, _ body: (Database) throws -> T) throws -> Result<T, APIError> {
    do { return .success(try body(database)) } catch let error as APIError { return .failure(error) }
}

/// The SQLite store: one connection, one writer at a time, with group commit.
///
/// Callers queue their transactions; whichever caller finds no batch
/// running becomes the writer: it takes everything queued (at most
/// `maximumBatch`), runs the bodies one after another inside ONE `BEGIN
/// IMMEDIATE` transaction, each in a savepoint of its own (a body that throws
/// a database error rolls back to its savepoint: only its own changes are
/// lost), commits once, and only then hands every caller its answer. The
/// bodies still run one at a time in queue order, so the routes'
/// read-then-write code stays trivially serial (exactly-once holds as with a
/// plain mutex), and an answer is never given for something not committed:
/// when the commit fails, every transaction of the batch fails. Then the
/// next caller waiting, if any, becomes the writer for the next batch (its
/// own transaction is the first queued), and this one returns.
///
/// Checkpoints of the WAL run off that path: automatic checkpoints are off
/// on the writer's connection, and every `checkpointEvery` transactions a
/// passive checkpoint runs on a second connection of its own, on a queue of
/// its own, side by side with the writers (its `fsync` used to stall every
/// request behind the one commit that ran it). A passive checkpoint copies
/// only the frames committed before it began, and under a steady load the
/// writers always commit more meanwhile, so the WAL was never all copied
/// when a writer began: SQLite starts the WAL over from its first frame only
/// then, and the file grew without end (800 MB in the bench's half minute),
/// every commit appending to it. So when a background checkpoint finds the
/// WAL at `walRestartFrames` frames or more, the next writer first copies
/// the frames committed during it, on its own connection before its batch
/// (`finishCheckpoint`): its batch then starts the WAL over. That copy and
/// its two `fsync`s stall the writers (3 ms at the median under the bench's
/// load), hence the threshold rather than every checkpoint: the WAL file
/// stays near `walRestartFrames` pages.
///
/// `@unchecked Sendable`: the connection and its wrapper are used only by
/// the current writer, under `connectionLock`; the queue and the writer
/// flag only under `queueLock`. A `Job` (and the caller's closure in it) is
/// touched by its caller until queued, then by the writer until its
/// `semaphore` is signalled, then by its caller again: the semaphore orders
/// those uses, and the caller is blocked in between.
private final class SQLiteStore: @unchecked Sendable {
    /// One queued transaction. `run` stores the body's outcome in the caller's frame.
    private final class Job {
        /// Cleared by the writer before the caller is woken: the caller's closure never outlives its call.
        var run: ((Database) throws -> Void)?
        var failure: (any Error)?
        var done = false
        let semaphore = DispatchSemaphore(value: 0)
        init(_ run: @escaping (Database) throws -> Void) { self.run = run }
    }

    static let maximumBatch = 64
    static let checkpointEvery = 512

    private let connectionLock = NSLock()
    private let database: SQLiteSupport.Database
    private let wrapper: Database
    private let queueLock = NSLock()
    private var queue: [Job] = []
    private var writing = false
    private var sinceCheckpoint = 0
    private var checkpointing = false
    /// A background checkpoint found the WAL long; the next writer copies what was committed meanwhile.
    private var checkpointToFinish = false
    private var closed = false
    private let path: String
    private let walRestartFrames: Int
    private let checkpoints = DispatchQueue(label: "browser-login-server.checkpoint")
    /// The checkpoints' own connection, used only on `checkpoints`.
    private var checkpointConnection: SQLiteSupport.Database?

    init(path: String, walRestartFrames: Int) throws {
        self.walRestartFrames = walRestartFrames
        let db = try SQLiteSupport.Database(path: path)
        try db.migrate(Schema.migrations)
        if path != ":memory:" { try db.execute("PRAGMA wal_autocheckpoint=0") }
        database = db
        wrapper = Database(.sqlite(db))
        self.path = path
    }

    func transaction<T>(_ body: (Database) throws -> T) throws -> Result<T, APIError> {
        try withoutActuallyEscaping(body) { body in
            var outcome: Result<T, APIError>?
            let job = Job { db in outcome = try capture(db, body) }
            try submit(job)
            guard let outcome else { throw StoreUnavailable(reason: "a queued transaction did not run") }
            return outcome
        }
    }

    /// No batch is running and none is queued (a moment's answer: another
    /// caller may start one right after).
    var isIdle: Bool { queueLock.withLock { !writing && queue.isEmpty } }

    /// Queues `job` and returns when it is committed (or throws its failure).
    private func submit(_ job: Job) throws {
        let leads = queueLock.withLock { () -> Bool in
            queue.append(job)
            if writing { return false }
            writing = true
            return true
        }
        if !leads {
            // Woken when done, or when made the writer (the batch before ours ended).
            job.semaphore.wait()
        }
        while !job.done {
            let (batch, finishing) = queueLock.withLock { () -> ([Job], Bool) in
                let taken = Array(queue.prefix(Self.maximumBatch))
                queue.removeFirst(taken.count)
                let finishing = checkpointToFinish
                checkpointToFinish = false
                return (taken, finishing)
            }
            connectionLock.withLock {
                if finishing { finishCheckpoint() }
                runBatch(batch[...])
            }
            for done in batch { done.run = nil }
            for other in batch where other !== job {
                other.done = true
                other.semaphore.signal()
            }
            job.done = true
            checkpointIfDue(committed: batch.count)
        }
        // Hand the writer's part to the next caller waiting, if any.
        let next = queueLock.withLock { () -> Job? in
            guard let first = queue.first else {
                writing = false
                return nil
            }
            return first
        }
        next?.semaphore.signal()
        if let failure = job.failure { throw failure }
    }

    /// Runs `batch` in one transaction, each job in a savepoint; sets each one's `failure`.
    /// The statements that open and close them are prepared once (`run`), not parsed each time.
    private func runBatch(_ batch: ArraySlice<Job>) {
        guard !batch.isEmpty else { return }
        do {
            try database.run("BEGIN IMMEDIATE")
        } catch {
            for job in batch { job.failure = error }
            return
        }
        var index = batch.startIndex
        while index < batch.endIndex {
            let job = batch[index]
            index += 1
            do {
                try database.run("SAVEPOINT job")
                try job.run?(wrapper)
                try database.run("RELEASE job")
            } catch {
                job.failure = error
                do {
                    try database.execute("ROLLBACK TO job")
                    try database.execute("RELEASE job")
                } catch {
                    // The whole transaction is gone (SQLite rolls back on some errors, e.g. a full
                    // disk): what ran before this job is lost too; the rest run in a new one.
                    try? database.execute("ROLLBACK")
                    for earlier in batch[batch.startIndex..<(index - 1)] where earlier.failure == nil {
                        earlier.failure = error
                    }
                    runBatch(batch[index...])
                    return
                }
            }
        }
        do {
            try database.run("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            for job in batch where job.failure == nil { job.failure = error }
        }
    }

    /// Every `checkpointEvery` transactions, a passive checkpoint on the checkpoints' queue.
    private func checkpointIfDue(committed: Int) {
        guard path != ":memory:" else { return }
        let due = queueLock.withLock { () -> Bool in
            sinceCheckpoint += committed
            guard sinceCheckpoint >= Self.checkpointEvery, !checkpointing, !closed else { return false }
            sinceCheckpoint = 0
            checkpointing = true
            return true
        }
        guard due else { return }
        checkpoints.async { [self] in
            var frames: Int64 = 0
            do {
                if checkpointConnection == nil { checkpointConnection = try SQLiteSupport.Database(path: path) }
                // One row: busy, log (the WAL's frames), checkpointed (those copied).
                frames = try checkpointConnection?.queryOne("PRAGMA wal_checkpoint(PASSIVE)")?.int("log") ?? 0
            } catch {
                Log.warning("a checkpoint of the database failed", ["error": "\(error)"])
            }
            queueLock.withLock {
                checkpointing = false
                if frames >= Int64(walRestartFrames) { checkpointToFinish = true }
            }
        }
    }

    /// On the writer's connection, between batches (under `connectionLock`):
    /// a passive checkpoint of the frames committed since the background one
    /// began. With every frame copied and no transaction open, the next
    /// batch's `BEGIN IMMEDIATE` starts the WAL over from its first frame.
    private func finishCheckpoint() {
        do {
            try database.execute("PRAGMA wal_checkpoint(PASSIVE)")
        } catch {
            Log.warning("a checkpoint of the database failed", ["error": "\(error)"])
        }
    }

    func close() {
        queueLock.withLock { closed = true }
        checkpoints.sync {
            try? checkpointConnection?.close()
            checkpointConnection = nil
        }
        connectionLock.withLock { try? database.close() }
    }
}

/// The PostgreSQL store: at most `poolSize` connections, made on demand and
/// kept while they work. A connection that fails (the server restarted, the
/// network dropped) is closed and replaced on the next use, so the server
/// recovers by itself when the database comes back.
///
/// `@unchecked Sendable`: the idle connections (not Sendable) are touched
/// only under `lock`; a connection taken out of `idle` is used by exactly
/// one thread until it is put back or closed. `slots` bounds the number in
/// use at once.
final class PostgresStore: @unchecked Sendable {
    static let defaultPoolSize = 16
    /// Every statement (and lock wait) ends after this long.
    static let statementTimeoutMillis = 5_000
    /// How long a request waits for a free connection before 503.
    static let poolWaitMillis = 5_000
    /// How long serialization failures are retried before 503.
    static let retryBudgetMillis: Int64 = 20_000

    private let url: String
    private let poolSize: Int
    private let lock = NSLock()
    private var idle: [PostgresConnection] = []
    private var closed = false
    private let slots: DispatchSemaphore

    init(url: String, poolSize: Int) throws {
        self.url = url
        self.poolSize = max(1, poolSize)
        slots = DispatchSemaphore(value: max(1, poolSize))
        let first = try Self.connect(url)
        // Migrations may wait for another instance's (holding the advisory lock): no statement timeout there.
        try first.execute("SET statement_timeout = 0; SET lock_timeout = 0")
        try first.migrate(Schema.migrations)
        try first.execute(
            "SET statement_timeout = \(Self.statementTimeoutMillis); SET lock_timeout = \(Self.statementTimeoutMillis)")
        idle.append(first)
    }

    private func checkout() throws -> PostgresConnection {
        let reused: PostgresConnection? = lock.withLock { idle.popLast() }
        if let reused, reused.isOpen { return reused }
        return try Self.connect(url)
    }

    /// A new connection for the pool. Every query of the server looks rows up by
    /// key; a sequential scan (the planner's choice while a table is small) would
    /// take a predicate lock on the whole table at SERIALIZABLE, and make every
    /// concurrent writer of that table a serialization conflict, run again.
    /// Index scans lock only the rows (pages) they read.
    private static func connect(_ url: String) throws -> PostgresConnection {
        let connection = try PostgresConnection(url: url, statementTimeoutMillis: statementTimeoutMillis)
        try connection.execute("SET enable_seqscan = off")
        return connection
    }

    private func checkin(_ connection: PostgresConnection) {
        guard connection.isOpen else { return connection.close() }
        let keep = lock.withLock { () -> Bool in
            guard !closed else { return false }
            idle.append(connection)
            return true
        }
        if !keep { connection.close() }
    }

    /// Runs `body` with a pooled connection (waiting at most `poolWaitMillis` for one).
    private func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        guard slots.wait(timeout: .now() + .milliseconds(Self.poolWaitMillis)) == .success else {
            throw StoreUnavailable(reason: "no database connection free within \(Self.poolWaitMillis) ms")
        }
        defer { slots.signal() }
        let connection = try checkout()
        do {
            let result = try body(connection)
            checkin(connection)
            return result
        } catch {
            checkin(connection)
            throw error
        }
    }

    func transaction<T>(_ body: (Database) throws -> T) throws -> Result<T, APIError> {
        let started = Timestamp.now().millisecondsSince1970
        var round = 0
        var reconnects = 0
        while true {
            do {
                return try withConnection { connection in
                    do { try connection.execute("BEGIN ISOLATION LEVEL SERIALIZABLE") } catch let error as PostgresError
                        where error.connectionLost
                    {
                        // A pooled connection that died while idle (the server restarted): nothing was sent.
                        throw StaleConnection(error: error)
                    }
                    do {
                        let result = try capture(Database(.postgres(connection)), body)
                        try connection.commit()
                        return result
                    } catch {
                        if connection.isOpen { try? connection.execute("ROLLBACK") }
                        throw error
                    }
                }
            } catch let stale as StaleConnection {
                // Try the next (or a new) connection, at most once per pooled one.
                reconnects += 1
                guard reconnects <= poolSize else { throw stale.error }
            } catch let error as PostgresError where error.isRetryable {
                round += 1
                Log.debug("transaction lost a race; running it again", ["round": "\(round)", "sqlstate": error.sqlState])
                let elapsed = Timestamp.now().millisecondsSince1970 - started
                guard elapsed < Self.retryBudgetMillis else {
                    throw StoreUnavailable(reason: "a contended transaction was retried \(round) times in \(elapsed) ms")
                }
                // A growing, jittered pause: the contenders spread out instead of colliding again.
                usleep(UInt32.random(in: 0...UInt32(min(50, 1 + round * 2) * 1000)))
            }
        }
    }

    /// The key of the advisory lock one instance sweeps under ("blsweep").
    static let sweepLock: Int64 = 0x626C_7377_6565_70

    func sweep(_ body: (Database) throws -> Void) throws {
        try withConnection { connection in
            try connection.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            do {
                let locked = try connection.query("SELECT pg_try_advisory_xact_lock(\(Self.sweepLock)) AS locked", arguments: [])
                if locked.first?.bool("locked") == true { try body(Database(.postgres(connection))) }
                try connection.commit()
            } catch {
                if connection.isOpen { try? connection.execute("ROLLBACK") }
                throw error
            }
        }
    }

    func takeRateToken(_ key: String, limit: RateLimit, now: Int64) throws -> Int? {
        let burst = Int64(limit.burst) * 1000
        let perMinute = Int64(limit.perMinute)
        // One statement, its own transaction at READ COMMITTED: ON CONFLICT DO
        // UPDATE locks the row, so concurrent takes on one key queue up and
        // each sees the previous one's result. `tokens` is in thousandths;
        // `perMinute` tokens per 60000 ms is `perMinute / 60` thousandths per ms.
        let refilled = "LEAST($2, r.tokens + GREATEST(0, $3 - r.updated_at) * $4 / 60)"
        var reconnects = 0
        var taken: Row?? = nil
        while taken == nil {
            do { taken = try take() } catch let error as PostgresError
                where error.connectionLost && error.operation != "connect" && reconnects < poolSize
            {
                // A pooled connection that died while idle: try the next (or a new) one. (Should the
                // statement have been applied before the connection broke, one token was taken twice.)
                reconnects += 1
            }
        }
        func take() throws -> Row? {
            try withConnection { connection in
                try connection.query(
                    """
                    INSERT INTO rate_limits AS r (key, tokens, updated_at, allowed) VALUES ($1, $2 - 1000, $3, 1)
                    ON CONFLICT (key) DO UPDATE SET
                        tokens = \(refilled) - CASE WHEN \(refilled) >= 1000 THEN 1000 ELSE 0 END,
                        allowed = CASE WHEN \(refilled) >= 1000 THEN 1 ELSE 0 END,
                        updated_at = GREATEST(r.updated_at, $3)
                    RETURNING tokens, allowed
                    """, arguments: [.text(key), .integer(burst), .integer(now), .integer(perMinute)]
                ).first
            }
        }
        guard let row = taken ?? nil, row.int("allowed") == 0 else { return nil }
        let missing = 1000 - (row.int("tokens") ?? 0)
        let waitMillis = Double(missing) * 60 / Double(max(1, perMinute))
        return max(1, Int((waitMillis / 1000).rounded(.up)))
    }

    func close() {
        let connections = lock.withLock { () -> [PostgresConnection] in
            closed = true
            defer { idle.removeAll() }
            return idle
        }
        connections.forEach { $0.close() }
    }
}

/// The server secret that keys the HMAC derivations (codes, tokens): 32
/// random bytes in a file of mode 0600, made on first start.
///
/// Instances sharing one PostgreSQL database must share the secret too, so
/// that a refresh successor or a callback code repeated inside its window is
/// the same whichever instance answers: give each the same `secretKey` file,
/// or the same `BROWSER_LOGIN_SERVER_SECRET` (base64url of 32 bytes, e.g.
/// `head -c32 /dev/urandom | basenc --base64url | tr -d =`), which wins over
/// the file. A PostgreSQL server refuses to start with neither.
enum ServerSecret {
    static let environmentVariable = "BROWSER_LOGIN_SERVER_SECRET"

    static func load(_ configuration: ServerConfiguration, location: DatabaseLocation) throws -> [UInt8] {
        if let text = ProcessInfo.processInfo.environment[environmentVariable] {
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let bytes = Base64URL.decode(trimmed.replacingOccurrences(of: "=", with: "")), bytes.count == 32 else {
                throw ConfigurationError(
                    field: environmentVariable, rule: "base64url-32",
                    message: "the secret is the base64url encoding of exactly 32 bytes (43 characters)")
            }
            return bytes
        }
        if case .postgres = location, configuration.secretKeyPath == nil {
            throw ConfigurationError(
                field: "secretKey", rule: "required",
                message: "with PostgreSQL, every instance needs the same secret: set secretKey (--secret-key) "
                    + "to a file they share, or \(environmentVariable)")
        }
        return try loadOrCreate(path: configuration.resolvedSecretKeyPath)
    }

    static func loadOrCreate(path: String) throws -> [UInt8] {
        if let data = FileManager.default.contents(atPath: path) {
            let bytes = [UInt8](data)
            guard bytes.count == 32 else {
                throw ConfigurationError(field: "secretKey", rule: "length", message: "the key file holds exactly 32 bytes")
            }
            return bytes
        }
        let bytes = try Crypto.randomBytes(32)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else {
            throw ConfigurationError(
                field: "secretKey", rule: "writable", message: "cannot create the key file (errno \(errno))")
        }
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, 32) }
        guard written == 32, fsync(fd) == 0 else {
            throw ConfigurationError(field: "secretKey", rule: "writable", message: "cannot write the key file")
        }
        return bytes
    }
}
