import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A field of /proc/PID/status (`VmRSS:`, `RssAnon:`, `Threads:`), its value trimmed; nil when gone.
public func procStatusField(_ pid: pid_t, _ field: String) -> String? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix(field) {
        return line.dropFirst(field.count).trimmingCharacters(in: .whitespaces)
    }
    return nil
}

/// Resident memory in KiB (`VmRSS:`, or another KiB field such as `RssAnon:`); nil when gone.
public func residentKiB(_ pid: pid_t, field: String = "VmRSS:") -> Int? {
    procStatusField(pid, field).flatMap { Int($0.split(separator: " ").first ?? "") }
}

/// The number of open descriptors of `pid` (-1 when gone).
public func openDescriptors(_ pid: pid_t) -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
}

/// The fields of /proc/PID/stat after the command name (state first, then ppid, …).
public func procStatFields(_ pid: pid_t) -> [Substring]? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    return text[text.index(after: close)...].split(separator: " ")
}

/// User plus system CPU time of `pid` so far, in seconds (10 ms resolution).
public func cpuSeconds(_ pid: pid_t) -> Double? {
    // After "pid (comm)": state is field 3, utime 14 and stime 15.
    guard let fields = procStatFields(pid), fields.count > 12, let user = Double(fields[11]),
        let system = Double(fields[12])
    else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// The direct children of `pid`, from /proc.
public func childProcesses(of pid: pid_t) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { name -> pid_t? in
        guard let child = pid_t(name), let fields = procStatFields(child) else { return nil }
        return fields.count > 1 && pid_t(fields[1]) == pid ? child : nil
    }
}

/// The command name of `pid` (`/proc/PID/comm`).
public func processName(_ pid: pid_t) -> String {
    ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(
        in: .whitespacesAndNewlines)
}

/// The soft and hard "Max open files" of a process.
public func descriptorLimits(_ pid: pid_t) -> (soft: String, hard: String)? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("Max open files") {
        let fields = line.dropFirst("Max open files".count).split(separator: " ")
        guard fields.count >= 2 else { return nil }
        return (String(fields[0]), String(fields[1]))
    }
    return nil
}
