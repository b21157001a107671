import Synchronization
import SystemSupport

/// The reference server's logger (the shared `Logger`, label
/// `browser-login-server`), reached from anywhere in the server. Metadata goes
/// in `key=value` pairs, never interpolated into the message. Never pass a
/// code, token, verifier, recovery key, callback URL, authorize URL or attempt id.
public enum Log {
    public typealias Level = Logger.Level

    /// A test can capture lines here instead of stderr.
    public typealias Sink = @Sendable (String) -> Void

    private static let logger = Mutex(Logger(label: "browser-login-server"))

    public static func configure(level: Level = .info, sink: Sink? = nil) {
        logger.withLock { $0 = Logger(label: "browser-login-server", minimum: level, sink: sink) }
    }

    static func error(_ message: String, _ metadata: [String: String] = [:]) { write(.error, message, metadata) }
    static func warning(_ message: String, _ metadata: [String: String] = [:]) { write(.warning, message, metadata) }
    static func info(_ message: String, _ metadata: [String: String] = [:]) { write(.info, message, metadata) }

    static func write(_ level: Level, _ message: String, _ metadata: [String: String]) {
        logger.withLock { $0 }.log(level, message, metadata)
    }
}
