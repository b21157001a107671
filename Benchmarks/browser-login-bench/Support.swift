import Foundation
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Monotonic nanoseconds.
@inline(__always)
func nowNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
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

func withUnixAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    precondition(bytes.count < MemoryLayout.size(ofValue: address.sun_path), "socket path too long: \(path)")
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
    return withUnsafePointer(to: &address) { p in
        p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
    }
}

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

// MARK: - Processes

/// A child process started with posix_spawn (empty signal mask), output to a log file.
final class ChildProcess: Sendable {
    let pid: pid_t
    let name: String

    init(
        _ argv: [String], environment: [String: String], log: String, dup2: [(Int32, Int32)] = [], name: String? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        for (from, to) in dup2 { posix_spawn_file_actions_adddup2(&actions, from, to) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attributes, cArgs, cEnv)
        guard rc == 0 else { throw BenchError("cannot start \(argv[0]): \(rc)") }
        self.pid = pid
        self.name = name ?? (argv[0] as NSString).lastPathComponent
    }

    /// Sends `signal` and waits (SIGKILL after 10 s). Returns the wait status.
    @discardableResult
    func stop(_ signal: Int32 = SIGTERM) -> Int32 {
        kill(pid, signal)
        var status: Int32 = 0
        let deadline = nowNanos() + 10_000_000_000
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || (r < 0 && errno != EINTR) { return status }
            if nowNanos() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return status
            }
            usleep(2_000)
        }
    }

    var isRunning: Bool { kill(pid, 0) == 0 }

    /// Running and not a zombie (a killed child that nobody reaped yet is not alive).
    var isAlive: Bool { ProcFS.isAlive(pid: pid) }

    /// Waits for the child to end and reaps it.
    func reap() {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    /// Resident memory in KiB (VmRSS), nil when gone.
    var residentKiB: Int? { readResidentKiB(pid) }
    /// User plus system CPU time so far, in seconds (10 ms resolution).
    var cpuSeconds: Double { readCPUSeconds(pid) ?? 0 }
    /// Anonymous resident memory in KiB (RssAnon: heap and stacks, without mapped libraries).
    var anonymousKiB: Int? { readResidentKiB(pid, field: "RssAnon") }
}

func readResidentKiB(_ pid: pid_t, field: String = "VmRSS") -> Int? { ProcFS.statusNumber(field, pid: pid) }

/// utime + stime of /proc/PID/stat, in seconds.
func readCPUSeconds(_ pid: pid_t) -> Double? { ProcFS.cpuSeconds(pid: pid) }

func waitFor(_ seconds: Double, _ what: String, _ condition: () -> Bool) throws {
    let deadline = nowNanos() + UInt64(seconds * 1e9)
    while nowNanos() < deadline {
        if condition() { return }
        usleep(5_000)
    }
    throw BenchError("timed out waiting for \(what)")
}

/// A Unix datagram socket that plays systemd's NOTIFY_SOCKET.
final class NotifySocket {
    let path: String
    let fd: Int32

    init(path: String) throws {
        unlink(path)
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
        guard withUnixAddress(path, { bind(fd, $0, $1) }) == 0 else { throw BenchError("bind \(path): errno \(errno)") }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// Waits for a datagram containing `READY=1`; answers the time it arrived (monotonic ns).
    func waitForReady(timeoutMilliseconds: Int32 = 15_000) throws -> UInt64 {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = nowNanos() + UInt64(timeoutMilliseconds) * 1_000_000
        while nowNanos() < deadline {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = Int32((deadline - min(deadline, nowNanos())) / 1_000_000) + 1
            if poll(&p, 1, remaining) <= 0 { continue }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            let at = nowNanos()
            if n > 0, String(decoding: buffer[0..<n], as: UTF8.self).split(separator: "\n").contains("READY=1") {
                return at
            }
        }
        throw BenchError("no READY=1 within \(timeoutMilliseconds) ms")
    }
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
