import BrokerRPC
import BrowserLoginProtocol
import Foundation
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The built executables: `$BL_BIN_DIR`, else those of the build this test
/// bundle belongs to (its own directory: a `--scratch-path` or sanitizer
/// build tests its own binaries), else `.build/debug` of this package.
let binDirectory: String = {
    if let dir = ProcessInfo.processInfo.environment["BL_BIN_DIR"], !dir.isEmpty { return dir }
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        let dir = URL(fileURLWithPath: exe).deletingLastPathComponent().path
        if FileManager.default.isExecutableFile(atPath: dir + "/browser-login-broker") { return dir }
    }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    return root.appendingPathComponent(".build/debug").path
}()

/// Where tests keep their files: `$TMPDIR` (scripts/test gives every run a
/// directory of its own and fails the run if anything is left in it), else
/// /tmp when `$TMPDIR` is unset or too long for the Unix socket paths made
/// inside (108 bytes at most).
let temporaryBase: String = {
    var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? ""
    while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
    return !base.isEmpty && base.utf8.count <= 48 ? base : "/tmp"
}()

/// A new private directory `temporaryBase/PREFIX-XXXXXX`.
func makeTemporaryDirectory(_ prefix: String) throws -> String {
    var template = Array("\(temporaryBase)/\(prefix)-XXXXXX".utf8CString)
    guard mkdtemp(&template) != nil else { throw HarnessError("mkdtemp failed: errno \(errno)") }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Set `BL_KEEP_TEST_DIRS=1` to keep each harness's directory (logs, state) for a post-mortem.
let keepTestDirectories = ProcessInfo.processInfo.environment["BL_KEEP_TEST_DIRS"] == "1"

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    /// Ends a `waitUntil` at once instead of counting as "not yet".
    var fatal = false
    init(_ d: String, fatal: Bool = false) {
        description = d
        self.fatal = fatal
    }
}

/// A running child process with its output in a log file.
final class Child: @unchecked Sendable {
    // Safe: `process` is only touched from the test that owns the child.
    let process: Process
    let log: String

    init(_ executable: String, _ arguments: [String], environment: [String: String], log: String) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        // Appended to, never truncated: a restarted daemon keeps its predecessor's log.
        if !FileManager.default.fileExists(atPath: log) { _ = FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        self.log = log
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }

    /// Sends `signal`; a child still running after 10 s is killed.
    func stop(_ signal: Int32 = SIGTERM) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
}

/// Polls `condition` until it is true. A `HarnessError.fatal` thrown by the
/// condition ends the wait at once; other errors count as "not yet", and the
/// last one is part of the time-out message.
func waitUntil(_ seconds: Double = 10, _ what: String, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    var lastError: (any Error)?
    while Date() < deadline {
        do {
            if try condition() { return }
        } catch let error as HarnessError where error.fatal {
            throw error
        } catch {
            lastError = error
        }
        usleep(20_000)
    }
    throw HarnessError("timed out waiting for \(what)" + (lastError.map { " (last error: \($0))" } ?? ""))
}

/// One isolated world for an end-to-end test: temporary XDG directories, a
/// reference server, client files, and the broker daemon — all real binaries
/// talking over real sockets, with the session's real keyring.
final class Harness: @unchecked Sendable {
    // Safe: a harness belongs to one test, which uses it from one task.
    let dir: String
    var server: Child?
    var broker: Child?
    var serverOrigin = ""
    var serverPort = 0
    var serverArguments: [String] = []
    let testEmail: String
    var brokerEnvironment: [String: String] = [:]

    static let baseEmail = "ada@example.com"

