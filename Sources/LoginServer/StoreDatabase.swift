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
