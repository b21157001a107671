import Synchronization
import SystemSupport

/// The reference server's logger (the shared `Logger`, label
/// `browser-login-server`), reached from anywhere in the server. Metadata goes
/// in `key=value` pairs, never interpolated into the message. Never pass a
/// code, token, verifier, recovery key, callback URL, authorize URL or attempt id.
public enum Log {
    private static let logger = Mutex(Logger(label: "browser-login-server"))
    private static var current: Logger { logger.withLock { $0 } }

    /// A test can capture lines with `sink` instead of stderr.
    public static func configure(level: Logger.Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        logger.withLock { $0 = Logger(label: "browser-login-server", minimum: level, sink: sink) }
    }

    static func error(_ message: String, _ metadata: [String: String] = [:]) { current.error(message, metadata) }
    static func warning(_ message: String, _ metadata: [String: String] = [:]) { current.warning(message, metadata) }
    static func info(_ message: String, _ metadata: [String: String] = [:]) { current.info(message, metadata) }
    static func debug(_ message: String, _ metadata: [String: String] = [:]) { current.debug(message, metadata) }
}