    init() throws {
        dir = try makeTemporaryDirectory("ble")
        for sub in ["config/browser-login/clients.d", "state", "run", "data", "server"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        chmod(dir + "/run", 0o700)
        testEmail = "ada+bltest\(UInt32.random(in: 0...UInt32.max))@example.com"
    }

    /// Stops the children and removes the directory, whether the test passed or not.
    deinit {
        stopAll()
        if !keepTestDirectories { try? FileManager.default.removeItem(atPath: dir) }
    }

    func stopAll() {
        broker?.stop(SIGKILL)
        server?.stop(SIGKILL)
    }

    var socketPath: String { dir + "/run/browser-login/broker.sock" }
    var databasePath: String { dir + "/state/browser-login/state.sqlite" }
    var brokerLog: String { dir + "/broker.log" }

    // MARK: Server

    /// Starts the reference server on a free loopback port.
    func startServer(
        lifetimeMs: Int = 120_000, accessTokenMs: Int? = nil, sessionMs: Int? = nil, graceMs: Int? = nil,
        exchangeDelayMs: Int? = nil,
        clients: [(id: String, name: String, returnURL: String)] = [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback")
        ], port: Int = 0
    ) throws {
        let config: [String: Any] = [
            "clients": clients.map {
                ["clientId": $0.id, "appName": $0.name, "returnUrls": [$0.returnURL], "policy": "confirm"]
            },
            "testAccounts": [Harness.baseEmail],
            "rateLimits": [
                "create": ["burst": 1000, "perMinute": 6000], "exchange": ["burst": 1000, "perMinute": 6000],
                "codeEntry": ["burst": 1000, "perMinute": 6000],
            ],
        ]
        let data = try JSONSerialization.data(withJSONObject: config)
        _ = FileManager.default.createFile(atPath: dir + "/server/server.json", contents: data)
        var args = [
            "serve", "--config", dir + "/server/server.json", "--listen", "127.0.0.1", "--port", "\(port)",
            "--database", dir + "/server/server.sqlite", "--outbox", dir + "/server/outbox",
            "--ready-file", dir + "/server/ready", "--lifetime-ms", "\(lifetimeMs)",
        ]
        if let accessTokenMs { args += ["--access-token-lifetime-ms", "\(accessTokenMs)"] }
        if let sessionMs { args += ["--session-lifetime-ms", "\(sessionMs)"] }
        if let graceMs { args += ["--refresh-grace-ms", "\(graceMs)"] }
        if let exchangeDelayMs { args += ["--test-exchange-delay-ms", "\(exchangeDelayMs)"] }
        serverArguments = args
        try launchServer()
    }

    func launchServer() throws {
        try? FileManager.default.removeItem(atPath: dir + "/server/ready")
        server = try Child(
            binDirectory + "/browser-login-server", serverArguments, environment: ProcessInfo.processInfo.environment,
            log: dir + "/server.log")
        try waitUntil(15, "the reference server to be ready") {
            FileManager.default.fileExists(atPath: dir + "/server/ready")
        }
        let ready = try String(contentsOfFile: dir + "/server/ready", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        serverOrigin = ready
        serverPort = Int(ready.split(separator: ":").last ?? "") ?? 0
        if let i = serverArguments.firstIndex(of: "--port") { serverArguments[i + 1] = "\(serverPort)" }
    }

    /// Stops the server (it can be started again on the same port).
    func stopServer() { server?.stop() }

    // MARK: Clients and broker

    func writeClient(
        file: String = "notes.conf", id: String = "com.example.notes", appName: String = "Example Notes",
        returnURL: String = "com.example.notes:/callback", extra: String = ""
    ) {
        let text = """
            [Client]
            Id=\(id)
            AppName=\(appName)
            Server=\(serverOrigin)
            ReturnUrl=\(returnURL)
            \(extra)
            """
        _ = FileManager.default.createFile(
            atPath: dir + "/config/browser-login/clients.d/" + file, contents: Data(text.utf8))
    }

    func environment() -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["XDG_CONFIG_HOME"] = dir + "/config"
        env["XDG_STATE_HOME"] = dir + "/state"
        env["XDG_RUNTIME_DIR"] = dir + "/run"
        env["XDG_DATA_DIRS"] = dir + "/data"
        env["BROWSER"] = "/bin/true"
        for (k, v) in brokerEnvironment { env[k] = v }
        return env
    }

    func startBroker(arguments: [String] = ["--log-level", "debug"]) throws {
        broker = try Child(binDirectory + "/browser-login-broker", arguments, environment: environment(), log: brokerLog)
        var probes = 0
        do {
            try waitUntil(15, "the broker socket") {
                guard broker?.isRunning == true else {
                    throw HarnessError("broker exited:\n\(broker?.output ?? "")", fatal: true)
                }
                probes += 1
                let client = try RPCClient(socketPath: socketPath, timeout: .seconds(2))
                _ = try client.call("broker.info")
                return true
            }
        } catch let error as HarnessError where !error.fatal {
            // Still running but not answering: say where it is stuck.
            throw HarnessError("\(error) after \(probes) probes\n\(brokerPostMortem())")
        }

    }

    /// The broker's log and every thread's stack (gdb), for a broker that does not answer.
    func brokerPostMortem() -> String {
        guard let broker, broker.isRunning else { return "broker log:\n\(broker?.output ?? "")" }
        var stacks = "(gdb not installed)"
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb") {
            stacks =
                (try? spawnAndWait(
                    ["/usr/bin/gdb", "-p", "\(broker.pid)", "-batch", "-nx", "-ex", "thread apply all bt 30"],
                    environment: ProcessInfo.processInfo.environment)) ?? "(gdb failed)"
            try? stacks.write(toFile: dir + "/broker-stacks.txt", atomically: false, encoding: .utf8)
        }
        return "broker log:\n\(broker.output)\nbroker threads:\n\(stacks)"
    }

