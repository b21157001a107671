import Foundation
import PostgresSupport
import SQLiteSupport
import Synchronization

/// Where the server keeps its state: an SQLite file, or a PostgreSQL
/// database named by a `postgres://` / `postgresql://` URL.
enum DatabaseLocation: Equatable {
    case sqlite(path: String)
    case postgres(url: String)

    init(_ text: String) {
        self = Self.isPostgresURL(text) ? .postgres(url: text) : .sqlite(path: text)
    }

    static func isPostgresURL(_ text: String) -> Bool {
        let lower = text.lowercased()
        return lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://")
    }

    /// The location for logs and errors: a URL without its password.
    var redacted: String {
        switch self {
        case .sqlite(let path): return path
        case .postgres(let url):
            guard var parts = URLComponents(string: url) else { return "postgresql://…" }
            if parts.password != nil { parts.password = "***" }
            return parts.string ?? "postgresql://…"
        }
    }
}

/// The connection a transaction of `Store.perform` runs on, whichever the
/// store: `run`, `query` and `queryOne` with `?` placeholders and `Row`
/// results, as SQLiteSupport's `Database` has them. (This type shadows
/// SQLiteSupport's inside LoginServer, so every route and record function
/// takes it without naming a store.) On PostgreSQL the `?` become `$1…$n`
/// (`numberedPlaceholders`); the SQL itself must be portable (see Schema).
///
/// Not `Sendable`: it lives for one transaction on the caller's thread.
final class Database {
    enum Connection {
        case sqlite(SQLiteSupport.Database)
        case postgres(PostgresConnection)
    }
    let connection: Connection
    /// Translated statements, for every connection (the SQL texts are constants, so it stays small).
    private static let translated = Mutex<[String: String]>([:])

    init(_ connection: Connection) { self.connection = connection }

    var isPostgres: Bool {
        if case .postgres = connection { return true }
        return false
    }

    /// Runs one or more statements with no parameters and no results.
    func execute(_ sql: String) throws {
        switch connection {
        case .sqlite(let db): try db.execute(sql)
        case .postgres(let pg): try pg.execute(sql)
        }
    }

    /// Runs a statement; answers the number of rows changed.
    @discardableResult
    func run(_ sql: String, _ arguments: DatabaseBindable...) throws -> Int {
        try run(sql, arguments: arguments)
    }

    @discardableResult
    func run(_ sql: String, arguments: [DatabaseBindable]) throws -> Int {
        switch connection {
        case .sqlite(let db): return try db.run(sql, arguments: arguments)
        case .postgres(let pg): return try pg.run(postgres(sql), arguments: arguments.map(\.databaseValue))
        }
    }

    /// Runs a query and answers all its rows.
    func query(_ sql: String, _ arguments: DatabaseBindable...) throws -> [Row] {
        try query(sql, arguments: arguments)
    }

    func query(_ sql: String, arguments: [DatabaseBindable]) throws -> [Row] {
        switch connection {
        case .sqlite(let db): return try db.query(sql, arguments: arguments)
        case .postgres(let pg): return try pg.query(postgres(sql), arguments: arguments.map(\.databaseValue))
        }
    }

    /// The first row of a query, or nil.
    func queryOne(_ sql: String, _ arguments: DatabaseBindable...) throws -> Row? {
        try query(sql, arguments: arguments).first
    }

    func queryOne(_ sql: String, arguments: [DatabaseBindable]) throws -> Row? {
        try query(sql, arguments: arguments).first
    }

    private func postgres(_ sql: String) -> String {
        if let done = Self.translated.withLock({ $0[sql] }) { return done }
        let done = numberedPlaceholders(sql)
        Self.translated.withLock { if $0.count < 10_000 { $0[sql] = done } }
        return done
    }
}

extension Database {
    /// A connection of its own to `location`, migrated: for an admin command
    /// (one short-lived process). Servers use `Store`, which pools them.
    convenience init(location: DatabaseLocation) throws {
        switch location {
        case .sqlite(let path):
            let db = try SQLiteSupport.Database(path: path)
            try db.migrate(Schema.migrations)
            self.init(.sqlite(db))
        case .postgres(let url):
            let pg = try PostgresConnection(url: url, statementTimeoutMillis: PostgresStore.statementTimeoutMillis)
            // Migrations may wait for a server's (holding the advisory lock): no statement timeout there.
            try pg.execute("SET statement_timeout = 0")
            try pg.migrate(Schema.migrations)
            try pg.execute("SET statement_timeout = \(PostgresStore.statementTimeoutMillis)")
            self.init(.postgres(pg))
        }
    }

    /// Runs `body` in one transaction on this connection (SQLite: `BEGIN
    /// IMMEDIATE`; PostgreSQL: SERIALIZABLE, run again when it loses a race
    /// with a server), committed when it returns, rolled back when it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        switch connection {
        case .sqlite(let db): return try db.transaction(body)
        case .postgres(let pg):
            var round = 0
            while true {
                try pg.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                do {
                    let result = try body()
                    try pg.commit()
                    return result
                } catch let error as PostgresError where error.isRetryable && round < 100 {
                    if pg.isOpen { try? pg.execute("ROLLBACK") }
                    round += 1
                    usleep(UInt32.random(in: 0...UInt32(min(50, 1 + round * 2) * 1000)))
                } catch {
                    if pg.isOpen { try? pg.execute("ROLLBACK") }
                    throw error
                }
            }
        }
    }
}
