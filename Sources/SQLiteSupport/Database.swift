import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// An SQLite error: the result code, SQLite's message and the operation.
/// The message may contain SQL: log it, never send it to a client.
public struct DatabaseError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public var operation: String
    /// The operating system's errno behind an I/O failure (0 when none).
    public var systemErrno: Int32 = 0

    public var description: String {
        "\(operation): SQLite error \(code): \(message)" + (systemErrno != 0 ? " (errno \(systemErrno))" : "")
    }

    /// The file cannot be written now (full, read-only, an I/O error), as
    /// opposed to a bug: callers report it as such and try again later.
    public var isStorageFault: Bool {
        [SQLITE_FULL, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_PERM].contains(code & 0xFF)
    }

    /// The cause in words, for an operator: "no space left on device", "read-only file system", …
    public var cause: String {
        if systemErrno != 0, let text = strerror(systemErrno) { return String(cString: text).lowercased() }
        switch code & 0xFF {
        case SQLITE_FULL: return "no space left on device"
        case SQLITE_READONLY: return "read-only"
        default: return String(cString: sqlite3_errstr(code))
        }
    }

    /// SQLITE_BUSY / SQLITE_LOCKED: another process holds the database.
    public var isBusy: Bool { code & 0xFF == SQLITE_BUSY || code & 0xFF == SQLITE_LOCKED }
}

/// A value bound to or read from a statement.
public enum DatabaseValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
}

/// Converts Swift values to `DatabaseValue` for binding.
public protocol DatabaseBindable {
    var databaseValue: DatabaseValue { get }
}
extension Int: DatabaseBindable { public var databaseValue: DatabaseValue { .integer(Int64(self)) } }
extension Int64: DatabaseBindable { public var databaseValue: DatabaseValue { .integer(self) } }
extension Bool: DatabaseBindable { public var databaseValue: DatabaseValue { .integer(self ? 1 : 0) } }
extension String: DatabaseBindable { public var databaseValue: DatabaseValue { .text(self) } }
extension Optional: DatabaseBindable where Wrapped: DatabaseBindable {
    public var databaseValue: DatabaseValue { self?.databaseValue ?? .null }
}
extension DatabaseValue: DatabaseBindable { public var databaseValue: DatabaseValue { self } }

/// One row of a result, read by column index or name.
public struct Row: Sendable {
    public let columns: [String]
    public let values: [DatabaseValue]

    /// A row made by another store (PostgresSupport) with the same values.
    public init(columns: [String], values: [DatabaseValue]) {
        self.columns = columns
        self.values = values
    }

    public subscript(_ index: Int) -> DatabaseValue { values[index] }
    public subscript(_ name: String) -> DatabaseValue {
        guard let i = columns.firstIndex(of: name) else { return .null }
        return values[i]
    }
    public func string(_ name: String) -> String? {
        if case .text(let s) = self[name] { return s }
        return nil
    }
    public func int(_ name: String) -> Int64? {
        switch self[name] {
        case .integer(let v): return v
        case .real(let v): return Int64(v)
        default: return nil
        }
    }
    public func bool(_ name: String) -> Bool { (int(name) ?? 0) != 0 }
}

/// A named schema migration. Migrations run in order, once each, and are
/// never edited once shipped: add a new one instead.
public struct Migration: Sendable {
    public let name: String
    public let sql: String
    /// The text for PostgreSQL when the SQLite text cannot be mapped to it
    /// mechanically (PostgresSupport's `Migration.postgresSQL`); nil for most.
    public let postgres: String?
    public init(_ name: String, _ sql: String, postgres: String? = nil) {
        self.name = name
        self.sql = sql
        self.postgres = postgres
    }
}

/// One SQLite connection. Not `Sendable`: it is owned by one actor or one
/// serial queue, which is the only code that touches it. It closes its
/// handle in `deinit` (or in `close()`).
public final class Database {
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    /// The column names of each cached statement that returned rows, read once
    /// (read again when the statement's column count changes: SQLite prepares
    /// it again after a schema change).
    private var columnNames: [OpaquePointer: [String]] = [:]
    public let path: String

