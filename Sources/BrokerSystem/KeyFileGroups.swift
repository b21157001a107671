import BrokerCore
import CGIO

/// Every group of a key file (the INI format of client files, desktop files
/// and systemd units), read with GLib's GKeyFile as `ClientFiles` reads
/// client files (a regular file of at most 64 KiB: ConfigFileRead): broker.conf (docs/operations.md).
public enum KeyFileGroups {
    /// The groups in file order, each with its keys; or why the file cannot be read.
    public static func read(path: String) -> Result<[(group: String, keys: [(key: String, value: String)])], ConfigProblem> {
        let contents: [UInt8]
        switch ConfigFileRead.read(path) {
        case .failure(let problem): return .failure(problem)
        case .success(let bytes): contents = bytes
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
}
