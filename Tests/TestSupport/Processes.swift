import Foundation
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Starts `argv` with `posix_spawn`: standard input from `input` (a
/// descriptor, else /dev/null), standard output to `output` (appended or
/// truncated), standard error to `errors` (nil: with standard output), more
/// descriptors from `dup2` (from, to), an empty signal mask and default
/// dispositions. Not Foundation's `Process`: that spawns with the calling
/// thread's signal mask (test threads block SIGTERM, so `dbus-run-session`
/// could never stop its bus) and does not reap programs that fork daemons
/// reliably.
public func spawn(
    _ argv: [String], environment: [String: String], output: String, append: Bool = true, errors: String? = nil,
    input: Int32? = nil, dup2: [(Int32, Int32)] = []
) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let input {
        posix_spawn_file_actions_adddup2(&actions, input, 0)
    } else {
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    }
    posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o600)
    if let errors {
        posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY | O_CREAT | O_APPEND, 0o600)
    } else {
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }
    for (from, to) in dup2 { posix_spawn_file_actions_adddup2(&actions, from, to) }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    // Default dispositions for every signal that can be reset.
    var all = sigset_t()
    sigfillset(&all)
    sigdelset(&all, SIGKILL)
    sigdelset(&all, SIGSTOP)
    posix_spawnattr_setsigdefault(&attributes, &all)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let cArgs = argv.map { strdup($0) } + [nil]
    let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for p in cArgs { free(p) }
        for p in cEnv { free(p) }
    }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, argv[0], &actions, &attributes, cArgs, cEnv)
    guard rc == 0 else { throw HarnessError("cannot start \(argv[0]): \(rc)") }
    return pid
}

/// Waits for `pid` to end and reaps it; answers its wait status.
@discardableResult
public func reap(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return status
}

