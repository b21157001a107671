import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// MARK: - Helpers (the harness itself is shared; these are for the limit tests)

/// Raw client sockets to the broker, closed by `closeAll` (or when released).
final class RawSockets: @unchecked Sendable {
    // Safe: used by one test from one thread.
    private(set) var fds: [Int32] = []

    /// Connects (blocking, with 5 s send and receive timeouts).
    @discardableResult
    func open(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw HarnessError("connect: errno \(code)")
        }
        fds.append(fd)
        return fd
    }

    /// Sends all of `bytes`; false when the broker closed the connection or stopped reading for 5 s.
    @discardableResult
    func send(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += n
        }
        return true
    }

    /// Reads what arrives until the broker closes (or 5 s pass); answers the text.
    func readToEnd(_ fd: Int32) -> String {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            all += buffer[0..<n]
        }
        return String(decoding: all, as: UTF8.self)
    }

    func close(_ fd: Int32) {
        Glibc.close(fd)
        fds.removeAll { $0 == fd }
    }

    func closeAll() {
        for fd in fds { Glibc.close(fd) }
        fds = []
    }

    deinit { closeAll() }
}

extension Harness {
    /// Stops its processes and removes its directory (nothing a test starts outlives it).
    func removeAll() {
        stopAll()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Starts the broker through `prlimit` (its descriptor limit set by `limits`, e.g. `--nofile=256:4096`).
    func startBroker(prlimit limits: String, arguments: [String] = ["--log-level", "debug", "--log-target", "stderr"])
        throws
    {
        try startKeyringIfNeeded()
        broker = try Child(
            "/usr/bin/prlimit", [limits, "--", binDirectory + "/browser-login-broker"] + arguments,
            environment: environment(), log: brokerLog)
        try waitUntil(15, "the broker socket") {
            guard broker?.isRunning == true else { throw HarnessError("broker exited:\n\(broker?.output ?? "")") }
            _ = try RPCClient(socketPath: socketPath, timeout: .seconds(2)).call("broker.info")
            return true
        }
    }

    /// The broker's log lines at `priority` (journald prefix, `<4>` warning; `--log-target stderr`) containing `text`.
    func brokerLogLines(priority: Int, containing text: String) -> [Substring] {
        (broker?.output ?? "").split(separator: "\n").filter { $0.hasPrefix("<\(priority)>") && $0.contains(text) }
    }
}

func request(_ id: Int, _ method: String, _ params: String) -> [UInt8] {
    Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#.utf8) + [10]
}

// MARK: - Tests

/// One local process cannot stop the broker serving everyone (issue 14, item 7):
/// connection limits, abandoned waits, slow readers, descriptor exhaustion.
@Suite("Connection and memory limits of the daemon", .dedicatedThread)
struct LimitsTests {
    @Test func pastTheLimitANewConnectionGetsBusyAndTheCLIIsStillServed() throws {
        let h = try Harness()
        defer { h.removeAll() }
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--log-target", "stderr", "--max-connections", "8"])
        let raw = RawSockets()
        // Eight connections with an event subscription each: held, never closed to make room.
        for _ in 0..<8 {
            let fd = try raw.open(h.socketPath)
            raw.send(fd, request(1, "events.subscribe", "{}"))
            var reply = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &reply, reply.count)
            #expect(n > 0 && String(decoding: reply[0..<max(0, n)], as: UTF8.self).contains("subscription"))
        }
        // This test process holds connections already: beyond the limit it gets BUSY.
        let refused = try #require(throws: RPCError.self) { try h.rpc(timeout: .seconds(10)).call("broker.info") }
        #expect(refused.code == .applicationError)
        #expect(refused.applicationCode == "BUSY")
        #expect(refused.message.contains("connection limit"))
        // The CLI, a process with no connection open, gets a reserved slot.
        let cli = try h.cli(["clients"])
        #expect(cli.status == 0, "\(cli.err)")
        #expect(cli.out.contains("com.example.notes"))
        try waitUntil(10, "the BUSY warning") { !h.brokerLogLines(priority: 4, containing: "answered BUSY").isEmpty }
        // Once they close, a fresh client is served.
        raw.closeAll()
        try waitUntil(10, "a fresh client served") { try h.rpc(timeout: .seconds(2)).call("broker.info")["protocol"] == 1 }

        // Idle connections make room: 600 of them, then a fresh client is still served.
        let baseline = openDescriptors(h.broker!.pid)
        for _ in 0..<600 { try raw.open(h.socketPath) }
        try waitUntil(10, "a fresh client served while 600 idle connections came") {
            try h.rpc(timeout: .seconds(2)).call("broker.info")["protocol"] == 1
        }
        try waitUntil(10, "idle connections closed to make room") {
            openDescriptors(h.broker!.pid) <= baseline + 8 + 32
        }
        #expect(!h.brokerLogLines(priority: 5, containing: "idle longest").isEmpty)
        raw.closeAll()
        #expect(h.broker?.isRunning == true)
    }