    func restartBroker() throws {
        broker?.stop()
        try startBroker()
    }

    func rpc(timeout: Duration = .seconds(60)) throws -> RPCClient {
        try RPCClient(socketPath: socketPath, timeout: timeout)
    }

    /// Runs the CLI against this broker.
    func cli(_ args: [String]) throws -> (status: Int32, out: String, err: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binDirectory + "/browser-login")
        process.arguments = ["--socket", socketPath] + args
        process.environment = environment()
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
    }

    // MARK: Sign-in

    func browser() throws -> ScriptedBrowser { try ScriptedBrowser(serverOrigin: serverOrigin) }

    /// Starts a login and plays the user on the hosted page; answers the
    /// broker's attempt and the callback URL the browser was sent to.
    func startAndAuthorize(client: String = "com.example.notes", rpc: RPCClient? = nil) throws -> (
        attempt: JSONValue, callback: String
    ) {
        let rpc = try rpc ?? self.rpc()
        let attempt = try rpc.call("login.start", params: ["client": .string(client), "openBrowser": false])
        guard let url = attempt["authorizeUrl"]?.stringValue else { throw HarnessError("no authorizeUrl") }
        let callback = try browser().signInAndAuthorize(authorizeURL: url, email: testEmail, code: "000000")
        return (attempt, callback)
    }

    /// A complete sign-in through `browser-login finish`.
    @discardableResult
    func signIn(client: String = "com.example.notes") throws -> JSONValue {
        let (attempt, callback) = try startAndAuthorize(client: client)
        let result = try cli(["finish", callback])
        guard result.status == 0 else { throw HarnessError("finish failed: \(result.err)") }
        return attempt
    }

    /// The server's attempt id, from an authorize URL (`…?attempt=ID`).
    static func serverAttemptId(_ authorizeURL: String) -> String {
        String(authorizeURL.split(separator: "=").last ?? "")
    }

    /// Every byte of the broker's SQLite files.
    func databaseBytes() -> String {
        ["", "-wal", "-shm"].map {
            (try? Data(contentsOf: URL(fileURLWithPath: databasePath + $0))).map { String(decoding: $0, as: UTF8.self) }
                ?? ""
        }.joined()
    }
}

/// `secret-tool lookup` for a broker item (the test reads the real keyring).
func keyringLookup(_ attributes: [String: String]) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/secret-tool")
    process.arguments = ["lookup"] + attributes.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
    let out = Pipe()
    process.standardOutput = out
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return nil }
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil
}

