import BrokerCore
import CGIO

/// Every group of a key file (the INI format of client files, desktop files
/// and systemd units), read with GLib's GKeyFile as `ClientFiles` reads
/// client files (a regular file of at most 64 KiB: ConfigFileRead): broker.conf (docs/operations.md).
public enum KeyFileGroups {
    /// The groups in file order, each with its keys; or why the file cannot be read.
    /// A file with a NUL byte, or with `[group]` twice, is refused (`textProblem`).
    public static func read(
        path: String, group: String
    ) -> Result<[(group: String, keys: [(key: String, value: String)])], ConfigProblem> {
        let contents: [UInt8]
        switch ConfigFileRead.read(path) {
        case .failure(let problem): return .failure(problem)
        case .success(let bytes): contents = bytes
        }
        if let problem = textProblem(
            contents, file: path, what: "the file is text", group: group,
            oneGroup: "write each setting once, under one [\(group)]")
        {
            return .failure(problem)
        }
        let keyFile = g_key_file_new()
        defer { g_key_file_free(keyFile) }
        var error: UnsafeMutablePointer<GError>?
        guard ClientFiles.loadKeyFile(keyFile, contents: contents, error: &error) else {
            let message = takeMessage(error, or: "unreadable")
            return .failure(ConfigProblem(.error, file: path, key: nil, "cannot be read as a key file: \(message)"))
        }
        var groupCount: Int = 0
        guard let groups = g_key_file_get_groups(keyFile, &groupCount) else { return .success([]) }
        defer { g_strfreev(groups) }
        var result: [(group: String, keys: [(key: String, value: String)])] = []
        for g in 0..<groupCount {
            guard let groupPointer = groups[g] else { continue }
            var keyCount: Int = 0
            var entries: [(key: String, value: String)] = []
            if let keys = g_key_file_get_keys(keyFile, groupPointer, &keyCount, nil) {
                defer { g_strfreev(keys) }
                for k in 0..<keyCount {
                    guard let keyPointer = keys[k] else { continue }
                    var valueError: UnsafeMutablePointer<GError>?
                    guard let value = g_key_file_get_string(keyFile, groupPointer, keyPointer, &valueError) else {
                        return .failure(
                            ConfigProblem(
                                .error, file: path, key: String(cString: keyPointer),
                                takeMessage(valueError, or: "invalid value")))
                    }
                    entries.append((String(cString: keyPointer), String(cString: value)))
                    g_free(value)
                }
            }
            result.append((String(cString: groupPointer), entries))
        }
        return .success(result)
    }

    /// What GKeyFile would read differently from what the file says: a NUL byte (GKeyFile's strings end
    /// there, so `Id=a<NUL>b` would be read as `a`), or a second `[group]` (GKeyFile merges it into the
    /// first, so the later keys would silently win). `what` and `oneGroup` finish the two messages.
    static func textProblem(
        _ contents: [UInt8], file: String, what: String, group: String, oneGroup: String
    ) -> ConfigProblem? {
        if let nul = contents.firstIndex(of: 0) {
            let line = contents[..<nul].count { $0 == UInt8(ascii: "\n") } + 1
            return ConfigProblem(
                .error, file: file, key: nil, "has a NUL byte on line \(line); \(what) — remove it (the file is not read)")
        }
        let header = Array("[\(group)]".utf8)
        var groupLines: [Int] = []
        for (index, line) in contents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated()
        where trimmedBlanks(line).elementsEqual(header) {
            groupLines.append(index + 1)
        }
        guard groupLines.count > 1 else { return nil }
        return ConfigProblem(
            .error, file: file, key: nil,
            "has a second [\(group)] group on line \(groupLines[1]) (the first is on line \(groupLines[0])); \(oneGroup) (the file is not read)"
        )
    }

    private static func trimmedBlanks(_ line: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D || $0 == 0x0B || $0 == 0x0C }
        guard let first = line.firstIndex(where: { !blank($0) }), let last = line.lastIndex(where: { !blank($0) })
        else { return [] }
        return line[first...last]
    }
}
