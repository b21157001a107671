import BrowserLoginProtocol
import Foundation
import SQLiteSupport
import Synchronization

/// The server's schema. Named, ordered, never edited once shipped: add a new
/// migration instead. Secrets are stored only as SHA-256 digests
/// (base64url): attempt ids, codes, binding cookies, browser session
/// cookies, sign-in codes, access and refresh tokens.
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
    ]
}

/// The one SQLite connection of a server process, behind a mutex: every use
/// is one transaction on the caller's thread, so no two threads touch the
/// connection at once. Other processes (the admin subcommands) open their
/// own connection; WAL and the busy timeout let them run side by side.
///
/// `@unchecked Sendable`: the only stored state is the non-Sendable
/// `Database`, and it is touched only inside `lock.withLock` (in `perform`
/// and `close`), so at most one thread uses it at a time. The compiler cannot
/// see that because the connection is passed to the caller's closure.
final class Store: @unchecked Sendable {
    private let lock = Mutex<Void>(())
    private let database: Database

    init(path: String) throws {
        let db = try Database(path: path)
        try db.migrate(Schema.migrations)
        database = db
    }

    /// Runs `body` in one transaction. An `APIError` the body throws still
    /// commits what it changed (a counted wrong code, a revoked session);
    /// only a database error rolls back.
    @discardableResult
    func perform<T: Sendable>(_ body: (Database) throws -> T) throws(APIError) -> T {
        let outcome: Result<Result<T, APIError>, any Error> = lock.withLock { _ in
            Result {
                try database.transaction {
                    do { return .success(try body(database)) } catch let error as APIError { return .failure(error) }
                }
            }
        }
        switch outcome {
        case .success(let result): return try result.get()
        case .failure(let error):
            Log.error("database error", ["error": "\(error)"])
            throw APIError(.internalError, "the server could not complete the request")
        }
    }

    func close() {
        lock.withLock { _ in try? database.close() }
    }
}

/// The server secret that keys the HMAC derivations (codes, tokens): 32
/// random bytes in a file of mode 0600, made on first start.
enum ServerSecret {
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