    @Test func abandonedWaitsReleaseTheirDescriptorsAtOnce() throws {
        let h = try Harness()
        defer { h.removeAll() }
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let pid = h.broker!.pid
        for _ in 0..<20 { _ = try h.rpc().call("broker.info") }
        try waitUntil(10, "the warm-up connections closed") { openDescriptors(pid) > 0 }
        usleep(200_000)
        let baselineFDs = openDescriptors(pid)
        let baselineRSS = residentKiB(pid) ?? -1
        let raw = RawSockets()
        let wait = request(1, "session.wait", #"{"client":"com.example.notes","timeoutMs":300000}"#)
        for _ in 0..<2000 {
            let fd = try raw.open(h.socketPath)
            raw.send(fd, wait)
            raw.close(fd)
        }
        try waitUntil(10, "the broker's descriptors back to \(baselineFDs) (now \(openDescriptors(pid)))") {
            openDescriptors(pid) <= baselineFDs + 2
        }
        let grown = (residentKiB(pid) ?? -1) - baselineRSS
        #expect(grown < 20 * 1024, "RSS grew by \(grown) KiB")
        // Still serving, and nothing of the waits is left behind.
        #expect(try h.rpc().call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
        #expect(h.broker?.isRunning == true)
    }

    @Test func clientsThatNeverReadAreDroppedWithALogLine() throws {
        let h = try Harness()
        defer { h.removeAll() }
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--log-target", "stderr"])
        let pid = h.broker!.pid
        _ = try h.rpc().call("broker.info")
        let baselineRSS = residentKiB(pid) ?? -1
        let raw = RawSockets()
        // 60,000 pipelined session.get per connection (≈ 10 MB of replies each), never read.
        var chunk: [UInt8] = []
        for i in 0..<1000 { chunk += request(i, "session.get", #"{"client":"com.example.notes"}"#) }
        var peak = baselineRSS
        let connections = (0..<8).compactMap { _ in try? raw.open(h.socketPath) }
        #expect(connections.count == 8)
        for fd in connections {
            for _ in 0..<60 {
                guard raw.send(fd, chunk) else { break }
            }
            peak = max(peak, residentKiB(pid) ?? -1)
        }
        try waitUntil(10, "the slow-reader warning") {
            !h.brokerLogLines(priority: 4, containing: "does not read its replies").isEmpty
        }
        peak = max(peak, residentKiB(pid) ?? -1)
        #expect(peak - baselineRSS < 100 * 1024, "RSS grew by \((peak - baselineRSS) / 1024) MiB")
        // A client that reads is served meanwhile.
        #expect(try h.rpc().call("broker.info")["protocol"] == 1)
        raw.closeAll()
        #expect(h.broker?.isRunning == true)
    }

    @Test func descriptorExhaustionIsReportedAndTheBrokerRecovers() throws {
        let h = try Harness()
        defer { h.removeAll() }
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--log-target", "stderr"])
        let pid = h.broker!.pid
        // Leave the broker only a few descriptors, as if something else had used them up.
        let limit = openDescriptors(pid) + 10
        let set = Child.Termination(
            terminationStatus: try runProgram("/usr/bin/prlimit", ["--pid", "\(pid)", "--nofile=\(limit):\(limit)"]).status)
        #expect(set.terminationStatus == 0)
        let raw = RawSockets()
        let info = request(1, "broker.info", "{}")
        for _ in 0..<40 {
            if let fd = try? raw.open(h.socketPath) { raw.send(fd, info) }
        }
        try waitUntil(10, "the descriptor warning") {
            !h.brokerLogLines(priority: 4, containing: "out of file descriptors").isEmpty
        }
        #expect(h.brokerLogLines(priority: 4, containing: "out of file descriptors").count < 5, "rate-limited")
        raw.closeAll()
        try waitUntil(10, "a fresh client served") { try h.rpc(timeout: .seconds(2)).call("broker.info")["protocol"] == 1 }
        #expect(h.broker?.isRunning == true)
    }

    @Test func theDescriptorLimitIsRaisedToTheHardLimitAtStartUp() throws {
        let h = try Harness()
        defer { h.removeAll() }
        try h.startServer()
        h.writeClient()
        var hard = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &hard)
        let hardText = hard.rlim_max == rlim_t.max ? "unlimited" : "\(hard.rlim_max)"
        try h.startBroker(prlimit: "--nofile=256:\(hardText)")
        let limits = try #require(descriptorLimits(h.broker!.pid))
        #expect(limits.soft == limits.hard)
        #expect(limits.hard == hardText)
        #expect(!h.brokerLogLines(priority: 7, containing: "descriptor limit").isEmpty)
    }
}
