#if canImport(Glibc)
    import Glibc
#endif

/// The one reader of `/proc` (proc(5)): a process's status fields, CPU time,
/// state, executable and open descriptors. `pid` nil is this process.
public enum ProcFS {
    /// The text of `/proc/PID/<name>`, nil when unreadable (the process is gone).
    public static func read(_ name: String, pid: Int32? = nil) -> String? {
        FileSystem.readText(path(name, pid: pid))
    }

    /// A field of `/proc/PID/status` (`VmRSS`, `RssAnon`, `Threads`, `voluntary_ctxt_switches`), trimmed.
    public static func statusField(_ field: String, pid: Int32? = nil) -> String? {
        let line = read("status", pid: pid)?.split(separator: "\n").first { $0.hasPrefix(field + ":") }
        return line?.dropFirst(field.count + 1).trimmingBlanks()
    }

    /// The leading number of a status field: KiB for `VmRSS` (resident size) and `RssAnon` (heap and stacks).
    public static func statusNumber(_ field: String, pid: Int32? = nil) -> Int? {
        statusField(field, pid: pid).flatMap { Int($0.prefix { $0.isNumber }) }
    }

    public static func residentKiB(pid: Int32? = nil) -> Int? { statusNumber("VmRSS", pid: pid) }

    /// The fields of `/proc/PID/stat` after `pid (comm)`: index 0 is the state (field 3 of proc(5)).
    public static func statFields(pid: Int32? = nil) -> [Substring]? {
        guard let text = read("stat", pid: pid), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }

    /// Running and not a zombie.
    public static func isAlive(pid: Int32) -> Bool { statFields(pid: pid).map { $0.first != "Z" } ?? false }

    /// User plus system CPU time so far, in seconds (clock-tick resolution).
    public static func cpuSeconds(pid: Int32? = nil) -> Double? {
        guard let fields = statFields(pid: pid), fields.count > 12, let user = Double(fields[11]),
            let system = Double(fields[12])
        else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The executable (`/proc/PID/exe`), nil when unreadable.
    public static func executable(pid: Int32? = nil) -> String? {
        FileSystem.symbolicLinkTarget(path("exe", pid: pid))
    }

    /// How many descriptors the process has open, nil when unreadable.
    public static func openDescriptorCount(pid: Int32? = nil) -> Int? {
        FileSystem.directoryEntries(path("fd", pid: pid))?.count
    }

    /// One thread's name and how often it was switched out so far (voluntary plus involuntary).
    public struct ThreadSwitches: Sendable, Equatable {
        public let name: String
        public let count: Int
    }

    /// The context switches of each thread of the process, by thread id; empty when it is gone.
    public static func contextSwitches(pid: Int32? = nil) -> [Int32: ThreadSwitches] {
        var answer: [Int32: ThreadSwitches] = [:]
        for entry in FileSystem.directoryEntries(path("task", pid: pid)) ?? [] {
            guard let tid = Int32(entry), let status = read("task/\(entry)/status", pid: pid) else { continue }
            var name = "?"
            var count = 0
            for line in status.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let value = line[line.index(after: colon)...].trimmingBlanks()
                switch line[..<colon] {
                case "Name": name = value
                case "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches": count += Int(value) ?? 0
                default: break
                }
            }
            answer[tid] = ThreadSwitches(name: name, count: count)
        }
        return answer
    }

    static func path(_ name: String, pid: Int32?) -> String { "/proc/" + (pid.map { "\($0)" } ?? "self") + "/" + name }
}
