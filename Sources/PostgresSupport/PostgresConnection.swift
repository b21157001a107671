import CPostgres
import SQLiteSupport

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL error: the SQLSTATE (empty when the server sent none, e.g.
/// the connection is gone), the server's or libpq's message and the
/// operation. The message may contain SQL: log it, never send it to a client.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    public var sqlState: String
    public var message: String
    public var operation: String
    /// The connection itself is unusable (cannot connect, dropped, server
    /// shutting down): the caller discards it and may try again later.
    public var connectionLost: Bool

    public var description: String {
        "\(operation): PostgreSQL error" + (sqlState.isEmpty ? "" : " \(sqlState)") + ": \(message)"
    }

    /// 40001 serialization_failure, 40P01 deadlock_detected: the transaction
    /// lost a race with another one and can be run again from the start.
    public var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// 57014 query_canceled: the statement ran past `statement_timeout`.
    public var isTimeout: Bool { sqlState == "57014" }

    /// The database cannot answer now (connection lost, the server shutting
    /// down or starting up, too many connections, a timeout): not a bug,
    /// answered as "unavailable, retry later".
    public var isUnavailable: Bool {
        connectionLost || isTimeout || sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || sqlState == "53300"
    }
}

/// One libpq connection. Not `Sendable`: one thread uses it at a time (the
/// server's pool hands it to one transaction at a time). Results are read in
/// text format and converted by column type: integers to `.integer`,
/// floating point to `.real`, booleans to `.integer` 0/1, NULL to `.null`,
/// everything else to `.text` — the same `Row` values SQLiteSupport gives,
/// so code written against one store reads the other's rows unchanged.
public final class PostgresConnection {
    private var handle: OpaquePointer?

    /// Connects to `url` (`postgres://…` or `postgresql://…`, any libpq
    /// connection URI). `statementTimeoutMillis` bounds every statement
    /// (and so every lock wait); `connectTimeoutSeconds` bounds the connect.
    public init(url: String, statementTimeoutMillis: Int, connectTimeoutSeconds: Int = 5) throws {
        // expand_dbname=1 parses `url` in the place of `dbname`; a keyword given more than
        // once takes its last value. So the defaults before it are the URL's to override:
        // the connect timeout, and on TCP, keepalives and a user timeout so that a peer
        // that vanished (no RST) is noticed in seconds (statement_timeout is the server's,
        // and cannot end a wait for a server that is gone). The encoding after it is fixed.
        let keys = [
            "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
            "tcp_user_timeout", "application_name", "dbname", "client_encoding",
        ]
        let values = [
            "\(connectTimeoutSeconds)", "1", "10", "5", "3", "\(statementTimeoutMillis + 5000)", "browser-login-server", url,
            "UTF8",
        ]
        let connection = withCStrings(keys) { k in withCStrings(values) { v in PQconnectdbParams(k, v, 1) } }
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { Self.text(PQerrorMessage($0)) } ?? "out of memory"
            PQfinish(connection)
            throw PostgresError(sqlState: "", message: message, operation: "connect", connectionLost: true)
        }
        handle = connection
        // Notices (e.g. "already exists, skipping") would go to standard error: keep warnings and errors only.
        try execute(
            "SET client_min_messages = warning; SET statement_timeout = \(statementTimeoutMillis); "
                + "SET lock_timeout = \(statementTimeoutMillis)")
    }

    deinit { close() }

    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// The connection is usable (as far as libpq knows without a round trip).
    public var isOpen: Bool { handle.map { PQstatus($0) == CONNECTION_OK } ?? false }

    /// Runs one or more statements with no parameters and no results.
    public func execute(_ sql: String) throws {
        guard let handle else { throw closedError("exec") }
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result, "exec")
    }

    /// Commits the open transaction. A transaction an earlier statement
    /// aborted answers COMMIT with ROLLBACK: that is an error here, never a
    /// silent loss of its writes.
    public func commit() throws {
        guard let handle else { throw closedError("commit") }
        let result = PQexec(handle, "COMMIT")
        defer { PQclear(result) }
        try check(result, "commit")
        let tag = Self.text(PQcmdStatus(result))
        guard tag == "COMMIT" else {
            throw PostgresError(
                sqlState: "25P02", message: "the transaction was aborted by an earlier error and rolled back",
                operation: "commit", connectionLost: false)
        }
    }

    /// Runs a statement with `$1…$n` parameters; answers the rows affected.
    @discardableResult
    public func run(_ sql: String, arguments: [DatabaseValue]) throws -> Int {
        try withResult(sql, arguments) { result in Int(Self.text(PQcmdTuples(result))) ?? 0 }
    }

    /// Runs a query with `$1…$n` parameters and answers all its rows.
    public func query(_ sql: String, arguments: [DatabaseValue]) throws -> [Row] {
        try withResult(sql, arguments) { result in
            let columnCount = PQnfields(result)
            let columns = (0..<columnCount).map { Self.text(PQfname(result, $0)) }
            let types = (0..<columnCount).map { PQftype(result, $0) }
            return (0..<PQntuples(result)).map { row in
                Row(
                    columns: columns,
                    values: (0..<columnCount).map { column in
                        if PQgetisnull(result, row, column) == 1 { return .null }
                        let text = Self.text(PQgetvalue(result, row, column))
                        switch types[Int(column)] {
                        case 20, 21, 23, 26: return Int64(text).map(DatabaseValue.integer) ?? .text(text)
                        case 16: return .integer(text == "t" ? 1 : 0)
                        case 700, 701, 1700: return Double(text).map(DatabaseValue.real) ?? .text(text)
                        default: return .text(text)
                        }
                    })
            }
        }
    }

    private func withResult<T>(_ sql: String, _ arguments: [DatabaseValue], _ read: (OpaquePointer?) -> T) throws -> T {
        guard let handle else { throw closedError("query") }
        // Parameter types: int8 for integers, float8, text; NULL lets the server infer.
        let types: [Oid] = arguments.map {
            switch $0 {
            case .null: 0
            case .integer: 20
            case .real: 701
            case .text: 25
            }
        }
        let texts: [String?] = arguments.map {
            switch $0 {
            case .null: nil
            case .integer(let v): String(v)
            case .real(let v): String(v)
            case .text(let s): s
            }
        }
        let result = withOptionalCStrings(texts) { values in
            PQexecParams(handle, sql, Int32(arguments.count), types, values, nil, nil, 0)
        }
        defer { PQclear(result) }
        try check(result, "query")
        return read(result)
    }

    private func check(_ result: OpaquePointer?, _ operation: String) throws {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        guard status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK else { return }
        let state = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { Self.text($0) } ?? ""
        let message =
            result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "M"))) }.map { Self.text($0) }
            ?? handle.map { Self.text(PQerrorMessage($0)) } ?? "closed"
        let lost = handle.map { PQstatus($0) != CONNECTION_OK } ?? true
        throw PostgresError(sqlState: state, message: message, operation: operation, connectionLost: lost)
    }

    private func closedError(_ operation: String) -> PostgresError {
        PostgresError(sqlState: "", message: "the connection is closed", operation: operation, connectionLost: true)
    }

    private static func text(_ pointer: UnsafePointer<CChar>?) -> String {
        pointer.map { String(cString: $0) }?.trimmingSuffix() ?? ""
    }

    private static func text(_ pointer: UnsafeMutablePointer<CChar>?) -> String {
        text(UnsafePointer(pointer))
    }
}