/// The exit status of a wait status (128 + the signal for a killed program).
public func exitStatus(_ status: Int32) -> Int32 {
    (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}

/// Runs a program to completion with `spawn` and answers its exit status and
/// standard output; standard error goes to `errors` (nil: with the output).
/// `output` names the file that keeps the output (by default a temporary
/// file, removed).
@discardableResult
public func spawnAndWait(
    _ argv: [String], environment: [String: String] = ProcessInfo.processInfo.environment, output: String? = nil,
    errors: String? = "/dev/null"
) throws -> (status: Int32, stdout: String) {
    let outPath = output ?? "\(temporaryBase)/bl-spawn-\(UUID().uuidString)"
    defer { if output == nil { unlink(outPath) } }
    let pid = try spawn(argv, environment: environment, output: outPath, append: false, errors: errors)
    let status = reap(pid)
    return (exitStatus(status), (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "")
}

/// A program started with `spawn`, its output in a log file.
public final class SpawnedProcess: Sendable {
    public let pid: pid_t
    public let log: String
    public let name: String
    private let reaped = Atomic<Bool>(false)
    /// The wait status of a child that ended by itself (seen by `waitForExit`).
    private let endedStatus = Mutex<Int32?>(nil)

    public init(
        _ argv: [String], environment: [String: String], log: String, input: Int32? = nil,
        dup2: [(Int32, Int32)] = [], name: String? = nil
    ) throws {
        self.log = log
        self.name = name ?? (argv[0] as NSString).lastPathComponent
        pid = try spawn(argv, environment: environment, output: log, append: true, errors: nil, input: input, dup2: dup2)
    }

    /// Whether it has exited (reaps it when it has).
    public var hasExited: Bool { waitForExit(0) }

    /// Running and not a zombie (a killed child not yet reaped is not alive).
    public var isAlive: Bool { !reaped.load(ordering: .relaxed) && !processIsGone(pid) }

    /// Waits up to `seconds` for it to exit; true (and reaped) when it has.
    public func waitForExit(_ seconds: Double) -> Bool {
        if reaped.load(ordering: .relaxed) { return true }
        var status: Int32 = 0
        let deadline = nowNanos() + UInt64(seconds * 1e9)
        repeat {
            let rc = waitpid(pid, &status, WNOHANG)
            if rc == pid || (rc < 0 && errno == ECHILD) {
                if rc == pid { endedStatus.withLock { $0 = status } }
                reaped.store(true, ordering: .relaxed)
                return true
            }
            usleep(5_000)
        } while nowNanos() < deadline
        return false
    }

    /// The signal that ended it, when it crashed by itself (SIGSEGV, SIGBUS,
    /// SIGILL, SIGTRAP, SIGABRT, SIGFPE: a Swift runtime trap or a fault; tests
    /// only ever stop children with SIGTERM or SIGKILL); nil otherwise.
    public var crashSignal: Int32? {
        _ = hasExited
        guard let status = endedStatus.withLock({ $0 }) else { return nil }
        let signal = status & 0x7f
        return [SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE].contains(signal) ? signal : nil
    }

    /// Waits for it to end and reaps it; answers the wait status.
    @discardableResult
    public func reap() -> Int32 {
        if reaped.load(ordering: .relaxed) { return 0 }
        let status = BrowserLoginTestSupport.reap(pid)
        reaped.store(true, ordering: .relaxed)
        return status
    }

    /// Sends `signal`, waits up to 10 s, then SIGKILL; reaps it. Idempotent.
    /// Answers the wait status (0 when it was already reaped).
    @discardableResult
    public func stop(_ signal: Int32 = SIGTERM) -> Int32 {
        if reaped.load(ordering: .relaxed) { return 0 }
        kill(pid, signal)
        var status: Int32 = 0
        let deadline = nowNanos() + 10_000_000_000
        while true {
            let rc = waitpid(pid, &status, WNOHANG)
            if rc == pid || (rc < 0 && errno != EINTR) { break }
            if nowNanos() > deadline {
                kill(pid, SIGKILL)
                status = BrowserLoginTestSupport.reap(pid)
                break
            }
            usleep(2_000)
        }
        reaped.store(true, ordering: .relaxed)
        return status
    }

    public var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// Resident memory in KiB (VmRSS), nil when gone.
    public var residentKiB: Int? { BrowserLoginTestSupport.residentKiB(pid) }
    /// Anonymous resident memory in KiB (RssAnon: heap and stacks, without mapped libraries).
    public var anonymousKiB: Int? { BrowserLoginTestSupport.residentKiB(pid, field: "RssAnon:") }
    /// User plus system CPU time so far, in seconds (10 ms resolution); 0 when gone.
    public var cpuSeconds: Double { BrowserLoginTestSupport.cpuSeconds(pid) ?? 0 }
}

/// A running child process (`spawn`), its output appended to a log file (a
/// restarted daemon keeps its predecessor's log). Not Foundation's `Process`:
/// its `waitUntilExit()` waits for a SIGCHLD that, with processes started
/// and reaped from many threads at once (tests in parallel), it can miss for
/// ever; this waits with `waitpid` on the child's own pid.
public final class Child: Sendable {
    /// The exit status once the child has ended (`process.terminationStatus`,
    /// as Foundation's `Process` names it).
    public struct Termination: Sendable {
        public let terminationStatus: Int32
        public init(terminationStatus: Int32) { self.terminationStatus = terminationStatus }
    }

    private let child: SpawnedProcess
    private let status = Mutex<Int32?>(nil)

    public init(_ executable: String, _ arguments: [String], environment: [String: String], log: String) throws {
        child = try SpawnedProcess([executable] + arguments, environment: environment, log: log)
    }

    public var pid: Int32 { child.pid }
    public var log: String { child.log }
    public var isRunning: Bool { !child.hasExited }
    /// The signal of a crash (`SpawnedProcess.crashSignal`), nil otherwise.
    public var crashSignal: Int32? { child.crashSignal }

    /// The exit status (128 + the signal for a killed child; -1 while it runs).
    public var process: Termination { Termination(terminationStatus: status.withLock { $0 } ?? -1) }

    /// Sends `signal`; a child still running after 10 s is killed. Reaps it.
    public func stop(_ signal: Int32 = SIGTERM) {
        guard !child.hasExited else { return }
        let waitStatus = child.stop(signal)
        status.withLock { $0 = exitStatus(waitStatus) }
    }

    public var output: String { child.output }
}

/// Runs a program to its end, standard output and standard error to files;
/// answers its exit status and both outputs. A program still running after
/// `timeout` seconds is killed (a run that should end must not hang the suite).
public func runProgram(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
    timeout: Double = 120
) throws -> (status: Int32, out: String, err: String) {
    let base = "\(temporaryBase)/bl-run-\(UUID().uuidString)"
    defer {
        unlink(base + ".out")
        unlink(base + ".err")
    }
    // In `directory`: through env(1), as glibc's posix_spawn_file_actions_addchdir_np is not visible to Swift.
    let argv = (directory.map { ["/usr/bin/env", "-C", $0] } ?? []) + [executable] + arguments
    let pid = try spawn(
        argv, environment: environment ?? ProcessInfo.processInfo.environment, output: base + ".out", append: false,
        errors: base + ".err")
    var status: Int32 = 0
    let deadline = nowNanos() + UInt64(timeout * 1e9)
    while true {
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid || (rc < 0 && errno != EINTR) { break }
        if nowNanos() > deadline {
            kill(pid, SIGKILL)
            status = reap(pid)
            break
        }
        usleep(2_000)
    }
    let read = { (path: String) in (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
    return (exitStatus(status), read(base + ".out"), read(base + ".err"))
}

/// A pipe whose two ends are close-on-exec, so that a program another test
/// starts later inherits neither; a child gets the write end through
/// `spawn`'s `dup2`. (`pipe2` is not visible to Swift: a program spawned on
/// another thread between `pipe` and `fcntl` can still inherit them, as with
/// Foundation's `Pipe`, so read a line, not to the end, through one.)
public func closeOnExecPipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw HarnessError("pipe: \(errno)") }
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    return (fds[0], fds[1])
}

/// Reads `fd` up to a newline (not included) or its end.
public func readLine(_ fd: Int32) -> String {
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while true {
        let count = read(fd, &byte, 1)
        if count < 0 && errno == EINTR { continue }
        if count <= 0 || byte == 10 { break }
        line.append(byte)
    }
    return String(decoding: line, as: UTF8.self)
}

/// Whether `pid` is gone: no such process, or a zombie (a daemon that forked
/// away is reaped by whoever adopted it, not by the test).
public func processIsGone(_ pid: pid_t) -> Bool {
    guard pid > 0 else { return true }
    if kill(pid, 0) != 0 && errno == ESRCH { return true }
    return !ProcFS.isAlive(pid: pid)
}

/// Sends `signal` to `pid` and waits up to `seconds` for it to be gone, then SIGKILL.
public func terminate(_ pid: pid_t, signal: Int32 = SIGTERM, seconds: Double = 10) {
    guard pid > 0, !processIsGone(pid) else { return }
    kill(pid, signal)
    let deadline = nowNanos() + UInt64(seconds * 1e9)
    while !processIsGone(pid) && nowNanos() < deadline { usleep(20_000) }
    if !processIsGone(pid) {
        kill(pid, SIGKILL)
        while !processIsGone(pid) { usleep(10_000) }
    }
}

/// What a crashed program's log says of the crash: the Swift runtime's
/// backtrace (scripts/crash-backtraces) with the 20 lines before it, at most
/// 200 lines; else the last 40 lines.
public func crashExcerpt(ofLog text: String) -> ArraySlice<Substring> {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    guard let start = lines.lastIndex(where: { $0.hasPrefix("*** Signal ") }) else { return lines.suffix(40) }
    return lines[max(0, start - 20)..<min(lines.count, start + 180)]
}
