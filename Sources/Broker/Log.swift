import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A logger writing one line per event to stderr with a journald priority
/// prefix (`<3>` error … `<7>` debug) and structured `key=value` fields.
/// Callers put data in dotted metadata keys, never in the message, and never
/// pass a secret: tokens, verifiers, codes, callback and authorize URLs and
/// the server's attempt ids stay out of logs.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case error = 3
        case warning = 4
        case notice = 5
        case info = 6
        case debug = 7
        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    public let label: String
    public let minimum: Level
    private let sink: @Sendable (String) -> Void

    public init(label: String, minimum: Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.label = label
        self.minimum = minimum
        self.sink = sink ?? Logger.stderrSink
    }

    static let stderrLock = Mutex(())
    static let stderrSink: @Sendable (String) -> Void = { line in
        stderrLock.withLock { _ in
            var bytes = Array(line.utf8)
            bytes.append(0x0A)
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        }
    }

    public func log(_ level: Level, _ message: String, _ metadata: [String: String] = [:]) {
        guard level <= minimum else { return }
        var line = "<\(level.rawValue)>\(label): \(message)"
        for key in metadata.keys.sorted() {
            line += " \(key)=\(Logger.quote(metadata[key]!))"
        }
        sink(line)
    }

    public func error(_ message: String, _ metadata: [String: String] = [:]) { log(.error, message, metadata) }
    public func warning(_ message: String, _ metadata: [String: String] = [:]) { log(.warning, message, metadata) }
    public func notice(_ message: String, _ metadata: [String: String] = [:]) { log(.notice, message, metadata) }
    public func info(_ message: String, _ metadata: [String: String] = [:]) { log(.info, message, metadata) }
    public func debug(_ message: String, _ metadata: [String: String] = [:]) { log(.debug, message, metadata) }

    static func quote(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F && $0 != "\"" }
        if plain { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default:
                if scalar.value < 0x20 {
                    out += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
