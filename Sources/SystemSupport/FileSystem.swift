#if canImport(Glibc)
    import Glibc
#endif

/// Files and directories with POSIX calls, so that the resident daemon and the
/// libraries it links need no Foundation (docs/performance.md).
public enum FileSystem {
    /// The bytes of the file at `path`, nil when it cannot be opened or read.
    public static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// The text of the file at `path`, nil when unreadable or not UTF-8.
    public static func readText(_ path: String) -> String? {
        read(path).flatMap { String(validating: $0, as: UTF8.self) }
    }

    /// Writes `bytes` to a temporary file next to `path`, then renames it over
    /// `path`: a reader sees the old content or the new one, never a part.
    /// `mode` is narrowed by the umask, as `open` does.
    ///
    /// `temporary` names the temporary file (default: `path` + `.tmp-PID`,
    /// truncated if it exists); a given name is created exclusively and never
    /// through a symbolic link, so a caller that picks an unguessable name
    /// writes only a file it created. `durable` syncs the file before the
    /// rename and the directory after it, so the new content survives a crash
    /// of the machine once this returns (the file vault's items and key).
    public static func writeAtomically(
        _ bytes: some Collection<UInt8>, to path: String, mode: mode_t = 0o666, temporary: String? = nil,
        durable: Bool = false
    ) throws(FileSystemError) {
        let temporaryPath = temporary ?? path + ".tmp-\(getpid())"
        let flags = temporary == nil ? O_TRUNC : O_EXCL | O_NOFOLLOW
        let fd = open(temporaryPath, O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode)
        guard fd >= 0 else { throw FileSystemError(operation: "create", path: temporaryPath, code: errno) }
        func fail(_ operation: String, _ code: Int32, closing: Bool) -> FileSystemError {
            if closing { close(fd) }
            unlink(temporaryPath)
            return FileSystemError(operation: operation, path: temporaryPath, code: code)
        }
        let data = Array(bytes)
        var written = 0
        while written < data.count {
            let count = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw fail("write", errno, closing: true) }
            written += count
        }
        if durable && fsync(fd) != 0 { throw fail("sync", errno, closing: true) }
        guard close(fd) == 0 else { throw fail("close", errno, closing: false) }
        guard rename(temporaryPath, path) == 0 else { throw fail("rename", errno, closing: false) }
        if durable { syncDirectory(parent(of: path)) }
    }

    /// Syncs a directory's entries (a rename or an unlink in it) to disk; a
    /// directory that cannot be opened is left as it is.
    public static func syncDirectory(_ path: String) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// The names in a directory (without `.` and `..`), nil when it cannot be listed.
    public static func directoryEntries(_ path: String) -> [String]? {
        guard let directory = opendir(path) else { return nil }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The target of the symbolic link at `path`, nil when it is not one.
    public static func symbolicLinkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// True when something (a file, a directory, a link to one) is at `path`.
    public static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// True when `path` is a directory (following links).
    public static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Creates `path` and every missing parent (`mkdir -p`); an existing directory is fine.
    public static func createDirectories(_ path: String, mode: mode_t = 0o755) throws(FileSystemError) {
        if isDirectory(path) { return }
        let parent = Self.parent(of: path)
        if parent != path && !parent.isEmpty { try createDirectories(parent, mode: mode) }
        if mkdir(path, mode) != 0 && errno != EEXIST {
            throw FileSystemError(operation: "mkdir", path: path, code: errno)
        }
    }

    /// Removes the file (or empty directory) at `path`; a missing one is fine.
    public static func remove(_ path: String) throws(FileSystemError) {
        if unlink(path) == 0 || errno == ENOENT { return }
        if errno == EISDIR, rmdir(path) == 0 { return }
        throw FileSystemError(operation: "remove", path: path, code: errno)
    }

    /// The directory part of `path` (`/a/b/c` → `/a/b`, `/a` → `/`, `c` → ``), as `dirname` without `.`.
    public static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        return String(trimmed[..<slash])
    }

    /// `directory` and `name` joined with one slash.
    public static func join(_ directory: String, _ name: String) -> String {
        if directory.isEmpty { return name }
        return directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}

/// A failed file-system call: the operation, the path, and `strerror`'s text.
public struct FileSystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public var operation: String
    public var path: String
    public var code: Int32

    public init(operation: String, path: String, code: Int32) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    public var description: String { "\(operation) \(path): \(String(cString: strerror(code)))" }
}

/// The process environment (`environ`), read without Foundation.
public enum ProcessEnvironment {
    /// Every variable of the current environment.
    public static var current: [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                let name = String(text[..<equals])
                if result[name] == nil { result[name] = String(text[text.index(after: equals)...]) }
            }
            pointer += 1
        }
        return result
    }

    /// One variable, nil when unset.
    public static func get(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}

extension StringProtocol {
    /// Without leading and trailing blanks (spaces and tabs: Foundation's `.whitespaces`, ASCII part).
    public func trimmingBlanks() -> String { trimming { $0 == " " || $0 == "\t" } }

    /// Without leading and trailing white space and line ends.
    public func trimmingWhitespace() -> String { trimming { $0.isWhitespace } }

    /// Without the leading and trailing characters that match `drop`.
    public func trimming(where drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}

/// The standard error stream, written with one `write(2)` per call.
public enum StandardError {
    public static func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
