import Foundation
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

// The tests' views of /proc, over the one reader (SystemSupport.ProcFS).

/// A field of /proc/PID/status (`VmRSS:`, `RssAnon:`, `Threads:`), its value trimmed; nil when gone.
public func procStatusField(_ pid: pid_t, _ field: String) -> String? {
    ProcFS.statusField(field.hasSuffix(":") ? String(field.dropLast()) : field, pid: pid)
}

/// Resident memory in KiB (`VmRSS:`, or another KiB field such as `RssAnon:`); nil when gone.
public func residentKiB(_ pid: pid_t, field: String = "VmRSS:") -> Int? {
    procStatusField(pid, field).flatMap { Int($0.split(separator: " ").first ?? "") }
}

/// The number of open descriptors of `pid` (-1 when gone).
public func openDescriptors(_ pid: pid_t) -> Int { ProcFS.openDescriptorCount(pid: pid) ?? -1 }

/// The fields of /proc/PID/stat after the command name (state first, then ppid, …).
public func procStatFields(_ pid: pid_t) -> [Substring]? { ProcFS.statFields(pid: pid) }

/// User plus system CPU time of `pid` so far, in seconds (10 ms resolution).
public func cpuSeconds(_ pid: pid_t) -> Double? { ProcFS.cpuSeconds(pid: pid) }

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
    (ProcFS.read("comm", pid: pid) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
}

/// The soft and hard "Max open files" of a process.
public func descriptorLimits(_ pid: pid_t) -> (soft: String, hard: String)? {
    guard let text = ProcFS.read("limits", pid: pid) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("Max open files") {
        let fields = line.dropFirst("Max open files".count).split(separator: " ")
        guard fields.count >= 2 else { return nil }
        return (String(fields[0]), String(fields[1]))
    }
    return nil
}

/// Resident KiB of `pid` per mapped file (its last path component; "[anonymous]" for
/// heap, stacks and other anonymous memory), largest first, from /proc/PID/smaps.
/// Private copies of a file's pages (relocated data) count with the file.
public func residentByMapping(_ pid: pid_t) -> [(name: String, kib: Int)] {
    guard let text = ProcFS.read("smaps", pid: pid) else { return [] }
    var totals: [String: Int] = [:]
    var current = "[anonymous]"
    for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = fields.first else { continue }
        if fields.count >= 5, !first.hasSuffix(":"), first.contains("-") {
            let path = fields.count > 5 ? String(fields[5]) : ""
            current = path.hasPrefix("/") ? String(path.split(separator: "/").last ?? "") : "[anonymous]"
        } else if first == "Rss:", fields.count > 1, let kib = Int(fields[1]) {
            totals[current, default: 0] += kib
        }
    }
    return totals.map { (name: $0.key, kib: $0.value) }.sorted { $0.kib > $1.kib }
}
