import CSystemd
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
    /// stderr lines (`sd_journal_sendv` drops entries silently without it).
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

/// Sends each entry to journald with `sd_journal_sendv(3)`, as the
/// structured fields of `JournalFields` (`MESSAGE`, `PRIORITY`,
/// `SYSLOG_IDENTIFIER`, `CODE_*`, `ATTEMPT_ID`, `CLIENT`, `CODE`,
/// `MESSAGE_ID`, …). An entry journald refuses (too large, a full
/// buffer) is written to stderr as a line instead, so it is not lost.
public struct JournalLogHandler: LogHandler {
    private let fallback = StderrLogHandler()

    public init() {}

    /// Whether journald's native socket is there: without it
    /// `sd_journal_sendv` answers success and drops the entry.
    public static var socketExists: Bool { access("/run/systemd/journal/socket", F_OK) == 0 }

    public func handle(_ entry: LogEntry) {
        if !Self.send(JournalFields.fields(of: entry)) { fallback.handle(entry) }
    }

    /// Sends one entry's `NAME=value` fields; false when journald did not take it.
    public static func send(_ fields: [String]) -> Bool {
        // One buffer for all fields, so the iovecs point into memory that lives through the call.
        var bytes: [UInt8] = []
        var ranges: [Range<Int>] = []
        for field in fields {
            let start = bytes.count
            bytes.append(contentsOf: field.utf8)
            ranges.append(start..<bytes.count)
        }
        return bytes.withUnsafeMutableBytes { buffer in
            let vectors = ranges.map { range in
                iovec(iov_base: buffer.baseAddress.map { $0 + range.lowerBound }, iov_len: range.count)
            }
            return vectors.withUnsafeBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) } >= 0
        }
    }
}
