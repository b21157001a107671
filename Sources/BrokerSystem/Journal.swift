import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Where the daemon's log goes: `--log-target`.
public enum LogTarget: String, Sendable, CaseIterable {
    /// The journal when stderr is the journal stream systemd gave the
    /// service (`JOURNAL_STREAM`), else stderr lines.
    case auto
    /// The journal, whatever stderr is, when journald's socket exists; else
    /// stderr lines.
    case journal
    /// Stderr lines with `<N>` priority prefixes.
    case stderr

    /// The handler for this target in a process with `environment`.
    public func handler(environment: [String: String]) -> any LogHandler {
        switch self {
        case .stderr: StderrLogHandler()
        case .journal: JournalLogHandler.socketExists ? JournalLogHandler() : StderrLogHandler()
        case .auto:
            JournalStream.isJournal(fileDescriptor: 2, environment: environment)
                ? JournalLogHandler() : StderrLogHandler()
        }
    }
}

/// Sends each entry to journald with its native protocol (SystemSupport's
/// `JournalWriter`, what `sd_journal_sendv(3)` does), as the structured
/// fields of `JournalFields` (`MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`,
/// `CODE_*`, `ATTEMPT_ID`, `CLIENT`, `CODE`, `MESSAGE_ID`, …). An entry
/// journald's socket does not take (no journald, or it cannot be sent) is
/// written to stderr as a line instead, so it is not lost.
public struct JournalLogHandler: LogHandler {
    private let fallback = StderrLogHandler()

    public init() {}

    /// Whether journald's native socket is there.
    public static var socketExists: Bool { access(JournalWriter.defaultSocketPath, F_OK) == 0 }

    public func handle(_ entry: LogEntry) {
        if !Self.send(JournalFields.fields(of: entry)) { fallback.handle(entry) }
    }

    /// Sends one entry's `NAME=value` fields; false when journald did not take it.
    public static func send(_ fields: [String]) -> Bool { JournalWriter.shared.send(fields) }
}
