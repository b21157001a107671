import Foundation
import Synchronization

/// Lines on stderr with journald priority prefixes (`<3>` error, `<4>`
/// warning, `<6>` info). Metadata goes in `key=value` pairs, never
/// interpolated into the message. Never pass a code, token, verifier,
/// recovery key, callback URL, authorize URL or attempt id.
public enum Log {
    public enum Level: Int, Sendable, Comparable {
        case error = 3
        case warning = 4
        case info = 6
        case debug = 7
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    /// A test can capture lines here instead of stderr.
    public typealias Sink = @Sendable (String) -> Void

    private static let state = Mutex<(level: Level, sink: Sink?)>((.info, nil))

    public static func configure(level: Level = .info, sink: Sink? = nil) {
        state.withLock { $0 = (level, sink) }
    }

    static func error(_ message: String, _ metadata: [String: String] = [:]) { write(.error, message, metadata) }
    static func warning(_ message: String, _ metadata: [String: String] = [:]) { write(.warning, message, metadata) }
    static func info(_ message: String, _ metadata: [String: String] = [:]) { write(.info, message, metadata) }

    static func write(_ level: Level, _ message: String, _ metadata: [String: String]) {
        let (threshold, sink) = state.withLock { ($0.level, $0.sink) }
        guard level <= threshold else { return }
        var line = "<\(level.rawValue)>browser-login-server: \(message)"
        for key in metadata.keys.sorted() {
            let value = metadata[key]!
            line += " \(key)=" + (value.contains(" ") ? "\"\(value)\"" : value)
        }
        if let sink {
            sink(line)
        } else {
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
    }
}
