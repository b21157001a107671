import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Where the daemon's log goes: `--log-target`.
public enum LogTarget: String, Sendable, CaseIterable {
    /// The journal when stderr is the journal stream systemd gave the
    /// service (`JOURNAL_STREAM`), else stderr lines in plain words (a
    /// person at a terminal, or a file, reads them).
    case auto
    /// The journal, whatever stderr is, when journald's socket exists; else
    /// stderr lines with `<N>` priority prefixes (journald is the reader asked for).
    case journal
    /// Stderr lines for a log reader: with `<N>` priority prefixes, except
    /// on a terminal, where people read plain words.
    case stderr

    /// The handler for this target in a process with `environment`.
    public func handler(environment: [String: String]) -> any LogHandler {
        switch self {
        case .stderr: StderrLogHandler(prefixes: isatty(2) != 1)
        case .journal: JournalLogHandler.socketExists ? JournalLogHandler() : StderrLogHandler(prefixes: true)
        case .auto:
            JournalStream.isJournal(fileDescriptor: 2, environment: environment)
                ? JournalLogHandler() : StderrLogHandler(prefixes: false)
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
    /// Journald is the reader: lines it gets on stderr keep their priority.
    private let fallback = StderrLogHandler(prefixes: true)

    public init() {}

    /// Whether journald's native socket is there.
    public static var socketExists: Bool { access(JournalWriter.defaultSocketPath, F_OK) == 0 }

    public func handle(_ entry: LogEntry) {
        if !Self.send(JournalFields.fields(of: entry)) { fallback.handle(entry) }
    }

    /// Sends one entry's `NAME=value` fields; false when journald did not take it.
    public static func send(_ fields: [String]) -> Bool { JournalWriter.shared.send(fields) }
}
