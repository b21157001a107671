#if canImport(Glibc)
    import Glibc
#endif

/// The one reader of `/proc`: a process's status fields, CPU time, state,
/// executable and open descriptors (proc(5)). `pid` nil is this process.
public enum ProcFS {
    /// The raw text of `/proc/PID/<name>`, nil when unreadable (the process is gone).
    public static func read(_ name: String, pid: Int32? = nil) -> String? {
        readFile(path(name, pid: pid))
    }

    /// A field of `/proc/PID/status` (`VmRSS`, `RssAnon`, `Threads`,
    /// `voluntary_ctxt_switches`), its value with blanks trimmed (`"1234 kB"`).
    public static func statusField(_ field: String, pid: Int32? = nil) -> String? {
        guard let text = read("status", pid: pid) else { return nil }
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":"), line[..<colon] == field else { continue }
            return String(line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
        }
        return nil
    }

    /// The leading number of a status field (kB for the memory fields).
    public static func statusNumber(_ field: String, pid: Int32? = nil) -> Int? {
        statusField(field, pid: pid).flatMap { Int($0.prefix { $0.isNumber }) }
    }

    /// The resident size in KiB (`VmRSS`; `RssAnon` for heap and stacks without mapped files).
    public static func residentKiB(pid: Int32? = nil, field: String = "VmRSS") -> Int? {
        statusNumber(field, pid: pid)
    }

    /// The fields of `/proc/PID/stat` after `pid (comm)`: index 0 is the state (field 3 of proc(5)).
    public static func statFields(pid: Int32? = nil) -> [Substring]? {
        guard let text = read("stat", pid: pid), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }

    /// Running and not a zombie.
    public static func isAlive(pid: Int32) -> Bool {
        guard let state = statFields(pid: pid)?.first else { return false }
        return state != "Z"
    }

    /// User plus system CPU time so far, in seconds (clock-tick resolution).
    public static func cpuSeconds(pid: Int32? = nil) -> Double? {
        guard let fields = statFields(pid: pid), fields.count > 12, let user = Double(fields[11]),
            let system = Double(fields[12])
        else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The executable (`/proc/PID/exe`), nil when unreadable.
    public static func executable(pid: Int32? = nil) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path("exe", pid: pid), &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// How many descriptors the process has open, nil when unreadable.
    public static func openDescriptorCount(pid: Int32? = nil) -> Int? {
        let fds = openDescriptors(pid: pid)
        return fds.isEmpty ? nil : fds.count
    }

    /// The descriptors the process has open (`/proc/PID/fd`), empty when unreadable.
    public static func openDescriptors(pid: Int32? = nil) -> [Int32] {
        guard let dir = opendir(path("fd", pid: pid)) else { return [] }
        defer { closedir(dir) }
        let own = dirfd(dir)
        var fds: [Int32] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let fd = Int32(name), pid != nil || fd != own { fds.append(fd) }
        }
        return fds
    }

    static func path(_ name: String, pid: Int32?) -> String {
        "/proc/" + (pid.map { "\($0)" } ?? "self") + "/" + name
    }

    /// Reads a whole (small, possibly size-less) file with `read(2)`: proc files report size 0.
    static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { break }
            bytes += chunk[..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
