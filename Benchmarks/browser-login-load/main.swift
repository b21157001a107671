// browser-login-load: the bounded load-and-abuse run of issue 14 against the
// real daemon (docs/reliability.md, "Load and abuse"). Run it under a
// session bus with an unlocked Secret Service:
//
//     scripts/with-keyring .build/debug/browser-login-load
//
// The abusers run as child processes of their own (this program with
// `--abuser`), as a hostile local program would; this process plays the
// well-behaved clients: a probe that calls the broker every 10 ms and
// sign-ins that go on throughout. The last line is `N passed, M failed`.
import BrokerRPC
import BrowserLoginTestSupport
import Foundation
import ScriptedBrowser
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

// MARK: - Small helpers

struct LoadError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

func say(_ text: String) {
    print(text)
    fflush(nil)
}

func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    (try? waitUntil(seconds, "", condition)) != nil || condition()
}

/// A blocking Unix stream connection (5 s send and receive timeouts).
func connectUnix(_ path: String) -> Int32? {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return nil }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    if withUnixAddress(path, { connect(fd, $0, $1) }) != 0 {
        close(fd)
        return nil
    }
    return fd
}

@discardableResult
func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
        if n < 0 {
            if errno == EINTR { continue }
            return false
        }
        offset += n
    }
    return true
}

func line(_ text: String) -> [UInt8] { Array(text.utf8) + [10] }

// MARK: - Abusers (child processes)

