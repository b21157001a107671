import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The one logger of the broker, the reference server and their tools.
///
/// One line per event with a journald priority prefix (`<3>` error … `<7>`
/// debug), the program's label and structured `key=value` fields:
/// `<6>browser-login-broker: serving clients=2 socket=/run/…`. Callers put
/// data in dotted metadata keys, never in the message, and never pass a
/// secret: tokens, verifiers, codes, recovery keys, callback and authorize
/// URLs and the server's attempt ids stay out of logs (docs/operations.md, Logs).
///
/// Where entries go is the handler's business: `StderrLogHandler` (stderr,
/// which journald reads under systemd) in the programs, the broker's journal
/// handler (structured fields, `JournalFields`) when it runs under journald,
/// `RecordingLogHandler` in tests. Every handler gets the same entry, so what
/// is kept out of one is kept out of all.
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
    public let handler: any LogHandler

    public init(label: String, minimum: Level = .info, handler: any LogHandler = StderrLogHandler()) {
        self.label = label
        self.minimum = minimum
        self.handler = handler
    }

    /// A logger whose formatted lines go to `sink` (stderr when nil).
    public init(label: String, minimum: Level = .info, sink: (@Sendable (String) -> Void)?) {
        self.init(label: label, minimum: minimum, handler: sink.map { LineLogHandler($0) } ?? StderrLogHandler())
    }

    /// The metadata key of a key event's journald catalog id (`MESSAGE_ID`,
    /// 32 lower-case hex digits). It names the event, so text lines leave it out.
    public static let messageIDKey = "message.id"

    public func log(
        _ level: Level, _ message: String, _ metadata: [String: String] = [:], file: String = #fileID,
        function: String = #function, line: UInt = #line
    ) {
        guard level <= minimum else { return }
        handler.handle(
            LogEntry(
                level: level, label: label, message: message, metadata: metadata,
                source: LogEntry.Source(file: file, function: function, line: line)))
    }

    public func error(
        _ message: String, _ metadata: [String: String] = [:], file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) { log(.error, message, metadata, file: file, function: function, line: line) }
    public func warning(
        _ message: String, _ metadata: [String: String] = [:], file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) { log(.warning, message, metadata, file: file, function: function, line: line) }
    public func notice(
        _ message: String, _ metadata: [String: String] = [:], file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) { log(.notice, message, metadata, file: file, function: function, line: line) }
    public func info(
        _ message: String, _ metadata: [String: String] = [:], file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) { log(.info, message, metadata, file: file, function: function, line: line) }
    public func debug(
        _ message: String, _ metadata: [String: String] = [:], file: String = #fileID, function: String = #function,
        line: UInt = #line
    ) { log(.debug, message, metadata, file: file, function: function, line: line) }

    /// A metadata value as written in a line: bare when it is printable
    /// ASCII without blanks or quotes, else in double quotes with `"`, `\`,
    /// newlines and other control characters escaped (so one event is one
    /// line, and a value can never forge another field or line).
    public static func quote(_ value: String) -> String {
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

/// One event.
public struct LogEntry: Sendable, Equatable {
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: [String: String]
    /// Where the entry was logged (journald's `CODE_FILE`, `CODE_FUNC`, `CODE_LINE`); not in text lines.
    public var source: Source?

    /// A place in the source: `#fileID`, `#function`, `#line`.
    public struct Source: Sendable, Equatable {
        public var file: String
        public var function: String
        public var line: UInt

        public init(file: String, function: String, line: UInt) {
            self.file = file
            self.function = function
            self.line = line
        }
    }

    public init(
        level: Logger.Level, label: String, message: String, metadata: [String: String], source: Source? = nil
    ) {
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
        self.source = source
    }

    /// The text line: `<level>label: message key=value…`, keys sorted,
    /// without the journal-only `message.id`.
    public var line: String { "<\(level.rawValue)>" + plainLine }

    /// The line for people: `label: message key=value…`, without the
    /// priority prefix that only journald reads.
    public var plainLine: String {
        var line = "\(label): \(message)"
        for key in metadata.keys.sorted() where key != Logger.messageIDKey {
            line += " \(key)=\(Logger.quote(metadata[key]!))"
        }
        return line
    }
}

/// Where a logger's entries go.
public protocol LogHandler: Sendable {
    func handle(_ entry: LogEntry)
}

/// Writes each entry's line to stderr, one `write` per line: with the
/// `<N>` priority prefix where journald reads them (it takes the prefix as
/// the priority), else in plain words (a terminal, a file, a pipe).
public struct StderrLogHandler: LogHandler {
    private static let lock = Mutex(())
    /// Whether lines carry journald's `<N>` priority prefix.
    public let prefixes: Bool

    public init(prefixes: Bool) { self.prefixes = prefixes }

    /// Prefixes only when stderr is the journal stream systemd gave the
    /// process (`JOURNAL_STREAM` is its device and inode, `JournalStream`).
    public init() { self.init(prefixes: Self.journaldReadsStandardError) }

    /// Whether stderr is journald's stream: `JOURNAL_STREAM` names it.
    public static var journaldReadsStandardError: Bool {
        guard let value = getenv("JOURNAL_STREAM") else { return false }
        return JournalStream.isJournal(fileDescriptor: 2, environment: ["JOURNAL_STREAM": String(cString: value)])
    }

    public func handle(_ entry: LogEntry) {
        var bytes = Array((prefixes ? entry.line : entry.plainLine).utf8)
        bytes.append(0x0A)
        Self.lock.withLock { _ in
            _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        }
    }
}

/// Hands each entry's line to a closure.
public struct LineLogHandler: LogHandler {
    private let sink: @Sendable (String) -> Void
    public init(_ sink: @escaping @Sendable (String) -> Void) { self.sink = sink }
    public func handle(_ entry: LogEntry) { sink(entry.line) }
}

/// Keeps entries in memory, for tests.
public final class RecordingLogHandler: LogHandler {
    private let recorded = Mutex<[LogEntry]>([])

    public init() {}

    public func handle(_ entry: LogEntry) { recorded.withLock { $0.append(entry) } }

    public var entries: [LogEntry] { recorded.withLock { $0 } }
    public var lines: [String] { entries.map(\.line) }
    public func removeAll() { recorded.withLock { $0.removeAll() } }
}