/// Runs a program to completion with `posix_spawn` (empty signal mask, output
/// to a file) and answers its standard output. Used for commands that fork
/// daemons, which Foundation's `Process` does not reap reliably.
func spawnAndWait(_ argv: [String], environment: [String: String]) throws -> String {
    let outPath = "\(temporaryBase)/bl-spawn-\(UUID().uuidString)"
    defer { unlink(outPath) }
    let pid = try spawn(argv, environment: environment, output: outPath, append: false, errors: "/dev/null")
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
}

/// Starts `argv` with `posix_spawn`: standard input from /dev/null, standard
/// output to `output` (appended or truncated), standard error to `errors`
/// (nil: with standard output), and an empty signal mask.
func spawn(_ argv: [String], environment: [String: String], output: String, append: Bool, errors: String?) throws
    -> pid_t
{
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o600)
    if let errors {
        posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY, 0)
    } else {
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
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

/// A long-running program started with `posix_spawn` (empty signal mask,
/// output to a file), for commands that run daemons of their own
/// (`dbus-run-session`): Foundation's `Process` does not reap those reliably.
final class SpawnedProcess: @unchecked Sendable {
    // Safe: `pid` is immutable; the owning test alone calls `stop()`.
    let pid: pid_t
    let log: String

    init(_ argv: [String], environment: [String: String], log: String) throws {
        self.log = log
        pid = try spawn(argv, environment: environment, output: log, append: true, errors: nil)
    }

    /// Whether it has exited (reaps it when it has).
    var hasExited: Bool { waitForExit(0) }

    private var reaped = false

    /// Waits up to `seconds` for it to exit; true (and reaped) when it has.
    func waitForExit(_ seconds: Double) -> Bool {
        if reaped { return true }
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            let rc = waitpid(pid, &status, WNOHANG)
            if rc == pid || (rc < 0 && errno == ECHILD) {
                reaped = true
                return true
            }
            usleep(20_000)
        } while Date() < deadline
        return false
    }

    /// Sends SIGTERM, waits up to 10 s, then SIGKILL; reaps it. Idempotent.
    func stop() {
        if reaped { return }
        kill(pid, SIGTERM)
        if waitForExit(10) { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
    }

    var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
}

/// Whether `pid` is gone: no such process, or a zombie (a daemon that forked
/// away is reaped by whoever adopted it, not by the test).
func processIsGone(_ pid: pid_t) -> Bool {
    guard pid > 0 else { return true }
    if kill(pid, 0) != 0 && errno == ESRCH { return true }
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return true }
    return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
}

/// Sends `signal` to `pid` and waits up to `seconds` for it to be gone, then SIGKILL.
func terminate(_ pid: pid_t, signal: Int32 = SIGTERM, seconds: Double = 10) {
    guard pid > 0, !processIsGone(pid) else { return }
    kill(pid, signal)
    let deadline = Date().addingTimeInterval(seconds)
    while !processIsGone(pid) && Date() < deadline { usleep(20_000) }
    if !processIsGone(pid) {
        kill(pid, SIGKILL)
        while !processIsGone(pid) { usleep(10_000) }
    }
}

/// The direct children of `pid`, from /proc.
func childProcesses(of pid: pid_t) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { name -> pid_t? in
        guard let child = pid_t(name),
            let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 1 && pid_t(fields[1]) == pid ? child : nil
    }
}

/// A session bus configuration like the system's session.conf, but listening
/// in `socketDirectory` (not /tmp), with the standard service directories
/// (so `$XDG_DATA_HOME/dbus-1/services` activates) unless `services` is false.
func writeSessionBusConfiguration(at path: String, socketDirectory: String, services: Bool = true) throws {
    let text = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
          "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <keep_umask/>
          <listen>unix:dir=\(socketDirectory)</listen>
          <auth>EXTERNAL</auth>
          \(services ? "<standard_session_servicedirs/>" : "")
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>

        """
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
}