/// `--abuser KIND SOCKET N`: one hostile program. Prints one result line, then
/// (for the kinds that hold connections) waits until its standard input closes.
enum Abuser {
    static func run(_ kind: String, _ path: String, _ count: Int) -> Never {
        switch kind {
        case "busy":
            // N connections, each with a long session.wait in flight.
            var fds: [Int32] = []
            var busy = 0
            var refusedOther = 0
            let wait = line(
                #"{"jsonrpc":"2.0","id":1,"method":"session.wait","params":{"client":"com.example.loada","timeoutMs":120000}}"#)
            for _ in 0..<count {
                guard let fd = connectUnix(path) else {
                    refusedOther += 1
                    continue
                }
                sendAll(fd, wait)
                fds.append(fd)
            }
            usleep(500_000)
            var buffer = [UInt8](repeating: 0, count: 4096)
            for fd in fds {
                let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if n > 0, String(decoding: buffer[0..<n], as: UTF8.self).contains(#""code":"BUSY""#) { busy += 1 }
            }
            say("busy=\(busy) held=\(fds.count - busy) failed=\(refusedOther)")
            holdUntilStdinCloses()
        case "idle":
            var fds: [Int32] = []
            for _ in 0..<count { if let fd = connectUnix(path) { fds.append(fd) } }
            say("opened=\(fds.count)")
            holdUntilStdinCloses()
        case "abandon":
            let wait = line(
                #"{"jsonrpc":"2.0","id":1,"method":"session.wait","params":{"client":"com.example.loada","timeoutMs":300000}}"#)
            var sent = 0
            for _ in 0..<count {
                guard let fd = connectUnix(path) else { continue }
                if sendAll(fd, wait) { sent += 1 }
                close(fd)
            }
            say("abandoned=\(sent)")
            exit(0)
        case "noread":
            // N connections, each pipelining 100,000 session.get and never reading.
            var chunk: [UInt8] = []
            for i in 0..<1000 {
                chunk += line(
                    #"{"jsonrpc":"2.0","id":\#(i),"method":"session.get","params":{"client":"com.example.loada"}}"#)
            }
            var fds: [Int32] = []
            var dropped = 0
            for _ in 0..<count {
                guard let fd = connectUnix(path) else { continue }
                fds.append(fd)
                for _ in 0..<100 {
                    guard sendAll(fd, chunk) else {
                        dropped += 1
                        break
                    }
                }
            }
            say("connections=\(fds.count) droppedWhileSending=\(dropped)")
            holdUntilStdinCloses()
        case "unread":
            unread(path, count)
        case "hold":
            // N connections, each with an event subscription (never closed to make room), from this one process.
            var held: [Int32] = []
            var busy = 0
            var failed = 0
            let subscribe = line(#"{"jsonrpc":"2.0","id":1,"method":"events.subscribe","params":{}}"#)
            var buffer = [UInt8](repeating: 0, count: 4096)
            for _ in 0..<count {
                guard let fd = connectUnix(path) else {
                    failed += 1
                    continue
                }
                sendAll(fd, subscribe)
                let n = recv(fd, &buffer, buffer.count, 0)
                let reply = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
                if reply.contains(#""subscription""#) {
                    held.append(fd)
                } else {
                    if reply.contains(#""code":"BUSY""#) { busy += 1 } else { failed += 1 }
                    close(fd)
                }
            }
            say("held=\(held.count) busy=\(busy) failed=\(failed)")
            holdUntilStdinCloses()
        case "hostile":
            hostile(path, count)
        default:
            say("unknown abuser \(kind)")
            exit(64)
        }
    }

    /// N connections that never read: each sends 20 requests of an unknown method whose name is
    /// nearly 1 MiB (answered with an error that once repeated the name whole), then 20,000 pipelined
    /// `session.get` (≈ 3 MB of replies). Holds them until its standard input closes; reports how
    /// many connections the broker closed while it was sending (the budget falls on this process).
    static func unread(_ path: String, _ count: Int) -> Never {
        let client = ProcessInfo.processInfo.environment["BL_ABUSER_CLIENT"] ?? "com.example.loada"
        // How many 1 MiB requests each connection sends first (the load round's 20 unless told).
        let bigCount = ProcessInfo.processInfo.environment["BL_ABUSER_BIG"].flatMap { Int($0) } ?? 20
        let big = line(#"{"jsonrpc":"2.0","id":1,"method":"\#(String(repeating: "m", count: 1_040_000))"}"#)
        var gets: [UInt8] = []
        for i in 0..<20_000 {
            gets += line(#"{"jsonrpc":"2.0","id":\#(i),"method":"session.get","params":{"client":"\#(client)"}}"#)
        }
        var fds: [Int32] = []
        var cut = 0
        for _ in 0..<count {
            guard let fd = connectUnix(path) else {
                cut += 1
                continue
            }
            fds.append(fd)
            var ok = true
            for _ in 0..<bigCount where ok { ok = sendAll(fd, big) }
            if ok { ok = sendAll(fd, gets) }
            if !ok { cut += 1 }
        }
        say("connections=\(fds.count) closedWhileSending=\(cut)")
        holdUntilStdinCloses()
    }

    static func holdUntilStdinCloses() -> Never {
        var byte: UInt8 = 0
        while read(0, &byte, 1) > 0 {}
        exit(0)
    }

    /// `count` hostile messages on a few connections: malformed JSON, wrong
    /// types, unknown methods, positional params, invalid and oversized
    /// batches, deep nesting, broken Content-Length framing, and messages
    /// over 1 MiB. Replies are read (a reader that keeps up is not dropped);
    /// connections the broker closes are replaced.
    static func hostile(_ path: String, _ count: Int) -> Never {
        var deep = String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000)
        deep = #"{"jsonrpc":"2.0","id":1,"method":"broker.info","params":"# + deep + "}"
        let batch = "[" + (0..<101).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"session.get"}"# }.joined(separator: ",") + "]"
        let small: [String] = [
            "{not json",
            #"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"client":5}}"#,
            #"{"jsonrpc":"2.0","id":{"x":1},"method":"broker.info"}"#,
            #"{"jsonrpc":"1.0","id":1,"method":"broker.info"}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"no.such.method"}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"session.wait","params":["com.example.loada",5]}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"login.finish","params":{"url":"com.example.loada:/callback?code=x&state=y&iss=z"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"http.request","params":{"client":"com.example.loada","method":"GET","path":"//evil/x"}}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"session.wait","params":{"client":"com.example.loada","timeoutMs":-1}}"#,
            "[]", "[1,2,3]", "1", "\"x\"", "null",
            #"{"jsonrpc":"2.0","id":1,"method":"events.unsubscribe","params":{"subscription":"nope"}}"#,
            #"{"jsonrpc":"2.0","method":"broker.info"}"#, "\u{1}\u{2}\u{3}", #"{"a":"\ud800"}"#,
            batch, deep,
        ]
        let huge = line(String(repeating: "a", count: 1_100_000))
        let badFraming = Array("Content-Length: 99999999999\r\n\r\n".utf8)
        var sent = 0
        var connections = 0
        var replies = 0
        var fd: Int32 = -1
        var buffer = [UInt8](repeating: 0, count: 65_536)
        func drain(block: Bool) {
            while fd >= 0 {
                let n = recv(fd, &buffer, buffer.count, block ? 0 : Int32(MSG_DONTWAIT))
                if n > 0 {
                    replies += buffer[0..<n].reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
                    if block { return }
                    continue
                }
                if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    close(fd)
                    fd = -1
                }
                return
            }
        }
        var i = 0
        while sent < count {
            if fd < 0 {
                guard let next = connectUnix(path) else {
                    usleep(10_000)
                    continue
                }
                fd = next
                connections += 1
            }
            i += 1
            let ok: Bool
            if i % 20_000 == 0 {
                ok = sendAll(fd, huge)  // over 1 MiB: -32600, then closed
                drain(block: true)
            } else if i % 20_000 == 10_000 {
                ok = sendAll(fd, badFraming)  // Content-Length framing, broken
                drain(block: true)
            } else {
                ok = sendAll(fd, line(small[i % small.count]))
            }
            if !ok {
                close(fd)
                fd = -1
            }
            sent += 1
            if i % 64 == 0 { drain(block: false) }
        }
        say("sent=\(sent) connections=\(connections) replies=\(replies)")
        exit(0)
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--abuser", arguments.count == 4, let count = Int(arguments[3]) {
    Abuser.run(arguments[1], arguments[2], count)
}

// MARK: - The world: the reference server and the broker

let usage = """
    browser-login-load — the load-and-abuse run against the real daemon (docs/reliability.md)

    Usage: browser-login-load [--bin-dir DIR] [--keep] [--latency-reported] [--only PHASE,...]

      --bin-dir DIR   where browser-login-broker and browser-login-server are
                      (default: next to this program)
      --keep          keep the temporary directory (logs) afterwards
      --latency-reported  print the well-behaved clients' latency without judging
                      it against 100 ms (CI's short run; make stress judges it)
      --only PHASES   run only these phases (comma-separated): busy, idle, abandon,
                      noread, hostile, unread, connections (to measure one abuse
                      before and after a change)

    Run it under a session bus with an unlocked Secret Service (scripts/with-keyring).
    The last line is `N passed, M failed`; the exit status is 1 when one failed.
    """

var binDirectoryOption = (CommandLine.arguments[0] as NSString).deletingLastPathComponent
if !binDirectoryOption.hasPrefix("/") {
    binDirectoryOption = FileManager.default.currentDirectoryPath + "/" + binDirectoryOption
}
var keepOption = false
/// `--latency-reported`: the well-behaved clients' latency is printed but not
/// judged (CI's short run: timing is the benchmark's to judge, not a test's).
var latencyReportedOption = false
/// `--only`: the phases to run (nil: all).
var onlyOption: Set<String>?
do {
    var i = 0
    while i < arguments.count {
        switch arguments[i] {
        case "--bin-dir" where i + 1 < arguments.count:
            i += 1
            binDirectoryOption = arguments[i]
        case "--keep": keepOption = true
        case "--latency-reported": latencyReportedOption = true
        case "--only" where i + 1 < arguments.count:
            i += 1
            onlyOption = Set(arguments[i].split(separator: ",").map(String.init))
        case "--help", "-h":
            print(usage)
            exit(0)
        default:
            print(usage)
            exit(64)
        }
        i += 1
    }
}

let binDirectory = binDirectoryOption
let keep = keepOption
let latencyReported = latencyReportedOption
let onlyPhases = onlyOption
/// Whether phase `name` runs (`--only`).
func runs(_ name: String) -> Bool { onlyPhases?.contains(name) ?? true }

/// A child process started with posix_spawn, output to a file, standard input a pipe it holds.
final class Child: Sendable {
    let pid: pid_t
    let output: String
    /// Our end of the child's standard input: closing it tells a holding abuser to exit.
    let stdinWrite: Int32

    init(_ argv: [String], environment: [String: String], output: String) throws {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw LoadError("pipe: errno \(errno)") }
        _ = fcntl(pipeFDs[1], F_SETFD, FD_CLOEXEC)
        defer { close(pipeFDs[0]) }
        do {
            pid = try spawn(argv, environment: environment, output: output, input: pipeFDs[0])
        } catch {
            close(pipeFDs[1])
            throw error
        }
        self.output = output
        self.stdinWrite = pipeFDs[1]
    }

    var text: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

    /// Waits for the child to exit (closing its standard input first); SIGKILL after `seconds`.
    func finish(within seconds: Double = 60) {
        close(stdinWrite)
        var status: Int32 = 0
        let deadline = nowNanos() + UInt64(seconds * 1e9)
        while waitpid(pid, &status, WNOHANG) == 0 {
            if nowNanos() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                return
            }
            usleep(10_000)
        }
    }

    func stop() {
        kill(pid, SIGTERM)
        finish(within: 10)
    }
}

let dir = try makeTemporaryDirectory("bll")
for sub in ["config/browser-login/clients.d", "state", "run", "data", "server"] {
    try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
}
chmod(dir + "/run", 0o700)
let socketPath = dir + "/run/broker.sock"
let clients = ["com.example.loada", "com.example.loadb"]
let childrenLock = Mutex<[Child]>([])
func track(_ child: Child) -> Child {
    childrenLock.withLock { $0.append(child) }
    return child
}
func cleanUp() {
    for child in childrenLock.withLock({ $0 }).reversed() { child.stop() }
    if !keep { try? FileManager.default.removeItem(atPath: dir) }
}

let environment: [String: String] = {
    var environment = ProcessInfo.processInfo.environment
    environment["XDG_CONFIG_HOME"] = dir + "/config"
    environment["XDG_STATE_HOME"] = dir + "/state"
    environment["XDG_DATA_DIRS"] = dir + "/data"
    environment["BROWSER"] = "/bin/true"
    for key in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET"] { environment.removeValue(forKey: key) }
    return environment
}()

let serverConfig: [String: Any] = [
    "clients": clients.map { ["clientId": $0, "appName": "Load", "returnUrls": [$0 + ":/callback"], "policy": "confirm"] },
    "testAccounts": ["ada@example.com"],
    "rateLimits": [
        "create": ["burst": 100_000_000, "perMinute": 1_000_000_000],
        "exchange": ["burst": 100_000_000, "perMinute": 1_000_000_000],
        "codeEntry": ["burst": 100_000_000, "perMinute": 1_000_000_000],
    ],
]
var serverOriginFound = ""
let server: Child
let broker: Child
do {
    _ = FileManager.default.createFile(
        atPath: dir + "/server/server.json", contents: try JSONSerialization.data(withJSONObject: serverConfig))
    server = track(
        try Child(
            [
                binDirectory + "/browser-login-server", "serve", "--config", dir + "/server/server.json", "--listen",
                "127.0.0.1", "--port", "0", "--database", dir + "/server/server.sqlite", "--outbox",
                dir + "/server/outbox", "--ready-file", dir + "/server/ready", "--lifetime-ms", "300000",
            ], environment: ProcessInfo.processInfo.environment, output: dir + "/server.log"))
    guard waitFor(15, { FileManager.default.fileExists(atPath: dir + "/server/ready") }) else {
        throw LoadError("the reference server did not start; see \(dir)/server.log")
    }
    usleep(20_000)
    serverOriginFound = try String(contentsOfFile: dir + "/server/ready", encoding: .utf8)
        .trimmingCharacters(in: .whitespacesAndNewlines)
    for id in clients {
        let text = "[Client]\nId=\(id)\nAppName=Load\nServer=\(serverOriginFound)\nReturnUrl=\(id):/callback\n"
        _ = FileManager.default.createFile(
            atPath: dir + "/config/browser-login/clients.d/\(id).conf", contents: Data(text.utf8))
    }
    broker = track(
        try Child(
            [binDirectory + "/browser-login-broker", "--socket", socketPath, "--no-dbus", "--log-level", "info"],
            environment: environment, output: dir + "/broker.log"))
    guard
        waitFor(
            15,
            {
                (try? RPCClient(socketPath: socketPath, timeout: .seconds(2)).call("broker.info")) != nil
            })
    else { throw LoadError("the broker did not start; see \(dir)/broker.log") }
} catch {
    say("browser-login-load: \(error)")
    cleanUp()
    exit(1)
}

let serverOrigin = serverOriginFound

// MARK: - Checks

let results = Mutex<(passed: Int, failed: Int)>((0, 0))
func check(_ name: String, _ ok: Bool, _ detail: String) {
    results.withLock { ok ? ($0.passed += 1) : ($0.failed += 1) }
    say("\(ok ? "PASS" : "FAIL")  \(name): \(detail)")
    if !ok { reportBrokerEnd() }
}

/// How the broker ended, once it has (reaped here: a zombie would still answer `kill(pid, 0)`).
let brokerEnd = Mutex<String?>(nil)
func brokerEnded() -> String? {
    brokerEnd.withLock { end in
        if end == nil {
            var status: Int32 = 0
            if waitpid(broker.pid, &status, WNOHANG) == broker.pid {
                let signal = status & 0x7f
                end = signal != 0 ? "killed by signal \(signal)" : "exited with status \((status >> 8) & 0xff)"
            }
        }
        return end
    }
}

/// After a failed check: if the broker is gone, how it ended and the end of its log, once
/// (the run's directory is removed afterwards unless --keep; the log carries no secrets).
let brokerEndReported = Atomic<Bool>(false)
func reportBrokerEnd() {
    guard let end = brokerEnded(), !brokerEndReported.exchange(true, ordering: .relaxed) else { return }
    say("the broker \(end); the end of its log:")
    let log = (try? String(contentsOfFile: dir + "/broker.log", encoding: .utf8)) ?? ""
    for line in crashExcerpt(ofLog: log) { say("  | \(line)") }
}

func abuser(_ kind: String, _ count: Int, tag: String) throws -> Child {
    track(
        try Child(
            [
                CommandLine.arguments[0].hasPrefix("/") ? CommandLine.arguments[0] : binDirectory + "/browser-login-load",
                "--abuser", kind, socketPath, "\(count)",
            ],
            environment: environment, output: dir + "/abuser-\(tag).log"))
}

/// The well-behaved clients: a probe calling every 10 ms (a connection kept
/// open, and a fresh connection every 10th call, as the CLI does) and
/// sign-ins one after another, counting errors and latencies.
final class WellBehaved: Sendable {
    private struct State {
        var latencies: [Double] = []
        /// Those of the calls on a fresh connection (`broker.info`, every 10th), also in `latencies`.
        var fresh: [Double] = []
        var errors: [String] = []
        var signIns = 0
        /// The probe's kept connection closed to make room, and opened again.
        var reconnects = 0
    }
    private let state = Mutex(State())
    private let running = Atomic<Bool>(true)
    private let signingIn = Atomic<Bool>(true)
    private let probing = Atomic<Bool>(true)
    private let done = DispatchGroup()

    func start() {
        done.enter()
        Thread {
            defer { self.done.leave() }
            var kept: RPCClient?
            var n = 0
            while self.running.load(ordering: .relaxed) {
                guard self.probing.load(ordering: .relaxed) else {
                    usleep(20_000)
                    continue
                }
                n += 1
                let start = nowNanos()
                do {
                    if n % 10 == 0 {
                        _ = try RPCClient(socketPath: socketPath, timeout: .seconds(5)).call("broker.info")
                    } else {
                        if kept == nil { kept = try RPCClient(socketPath: socketPath, timeout: .seconds(5)) }
                        do {
                            _ = try kept!.call("session.get", params: ["client": "com.example.loadb"])
                        } catch let error as RPCError where error.closedToMakeRoom {
                            // docs/rpc.md: a connection idle ≥ 0.5 s may be closed to make room
                            // (here for this process's own new one, its reserve used up by the
                            // abusers); a well-behaved client connects again. Counted, not hidden.
                            self.state.withLock { $0.reconnects += 1 }
                            kept = try RPCClient(socketPath: socketPath, timeout: .seconds(5))
                            _ = try kept!.call("session.get", params: ["client": "com.example.loadb"])
                        }
                    }
                    let ms = Double(nowNanos() - start) / 1e6
                    self.state.withLock { state in
                        state.latencies.append(ms)
                        if n % 10 == 0 { state.fresh.append(ms) }
                    }
                } catch {
                    kept = nil
                    self.state.withLock { $0.errors.append("probe: \(error)") }
                }
                usleep(10_000)
            }
        }.start()
        done.enter()
        Thread {
            defer { self.done.leave() }
            var tag = 0
            while self.running.load(ordering: .relaxed) {
                guard self.signingIn.load(ordering: .relaxed) else {
                    usleep(20_000)
                    continue
                }
                tag += 1
                do {
                    let rpc = try RPCClient(socketPath: socketPath, timeout: .seconds(30))
                    let attempt = try rpc.call(
                        "login.start", params: ["client": "com.example.loadb", "openBrowser": false])
                    guard let url = attempt["authorizeUrl"]?.stringValue else { throw LoadError("no authorizeUrl") }
                    let callback = try ScriptedBrowser(serverOrigin: serverOrigin).signInAndAuthorize(
                        authorizeURL: url, email: "ada+bltestload\(emailSalt)x\(tag)@example.com", code: "000000")
                    let finished = try rpc.call("login.finish", params: ["url": .string(callback)])
                    guard finished["state"]?.stringValue == "completed" else { throw LoadError("not completed") }
                    _ = try rpc.call("session.signOut", params: ["client": "com.example.loadb"])
                    self.state.withLock { $0.signIns += 1 }
                } catch {
                    self.state.withLock { $0.errors.append("sign-in: \(error)") }
                    usleep(100_000)
                }
            }
        }.start()
    }

    /// Pauses or resumes the sign-ins and the probe (so that the broker can go idle and trim).
    func pause(_ paused: Bool) {
        signingIn.store(!paused, ordering: .relaxed)
        probing.store(!paused, ordering: .relaxed)
    }

    func stop() {
        running.store(false, ordering: .relaxed)
        done.wait()
    }

    /// Latencies and errors since the last call (then forgotten).
    func take() -> (latencies: [Double], errors: [String], signIns: Int, reconnects: Int) {
        state.withLock { state in
            defer { state = State() }
            lastFresh.withLock { $0 = state.fresh }
            return (state.latencies, state.errors, state.signIns, state.reconnects)
        }
    }

    /// The fresh-connection latencies of the last `take()`.
    let lastFresh = Mutex<[Double]>([])
}

extension RPCError {
    /// The `BUSY` notice of a connection closed to make room at the connection limit (docs/rpc.md, Limits).
    var closedToMakeRoom: Bool {
        code == .applicationError && data?["code"]?.stringValue == "BUSY" && message.contains("closed this connection")
    }
}

/// `all` without one occurrence of each of `fresh`.
func kept(_ all: [Double], _ fresh: [Double]) -> [Double] {
    var left = Dictionary(fresh.map { ($0, 1) }, uniquingKeysWith: +)
    return all.filter { value in
        guard let count = left[value], count > 0 else { return true }
        left[value] = count - 1
        return false
    }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let s = values.sorted()
    return s[min(s.count - 1, Int(Double(s.count - 1) * p + 0.5))]
}

let clientsWell = WellBehaved()
let emailSalt = UInt32.random(in: 0...UInt32.max)
/// Checks the well-behaved clients over a phase: zero errors, p99 within 100 ms.
/// Answers the p99 (ms).
@discardableResult
func checkServed(_ phase: String) -> Double {
    let (latencies, errors, signIns, reconnects) = clientsWell.take()
    let fresh = clientsWell.lastFresh.withLock { $0 }
    let p50 = percentile(latencies, 0.5)
    let p99 = percentile(latencies, 0.99)
    let worst = latencies.max() ?? .nan
    check(
        "\(phase): well-behaved clients served", errors.isEmpty && !latencies.isEmpty && (latencyReported || p99 <= 100),
        String(
            format: "%d calls, p50 %.1f ms, p99 %.1f ms (on a kept connection %.1f ms, on a fresh one %.1f ms), "
                + "max %.1f ms, %d sign-ins, %d errors%@%@",
            latencies.count, p50, p99, percentile(kept(latencies, fresh), 0.99), percentile(fresh, 0.99), worst, signIns,
            errors.count, reconnects > 0 ? ", \(reconnects) reconnected after BUSY" : "",
            errors.first.map { " (first: \($0))" } ?? ""))
    return p99
}

/// The broker's RSS at rest: the well-behaved clients paused, after the idle trim.
func restingKiB() -> Int {
    clientsWell.pause(true)
    usleep(5_000_000)
    let rss = (residentKiB(broker.pid) ?? -1)
    say(
        "  at rest: \(rss) KiB (anonymous \((procStatusField(broker.pid, "RssAnon:") ?? "?")), \((procStatusField(broker.pid, "Threads:") ?? "?")) threads)"
    )
    clientsWell.pause(false)
    return rss
}

func brokerLogCount(_ text: String) -> Int {
    ((try? String(contentsOfFile: dir + "/broker.log", encoding: .utf8)) ?? "").components(separatedBy: text).count - 1
}

// MARK: - The run

let runStart = nowNanos()
say("browser-login-load: broker pid \(broker.pid), directory \(dir)")
clientsWell.start()
usleep(2_000_000)
_ = clientsWell.take()
let baselineFDs = openDescriptors(broker.pid)
let baselineKiB = restingKiB()
say("baseline: \(baselineKiB) KiB resident at rest, \(baselineFDs) descriptors")

do {
    if runs("busy") {
        // 1. 1,000 concurrent connections, each with a request in flight: a clear refusal beyond the limit.
        let a = try abuser("busy", 1000, tag: "busy")
        _ = waitFor(60) { a.text.contains("busy=") }
        usleep(1_000_000)
        let text = a.text.trimmingCharacters(in: .whitespacesAndNewlines)
        let busy = Int(text.split(separator: " ").first?.split(separator: "=").last ?? "") ?? 0
        let peakFDs = openDescriptors(broker.pid)
        check(
            "1,000 concurrent connections", busy >= 1000 - 512 - 32 && peakFDs <= baselineFDs + 512 + 32 + 8,
            "\(text); broker descriptors \(peakFDs) (baseline \(baselineFDs))")
        checkServed("1,000 concurrent")
        a.finish()
        let released = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
        check("1,000 concurrent: closed at once", released, "descriptors \(openDescriptors(broker.pid)) within 10 s")
    }

    if runs("idle") {
        // 2. 2,000 idle connections: the ones idle longest make room.
        let idle = try abuser("idle", 2000, tag: "idle")
        _ = waitFor(60) { idle.text.contains("opened=") }
        usleep(1_000_000)
        let idleFDs = openDescriptors(broker.pid)
        check(
            "2,000 idle connections", idleFDs <= baselineFDs + 512 + 32 + 8,
            "\(idle.text.trimmingCharacters(in: .whitespacesAndNewlines)); broker descriptors \(idleFDs)")
        checkServed("2,000 idle")
        idle.finish()
        _ = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
    }

    if runs("abandon") {
        // 3. 10,000 abandoned session.waits (two processes of 5,000).
        let waiters = [try abuser("abandon", 5000, tag: "abandon1"), try abuser("abandon", 5000, tag: "abandon2")]
        for w in waiters { _ = waitFor(120) { w.text.contains("abandoned=") } }
        let waitsReleased = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
        check(
            "10,000 abandoned session.wait", waitsReleased,
            waiters.map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")
                + "; descriptors \(openDescriptors(broker.pid)) (baseline \(baselineFDs)), RSS \((residentKiB(broker.pid) ?? -1)) KiB"
        )
        checkServed("10,000 abandoned waits")
        for w in waiters { w.finish() }
    }

    if runs("noread") {
        // 4. Clients that never read: 20 connections, 100,000 requests each.
        let warningsBefore = brokerLogCount("does not read its replies")
        let noread = try abuser("noread", 20, tag: "noread")
        var peakKiB = (residentKiB(broker.pid) ?? -1)
        let deadline = nowNanos() + 60_000_000_000
        while !noread.text.contains("connections=") && nowNanos() < deadline {
            peakKiB = max(peakKiB, (residentKiB(broker.pid) ?? -1))
            usleep(50_000)
        }
        peakKiB = max(peakKiB, (residentKiB(broker.pid) ?? -1))
        let warned = waitFor(10) { brokerLogCount("does not read its replies") > warningsBefore }
        check(
            "non-reading clients", warned && peakKiB - baselineKiB <= 64 * 1024 + 32 * 1024,
            "\(noread.text.trimmingCharacters(in: .whitespacesAndNewlines)); peak RSS \(peakKiB) KiB (+\((peakKiB - baselineKiB) / 1024) MiB, budget 64 MiB); slow-reader warnings logged: \(warned)"
        )
        checkServed("non-reading clients")
        noread.finish()
        _ = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
    }

    if runs("hostile") {
        // 5. 100,000 hostile messages (two processes of 50,000), against the broker at rest before them.
        let beforeHostileKiB = restingKiB()
        let hostile = [try abuser("hostile", 50_000, tag: "hostile1"), try abuser("hostile", 50_000, tag: "hostile2")]
        for h in hostile { _ = waitFor(150) { h.text.contains("sent=") } }
        let alive = kill(broker.pid, 0) == 0
        checkServed("100,000 hostile messages")
        for h in hostile { h.finish() }
        _ = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
        let afterKiB = restingKiB()
        let growth = Double(afterKiB - beforeHostileKiB) / Double(beforeHostileKiB)
        check(
            "100,000 hostile messages", alive && growth <= 0.10,
            hostile.map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")
                + String(
                    format: "; RSS at rest %d KiB after vs %d KiB before them (%+.1f %%; %+.1f %% since the start)", afterKiB,
                    beforeHostileKiB, growth * 100, Double(afterKiB - baselineKiB) / Double(baselineKiB) * 100))
    }

    if runs("unread") {
        // 6. Issue 30, item 1: 100 connections of one process that never read (20 × a 1 MiB method name,
        // 20,000 session.get each): the budget falls on that process, memory comes back.
        let beforeUnreadKiB = restingKiB()
        // The well-behaved clients' p99 over 10 s before the abuse (about 800 calls: a p99 of
        // a few hundred calls is its third-slowest, and swings with the machine), for the ratio the issue judges (≤ 5×).
        _ = clientsWell.take()
        usleep(10_000_000)
        let idleUnreadP99 = percentile(clientsWell.take().latencies, 0.99)
        let unreadWarnings = brokerLogCount("does not read its replies")
        let unreadCPU = cpuSeconds(broker.pid) ?? 0
        let unreadStart = nowNanos()
        let unread = try abuser("unread", 100, tag: "unread")
        var unreadPeakKiB = beforeUnreadKiB
        let unreadDeadline = nowNanos() + 180_000_000_000
        while !unread.text.contains("connections=") && nowNanos() < unreadDeadline {
            unreadPeakKiB = max(unreadPeakKiB, residentKiB(broker.pid) ?? -1)
            usleep(50_000)
        }
        let unreadP99 = checkServed("unread replies (issue 30)")
        say(
            String(
                format: "  unread replies: the abuse lasted %.0f s and cost the broker %.1f s of CPU",
                Double(nowNanos() - unreadStart) / 1e9, (cpuSeconds(broker.pid) ?? 0) - unreadCPU))
        say(
            String(
                format: "  unread replies: well-behaved p99 %.2f ms before, %.2f ms under the abuse (%.1f×; target ≤ 5×: %@)",
                idleUnreadP99, unreadP99, unreadP99 / idleUnreadP99, unreadP99 <= 5 * idleUnreadP99 ? "met" : "not met"))
        unread.finish()
        usleep(10_000_000)
        let afterUnreadKiB = residentKiB(broker.pid) ?? -1
        check(
            "unread replies (issue 30)",
            brokerLogCount("does not read its replies") > unreadWarnings && afterUnreadKiB <= beforeUnreadKiB + 10 * 1024,
            "\(unread.text.trimmingCharacters(in: .whitespacesAndNewlines)); RSS \(beforeUnreadKiB) KiB at rest before, peak \(unreadPeakKiB) KiB, \(afterUnreadKiB) KiB 10 s after the abuser closed"
        )
        _ = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
    }

    if runs("connections") {
        // 7. Issue 30, item 2: three processes each ask for 600 held connections (128 each), then 40 other
        // processes connect, one connection each.
        let holders = try (0..<3).map { try abuser("hold", 600, tag: "hold\($0)") }
        for holder in holders { _ = waitFor(120) { holder.text.contains("held=") } }
        let others = try (0..<40).map { try abuser("hold", 1, tag: "other\($0)") }
        for other in others { _ = waitFor(60) { other.text.contains("held=") } }
        let heldEach = holders.map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }
        let othersServed = others.filter { $0.text.contains("held=1 ") }.count
        check(
            "connections per process (issue 30)",
            heldEach.allSatisfy { $0.hasPrefix("held=128 ") } && othersServed == 40,
            heldEach.joined(separator: ", ") + "; \(othersServed) of 40 other processes connected")
        checkServed("connections per process (issue 30)")
        for process in holders + others { process.finish() }
        _ = waitFor(10) { openDescriptors(broker.pid) <= baselineFDs + 4 }
    }

} catch {
    check("the run", false, "\(error)")
}

clientsWell.stop()
let finalFDs = openDescriptors(broker.pid)
check(
    "the broker at the end", brokerEnded() == nil && finalFDs <= baselineFDs + 4,
    "\(brokerEnded() ?? "running"), \(finalFDs) descriptors (baseline \(baselineFDs)); \(String(format: "%.0f", Double(nowNanos() - runStart) / 1e9)) s"
)
cleanUp()
let (passed, failed) = results.withLock { $0 }
say("\(passed) passed, \(failed) failed")
exit(failed == 0 ? 0 : 1)