/// `?` placeholders (SQLite's) as `$1…$n` (PostgreSQL's), left to right,
/// outside string literals ('…'), quoted identifiers ("…") and comments
/// (`-- …` to the end of the line). Every other `?` is a placeholder: SQL
/// run through this must not use PostgreSQL's `?` JSON operators.
public func numberedPlaceholders(_ sql: String) -> String {
    var out = ""
    out.reserveCapacity(sql.utf8.count + 8)
    var n = 0
    var quote: Character? = nil
    var comment = false
    var previous: Character = " "
    for c in sql {
        if comment {
            if c == "\n" { comment = false }
        } else if let q = quote {
            if c == q { quote = nil }
        } else if c == "'" || c == "\"" {
            quote = c
        } else if c == "-" && previous == "-" {
            comment = true
        } else if c == "?" {
            n += 1
            out += "$\(n)"
            previous = c
            continue
        }
        out.append(c)
        previous = c
    }
    return out
}

extension String {
    fileprivate func trimmingSuffix() -> String {
        var s = Substring(self)
        while let last = s.last, last == "\n" || last == " " { s = s.dropLast() }
        return String(s)
    }
}

private func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { pointers.forEach { free($0) } }
    return body(pointers.map { $0.map { UnsafePointer($0) } })
}

private func withOptionalCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let pointers: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0) } ?? nil }
    defer { pointers.forEach { free($0) } }
    return body(pointers.map { $0.map { UnsafePointer($0) } })
}

extension PostgresConnection {
    /// The key of the advisory lock migrations run under ("blmigrat").
    static let migrationLock: Int64 = 0x626C_6D69_6772_6174

    /// Applies the migrations not yet recorded in `schema_migrations` (the
    /// same table SQLiteSupport keeps), each in its own transaction, in
    /// order, under a session advisory lock: instances starting together
    /// wait for each other, and the later ones find the work done. Answers
    /// the names it applied. Each migration's PostgreSQL text is
    /// `Migration.postgresSQL`.
    @discardableResult
    public func migrate(_ migrations: [Migration]) throws -> [String] {
        try execute("SELECT pg_advisory_lock(\(Self.migrationLock))")
        defer { try? execute("SELECT pg_advisory_unlock(\(Self.migrationLock))") }
        try execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY NOT NULL, applied_at BIGINT NOT NULL)")
        let applied = Set(try query("SELECT name FROM schema_migrations", arguments: []).compactMap { $0.string("name") })
        var done: [String] = []
        for migration in migrations where !applied.contains(migration.name) {
            try execute("BEGIN")
            do {
                try execute(migration.postgresSQL)
                try run(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES ($1, EXTRACT(EPOCH FROM now())::BIGINT)",
                    arguments: [.text(migration.name)])
                try execute("COMMIT")
            } catch {
                try? execute("ROLLBACK")
                throw error
            }
            done.append(migration.name)
        }
        return done
    }
}

extension Migration {
    /// The migration's text for PostgreSQL: its own `postgres` text when it
    /// has one, else the SQLite text with one type mapping applied — the
    /// word `INTEGER` becomes `BIGINT`. SQLite's INTEGER is 64-bit and
    /// PostgreSQL's is 32-bit; the server stores times in milliseconds, which
    /// need 64 bits. (Booleans stay integers 0/1 on both.) Everything else in
    /// a migration must already be portable SQL.
    public var postgresSQL: String {
        if let postgres { return postgres }
        var out = ""
        var word = ""
        func flush() {
            out += word == "INTEGER" ? "BIGINT" : word
            word = ""
        }
        for c in sql {
            if c.isLetter || c.isNumber || c == "_" {
                word.append(c)
            } else {
                flush()
                out.append(c)
            }
        }
        flush()
        return out
    }
}