    /// Opens (creating) the database at `path`; `:memory:` for a private one.
    /// WAL journal, foreign keys on, a 5 s busy timeout. `incrementalVacuum`:
    /// a new file is made in incremental auto-vacuum mode (it must be chosen
    /// before the file's first page is written; an existing file keeps its mode).
    public init(path: String, incrementalVacuum: Bool = false) throws {
        self.path = path
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(db)
            throw DatabaseError(code: rc, message: message, operation: "open")
        }
        handle = db
        sqlite3_busy_timeout(db, 5000)
        sqlite3_extended_result_codes(db, 1)
        if incrementalVacuum { try execute("PRAGMA auto_vacuum = INCREMENTAL") }
        if path != ":memory:" { try execute("PRAGMA journal_mode=WAL") }
        try execute("PRAGMA synchronous=NORMAL")
        try execute("PRAGMA foreign_keys=ON")
    }

    deinit { closeHandle() }

    /// Finalises cached statements and closes the connection.
    public func close() throws {
        closeHandle()
    }

    private func closeHandle() {
        for (_, statement) in statements { sqlite3_finalize(statement) }
        statements.removeAll()
        columnNames.removeAll()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    private func error(_ rc: Int32, _ operation: String) -> DatabaseError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "closed"
        let systemErrno = handle.map { sqlite3_system_errno($0) } ?? 0
        return DatabaseError(code: rc, message: message, operation: operation, systemErrno: systemErrno)
    }

    /// Gives back the connection's page cache (what is not in use): the pages
    /// are read again from the file, or the system's cache, when next needed.
    public func releaseMemory() {
        guard let handle else { return }
        _ = sqlite3_db_release_memory(handle)
    }

    /// Bytes the connection's page cache holds now (`SQLITE_DBSTATUS_CACHE_USED`).
    public var cacheBytes: Int {
        guard let handle else { return 0 }
        var current: Int32 = 0
        var highest: Int32 = 0
        _ = sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_USED, &current, &highest, 0)
        return Int(current)
    }

    /// Runs one or more statements with no parameters and no results.
    public func execute(_ sql: String) throws {
        guard let handle else { throw DatabaseError(code: SQLITE_MISUSE, message: "closed", operation: "exec") }
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "error"
            sqlite3_free(message)
            throw DatabaseError(code: rc, message: text, operation: "exec", systemErrno: sqlite3_system_errno(handle))
        }
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let cached = statements[sql] {
            sqlite3_reset(cached)
            sqlite3_clear_bindings(cached)
            return cached
        }
        guard let handle else { throw DatabaseError(code: SQLITE_MISUSE, message: "closed", operation: "prepare") }
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error(rc, "prepare") }
        statements[sql] = statement
        return statement
    }

    private func names(of statement: OpaquePointer) -> [String] {
        let count = sqlite3_column_count(statement)
        if let known = columnNames[statement], known.count == Int(count) { return known }
        let names = (0..<count).map { String(cString: sqlite3_column_name(statement, $0)) }
        columnNames[statement] = names
        return names
    }

    private func bind(_ statement: OpaquePointer, _ arguments: [DatabaseBindable]) throws {
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch argument.databaseValue {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let v): rc = sqlite3_bind_int64(statement, index, v)
            case .real(let v): rc = sqlite3_bind_double(statement, index, v)
            case .text(let s): rc = sqlite3_bind_text(statement, index, s, -1, bl_sqlite_transient())
            }
            guard rc == SQLITE_OK else { throw error(rc, "bind") }
        }
    }

    private func readRow(_ statement: OpaquePointer, columns: [String]) -> Row {
        var values: [DatabaseValue] = []
        values.reserveCapacity(columns.count)
        for i in 0..<Int32(columns.count) {
            switch sqlite3_column_type(statement, i) {
            case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(statement, i)))
            case SQLITE_FLOAT: values.append(.real(sqlite3_column_double(statement, i)))
            case SQLITE_TEXT:
                if let text = sqlite3_column_text(statement, i) {
                    values.append(.text(String(cString: text)))
                } else {
                    values.append(.null)
                }
            default: values.append(.null)
            }
        }
        return Row(columns: columns, values: values)
    }

    /// Runs a statement that returns no rows; answers the number of changed rows.
    @discardableResult
    public func run(_ sql: String, _ arguments: DatabaseBindable...) throws -> Int {
        try run(sql, arguments: arguments)
    }

    @discardableResult
    public func run(_ sql: String, arguments: [DatabaseBindable]) throws -> Int {
        let statement = try prepared(sql)
        defer { sqlite3_reset(statement) }
        try bind(statement, arguments)
        var rc = sqlite3_step(statement)
        while rc == SQLITE_ROW { rc = sqlite3_step(statement) }
        guard rc == SQLITE_DONE else { throw error(rc, "step") }
        return Int(sqlite3_changes(handle))
    }

    /// Runs a query and answers all its rows.
    public func query(_ sql: String, _ arguments: DatabaseBindable...) throws -> [Row] {
        try query(sql, arguments: arguments)
    }

    public func query(_ sql: String, arguments: [DatabaseBindable]) throws -> [Row] {
        let statement = try prepared(sql)
        defer { sqlite3_reset(statement) }
        try bind(statement, arguments)
        let columns = names(of: statement)
        var rows: [Row] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_ROW {
                rows.append(readRow(statement, columns: columns))
            } else if rc == SQLITE_DONE {
                break
            } else {
                throw error(rc, "step")
            }
        }
        return rows
    }

    /// The first row of a query, or nil.
    public func queryOne(_ sql: String, _ arguments: DatabaseBindable...) throws -> Row? {
        try query(sql, arguments: arguments).first
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction, committed when it
    /// returns and rolled back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Applies the migrations not yet recorded in `schema_migrations`, each
    /// in its own transaction, in order. Answers the names it applied.
    @discardableResult
    public func migrate(_ migrations: [Migration]) throws -> [String] {
        try execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY NOT NULL, applied_at INTEGER NOT NULL)")
        let applied = Set(try query("SELECT name FROM schema_migrations").compactMap { $0.string("name") })
        var done: [String] = []
        for migration in migrations where !applied.contains(migration.name) {
            try transaction {
                try execute(migration.sql)
                try run(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, strftime('%s','now'))",
                    migration.name)
            }
            done.append(migration.name)
        }
        return done
    }
}
