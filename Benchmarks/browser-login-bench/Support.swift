import BrowserLoginTestSupport
import CLinux
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

func median(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return .nan }
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let s = values.sorted()
    return s[min(s.count - 1, Int(Double(s.count - 1) * p + 0.5))]
}

func log(_ text: String) {
    FileHandle.standardError.write(Data(("bench: " + text + "\n").utf8))
}

// MARK: - Unix sockets

/// A listening Unix stream socket (close-on-exec) at `path`.
func listenUnix(_ path: String, backlog: Int32 = 256) throws -> Int32 {
    unlink(path)
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
    guard withUnixAddress(path, { bind(fd, $0, $1) }) == 0 else { throw BenchError("bind \(path): errno \(errno)") }
    guard listen(fd, backlog) == 0 else { throw BenchError("listen: errno \(errno)") }
    return fd
}

/// A blocking client connection that sends one NDJSON line and reads one line
/// back per call (no pipelining: one request in flight per connection). The
/// same client drives the echo baseline and the broker.
final class LineConnection {
    let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 65_536)
    /// Bytes after the last newline read (never used in closed loop, kept for safety).
    private var carry = 0
    /// The last reply (without its newline), when `keepReply`.
    var lastReply: [UInt8] = []

    init(path: String, attempts: Int = 1) throws {
        var lastErrno: Int32 = 0
        for i in 0..<max(1, attempts) {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
            if withUnixAddress(path, { connect(fd, $0, $1) }) == 0 {
                self.fd = fd
                return
            }
            lastErrno = errno
            close(fd)
            if i + 1 < attempts { usleep(1_000) }
        }
        throw BenchError("connect \(path): errno \(lastErrno)")
    }

    deinit { close(fd) }

    /// Sends `request` (ending in a newline) and waits for one reply line; returns its length.
    @discardableResult
    func call(_ request: [UInt8], keepReply: Bool = false) throws -> Int {
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { send(fd, $0.baseAddress! + sent, request.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("send: errno \(errno)")
            }
            sent += n
        }
        var total = 0
        if keepReply { lastReply.removeAll(keepingCapacity: true) }
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("read: errno \(errno)")
            }
            if n == 0 { throw BenchError("connection closed by the server") }
            if keepReply { lastReply.append(contentsOf: buffer[0..<n]) }
            total += n
            if buffer[n - 1] == 0x0A { break }
        }
        if keepReply { lastReply.removeLast() }
        return total
    }
}

// MARK: - Threads

/// Runs `body(i)` on `count` OS threads and waits for all of them.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void, starting: () -> Void = {}) {
    let group = DispatchGroup()
    for i in 0..<count {
        group.enter()
        let thread = Thread {
            body(i)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    starting()
    group.wait()
}

/// A tiny counter shared by threads.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func add(_ n: Int) { value.add(n, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}

/// A list of doubles shared by threads.
final class Samples: Sendable {
    private let values = Mutex<[Double]>([])
    func append(_ v: Double) { values.withLock { $0.append(v) } }
    func append(contentsOf v: [Double]) { values.withLock { $0.append(contentsOf: v) } }
    var all: [Double] { values.withLock { $0 } }
}

// MARK: - The table

struct Row: Sendable {
    var figure: String
    var value: String
    var baseline: String = "-"
    var ratio: String = "-"
    var target: String
    var met: Bool?
}
/// The rows of the final table, in the order measured.
final class Table: Sendable {
    static let shared = Table()
    private let rows = Mutex<[Row]>([])
    func add(_ row: Row) { rows.withLock { $0.append(row) } }
    var all: [Row] { rows.withLock { $0 } }

    func print() {
        let header = ["figure", "median", "baseline (same run)", "ratio", "target", "met"]
        let body = all.map {
            [$0.figure, $0.value, $0.baseline, $0.ratio, $0.target, $0.met.map { $0 ? "yes" : "NO" } ?? "-"]
        }
        let table = [header] + body
        let widths = (0..<header.count).map { c in table.map { $0[c].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            "| "
                + cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: " | ") + " |"
        }
        Swift.print(line(header))
        Swift.print("|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|")
        for r in body { Swift.print(line(r)) }
        fflush(nil)
    }
}

func record(_ row: Row) {
    Table.shared.add(row)
    log("\(row.figure): \(row.value) (baseline \(row.baseline), ratio \(row.ratio), target \(row.target))")
}
func ms(_ ns: Double) -> String { String(format: "%.2f ms", ns / 1e6) }
func us(_ ns: Double) -> String { String(format: "%.1f µs", ns / 1e3) }
func perSecond(_ v: Double) -> String { String(format: "%.0f /s", v) }
func mib(_ kib: Int) -> String { String(format: "%.1f MiB", Double(kib) / 1024) }

// MARK: - CPU placement

/// Runs the threads of `pid` (every thread, and the ones they start) on the
/// CPUs of `cpus`; `pid` 0 is the calling thread alone. False when the
/// system refuses (the figure is then measured unpinned).
@discardableResult
func pin(_ pid: pid_t, to cpus: [Int]) -> Bool {
    var mask = [UInt8](repeating: 0, count: 128)  // cpu_set_t: 1,024 CPUs
    for cpu in cpus where cpu < mask.count * 8 { mask[cpu / 8] |= UInt8(1) << (cpu % 8) }
    let threads =
        pid == 0
        ? [pid_t(0)]
        : ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).compactMap { pid_t($0) }
    return !threads.isEmpty && threads.allSatisfy { sched_setaffinity($0, mask.count, mask) == 0 }
}

/// The CPUs this process may run on.
func allowedCPUs() -> [Int] {
    var mask = [UInt8](repeating: 0, count: 128)
    guard sched_getaffinity(0, mask.count, &mask) == 0 else { return [] }
    return (0..<(mask.count * 8)).filter { mask[$0 / 8] & (UInt8(1) << ($0 % 8)) != 0 }
}
