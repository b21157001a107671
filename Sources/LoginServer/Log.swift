import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The reference server's logger (the shared `Logger`, label
/// `browser-login-server`), reached from anywhere in the server. Metadata goes
/// in `key=value` pairs, never interpolated into the message. Never pass a
/// code, token, verifier, recovery key, callback URL, authorize URL or attempt id.
public enum Log {
    private static let logger = Mutex(
        Logger(
            label: "browser-login-server", handler: ServerStderrLogHandler(prefixes: StderrLogHandler.journaldReadsStandardError))
    )
    private static var current: Logger { logger.withLock { $0 } }

    /// A test can capture lines with `sink` instead of stderr.
    public static func configure(level: Logger.Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        let handler: any LogHandler =
            sink.map { LineLogHandler($0) }
            ?? ServerStderrLogHandler(prefixes: StderrLogHandler.journaldReadsStandardError)
        logger.withLock { $0 = Logger(label: "browser-login-server", minimum: level, handler: handler) }
    }

    static func error(_ message: String, _ metadata: [String: String] = [:]) { current.error(message, metadata) }
    static func warning(_ message: String, _ metadata: [String: String] = [:]) { current.warning(message, metadata) }
    static func info(_ message: String, _ metadata: [String: String] = [:]) { current.info(message, metadata) }
    static func debug(_ message: String, _ metadata: [String: String] = [:]) { current.debug(message, metadata) }
}

/// The server's stderr lines, as `StderrLogHandler` writes them (journald
/// prefixes only where journald reads stderr), but without a lock held
/// across the write: the handler threads log every request, and waiting
/// for each other's `write` there cost more than the rest of the logging
/// (docs/performance.md, round 15). Each line is one `write(2)`; one of at
/// most `PIPE_BUF` bytes (4 KiB; the server's lines are far shorter) lands
/// whole, with no other write inside it, on a pipe (POSIX), a file or
/// journald's stream socket (Linux). A longer line takes a lock, so long
/// lines at least never cut into each other.
struct ServerStderrLogHandler: LogHandler {
    private static let longLines = Mutex(())
    let prefixes: Bool
    /// Standard error; a test's file instead.
    var fileDescriptor: Int32 = 2

    func handle(_ entry: LogEntry) {
        var bytes = Array((prefixes ? entry.line : entry.plainLine).utf8)
        bytes.append(0x0A)
        if bytes.count <= Int(PIPE_BUF) {
            write(bytes)
        } else {
            Self.longLines.withLock { _ in write(bytes) }
        }
    }

    private func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Glibc.write(fileDescriptor, raw.baseAddress! + offset, raw.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return  // stderr is gone: nothing to tell
                }
            }
        }
    }
}
