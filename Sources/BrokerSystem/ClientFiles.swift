import BrokerCore
import CGIO
import SystemSupport

/// Reads client drop-in files: `*.conf` in `$XDG_CONFIG_HOME/browser-login/clients.d/`,
/// then in each `$XDG_DATA_DIRS/browser-login/clients.d/`. A file name found
/// earlier wins (the user's file overrides a system one of the same name).
/// The format is the INI format of desktop files and systemd units, read with
/// GLib's GKeyFile; keys live in the `[Client]` group. Only regular files of at most 64 KiB are read
/// (ConfigFileRead: a FIFO, a directory or a device named `*.conf` is refused, never opened for a blocking
/// read); a NUL byte or a second `[Client]` group refuses the file.
public enum ClientFiles {
    public struct Loaded: Sendable {
        public var clients: [ClientConfig]
        public var problems: [ConfigProblem]
        public var files: [String]
    }

    public static func load(directories: [String]) -> Loaded {
        var seen = Set<String>()
        var clients: [ClientConfig] = []
        var problems: [ConfigProblem] = []
        var files: [String] = []
        for directory in directories {
            guard let names = FileSystem.directoryEntries(directory) else { continue }
            for name in names.sorted() where name.hasSuffix(".conf") && !seen.contains(name) {
                seen.insert(name)
                let path = directory + "/" + name
                files.append(path)
                switch ConfigFileRead.read(path) {
                case .failure(let problem):
                    problems.append(problem)
                case .success(let contents):
                    let (config, found) = parse(contents: contents, file: path)
                    problems.append(contentsOf: found)
                    if let config { clients.append(config) }
                }
            }
        }
        let (kept, clashes) = ClientConfigValidator.checkTogether(clients)
        return Loaded(clients: kept, problems: problems + clashes, files: files)
    }

    /// One client file's contents, parsed and validated as `load` does each
    /// file it reads (`file` names it in the problems); for fuzzing and tests.
    /// Clashes between files (`checkTogether`) are not part of it.
    public static func parse(contents: [UInt8], file: String) -> (client: ClientConfig?, problems: [ConfigProblem]) {
        if let problem = textProblem(contents, file: file) { return (nil, [problem]) }
        let keyFile = g_key_file_new()
        defer { g_key_file_free(keyFile) }
        var error: UnsafeMutablePointer<GError>?
        let loaded = loadKeyFile(keyFile, contents: contents, error: &error)
        switch loaded ? readGroup(keyFile, path: file, group: ClientConfigValidator.group) : unreadable(file, error) {
        case .failure(let problem): return (nil, [problem])
        case .success(var keys):
            // GKeyFile keeps the last of a repeated key; `ReturnUrl=` may be given twice (a custom
            // scheme and a loopback redirect), so every value of it is handed on, joined with `;`.
            let repeated = repeatedValues(of: "ReturnUrl", in: contents, group: ClientConfigValidator.group)
            if repeated.count > 1 { keys["ReturnUrl"] = repeated.joined(separator: ";") }
            return ClientConfigValidator.validate(file: file, keys: keys)
        }
    }

    /// The values of `key` in `[group]`, in file order, as written (blanks around `=` trimmed).
    static func repeatedValues(of key: String, in contents: [UInt8], group: String) -> [String] {
        func trim(_ text: Substring) -> String {
            String(
                text.drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }
                    .reversed())
        }
        var inGroup = false
        var values: [String] = []
        for raw in contents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let line = trim(Substring(String(decoding: raw, as: UTF8.self)))
            if line.hasPrefix("[") {
                inGroup = line == "[\(group)]"
            } else if inGroup, let eq = line.firstIndex(of: "="), trim(line[..<eq]) == key {
                values.append(trim(line[line.index(after: eq)...]))
            }
        }
        return values
    }

    /// What GKeyFile would read differently from what the file says: a NUL byte (GKeyFile's strings end
    /// there, so `Id=a<NUL>b` would be read as `a`), or a second `[Client]` group (GKeyFile merges it into
    /// the first, so the later keys would silently win).
    static func textProblem(_ contents: [UInt8], file: String) -> ConfigProblem? {
        KeyFileGroups.textProblem(
            contents, file: file, what: "a client file is text", group: ClientConfigValidator.group,
            oneGroup: "a file holds one client — put each client in a file of its own")
    }

    /// Loads `contents` into `keyFile` (GKeyFile); false with `error` set when they are not a key file.
    static func loadKeyFile(
        _ keyFile: OpaquePointer?, contents: [UInt8], error: inout UnsafeMutablePointer<GError>?
    ) -> Bool {
        // One byte more, so that even empty contents have an address; GKeyFile reads `count` bytes.
        (contents + [0]).withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                g_key_file_load_from_data(keyFile, chars.baseAddress, gsize(contents.count), G_KEY_FILE_NONE, &error)
            }
        } != 0
    }

    /// A group's keys and values, or why they could not be read.
    typealias Keys = Result<[String: String], ConfigProblem>

    private static func unreadable(_ path: String, _ error: UnsafeMutablePointer<GError>?) -> Keys {
        let message = takeMessage(error, or: "unreadable")
        return .failure(ConfigProblem(.error, file: path, key: nil, "cannot be read as a key file: \(message)"))
    }

    /// The keys of one group of a key file, unescaped by GKeyFile.
    private static func readGroup(_ keyFile: OpaquePointer?, path: String, group: String) -> Keys {
        guard g_key_file_has_group(keyFile, group) != 0 else {
            return .failure(
                ConfigProblem(.error, file: path, key: nil, "has no [\(group)] group; client settings go under [\(group)]"))
        }
        var count: Int = 0
        guard let keys = g_key_file_get_keys(keyFile, group, &count, nil) else { return .success([:]) }
        defer { g_strfreev(keys) }
        var result: [String: String] = [:]
        for i in 0..<count {
            guard let keyPointer = keys[i] else { continue }
            let key = String(cString: keyPointer)
            var valueError: UnsafeMutablePointer<GError>?
            if let value = g_key_file_get_string(keyFile, group, keyPointer, &valueError) {
                result[key] = String(cString: value)
                g_free(value)
            } else {
                return .failure(ConfigProblem(.error, file: path, key: key, takeMessage(valueError, or: "invalid value")))
            }
        }
        return .success(result)
    }
}
