#if canImport(Glibc)
    import Glibc
#endif

/// What a log entry becomes in the journal: journald's native fields, in
/// the order they are sent (docs/operations.md, Logs).
///
/// `MESSAGE`, `PRIORITY` (the level, which is already a syslog priority),
/// `SYSLOG_IDENTIFIER` (the logger's label), `CODE_FILE`, `CODE_LINE`,
/// `CODE_FUNC`, then one field per metadata key: upper case, every
/// character other than a letter or a digit becomes `_` (`attempt.id` →
/// `ATTEMPT_ID`, `client` → `CLIENT`), except `error.code`, which is
/// `CODE`, and `message.id` (`Logger.messageIDKey`), which is `MESSAGE_ID`.
/// Values are sent as they are, unquoted: each is a field of its own, so
/// it cannot forge another. The entry is the one every handler gets, so
/// nothing reaches the journal that a text line would not carry.
public enum JournalFields {
    /// The fields of `entry`, as `NAME=value` strings.
    public static func fields(of entry: LogEntry) -> [String] {
        var fields = [
            "MESSAGE=" + entry.message, "PRIORITY=\(entry.level.rawValue)", "SYSLOG_IDENTIFIER=" + entry.label,
        ]
        if let source = entry.source {
            fields += ["CODE_FILE=" + source.file, "CODE_LINE=\(source.line)", "CODE_FUNC=" + source.function]
        }
        for key in entry.metadata.keys.sorted() {
            guard let value = entry.metadata[key] else { continue }
            if key == Logger.messageIDKey {
                // Only a well-formed id: journalctl's catalog and MESSAGE_ID= matches need one.
                if isID128(value) { fields.append("MESSAGE_ID=" + value) }
                continue
            }
            fields.append(name(forKey: key) + "=" + value)
        }
        return fields
    }

    /// The journal field name of a metadata key.
    ///
    /// Journald accepts names of up to 64 characters from `A-Z`, `0-9` and
    /// `_`, not starting with `_` (trusted fields) or a digit. A key whose
    /// name would be one the handler or journald gives a meaning of its
    /// own (`MESSAGE`, `PRIORITY`, `SYSLOG_…`, `CODE_…`, …) gets a `BL_`
    /// prefix, so it can never override the entry's message or priority.
    public static func name(forKey key: String) -> String {
        if key == "error.code" { return "CODE" }
        var name = String(
            String.UnicodeScalarView(
                key.unicodeScalars.map { scalar -> Unicode.Scalar in
                    switch scalar {
                    case "a"..."z": Unicode.Scalar(scalar.value - 32)!
                    case "A"..."Z", "0"..."9": scalar
                    default: "_"
                    }
                }))
        let reservedPrefixes = ["SYSLOG_", "CODE_", "OBJECT_", "COREDUMP_", "_"]
        if name.isEmpty || name.first!.isNumber || reserved.contains(name)
            || reservedPrefixes.contains(where: name.hasPrefix)
        {
            name = "BL_" + name
        }
        return String(name.prefix(64))
    }

    /// Field names with a meaning of their own to the journal or the handler.
    private static let reserved: Set<String> = [
        "MESSAGE", "MESSAGE_ID", "PRIORITY", "CODE", "DOCUMENTATION", "TID", "INVOCATION_ID", "USER_INVOCATION_ID",
        "UNIT", "USER_UNIT",
    ]

    /// 32 lower-case hex digits, as `journalctl --new-id128` prints one.
    public static func isID128(_ value: String) -> Bool {
        value.utf8.count == 32 && value.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

/// Whether a descriptor is the journal stream systemd connected the
/// service to: systemd sets `JOURNAL_STREAM` to the `st_dev:st_ino` of the
/// stream it gave as stdout and stderr, and sd-daemon(3)'s rule is to
/// compare it with `fstat(2)` of the descriptor, so a variable inherited by
/// a child whose stderr was redirected does not count.
public enum JournalStream {
    public static func isJournal(fileDescriptor fd: Int32, environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"], let expected = parse(value) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == expected.device && UInt64(info.st_ino) == expected.inode
    }

    /// `DEVICE:INODE`, both decimal.
    public static func parse(_ value: String) -> (device: UInt64, inode: UInt64)? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        return (device, inode)
    }
}
