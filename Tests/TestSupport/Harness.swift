import BrokerRPC
import Foundation
import ScriptedBrowser

#if canImport(Glibc)
    import Glibc
#endif

/// One isolated world for an end-to-end test: temporary XDG directories, a
/// reference server on a port of its own, client files, and the broker
/// daemon with a real gnome-keyring on a session bus of its own — all real
/// binaries talking over real sockets. Nothing is shared with another
/// harness, so tests run in parallel.
public final class Harness: @unchecked Sendable {
    // Safe: a harness belongs to one test, which uses it from one task.
    public let dir: String
    public var server: Child?
    public var broker: Child?
    public var serverOrigin = ""
    public var serverPort = 0
    public var serverArguments: [String] = []
    public let testEmail: String
    public var brokerEnvironment: [String: String] = [:]
    /// The harness's own keyring, started with the first broker unless
    /// `brokerEnvironment` names a session bus of the test's choosing.
    public private(set) var keyring: PrivateKeyring?

    public static let baseEmail = "ada@example.com"

    public init() throws {
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

    public func stopAll() {
        reportCrash(broker, "broker")
        reportCrash(server, "server")
        broker?.stop(SIGKILL)
        server?.stop(SIGKILL)
        keyring?.stop()
    }

    /// A daemon that crashed by itself fails whatever test it was in, often
    /// far from the cause ("the broker closed the connection"): its signal and
    /// the end of its log (which carries no secrets) go to standard error,
    /// before the test's directory is removed.
    private func reportCrash(_ child: Child?, _ name: String) {
        guard let child, let signal = child.crashSignal else { return }
        let text =
            "the \(name) (pid \(child.pid)) crashed with signal \(signal); the end of its log (\(child.log)):\n"
            + crashExcerpt(ofLog: child.output).map { "  | \($0)\n" }.joined()
        FileHandle.standardError.write(Data(text.utf8))
    }

    public var socketPath: String { dir + "/run/browser-login/broker.sock" }
    public var databasePath: String { dir + "/state/browser-login/state.sqlite" }
    public var brokerLog: String { dir + "/broker.log" }

    // MARK: Server

    /// Starts the reference server on a free loopback port.
    public func startServer(
        lifetimeMs: Int = 120_000, accessTokenMs: Int? = nil, sessionMs: Int? = nil, graceMs: Int? = nil,
        exchangeDelayMs: Int? = nil,
        clients: [(id: String, name: String, returnURL: String)] = [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback")
        ], port: Int = 0, extraConfig: [String: Any] = [:]
    ) throws {
        var config: [String: Any] = [
            "clients": clients.map {
                ["clientId": $0.id, "appName": $0.name, "returnUrls": [$0.returnURL], "policy": "confirm"]
            },
            "testAccounts": [Harness.baseEmail],
            "rateLimits": [
                "create": ["burst": 1000, "perMinute": 6000], "exchange": ["burst": 1000, "perMinute": 6000],
                "codeEntry": ["burst": 1000, "perMinute": 6000],
            ],
        ]
        // Members of the server's configuration file a test adds (e.g. `passkeyRpIds`).
        config.merge(extraConfig) { _, added in added }
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

    public func launchServer() throws {
        try? FileManager.default.removeItem(atPath: dir + "/server/ready")
        server = try Child(
            binDirectory + "/browser-login-server", serverArguments, environment: ProcessInfo.processInfo.environment,
            log: dir + "/server.log")
        let server = self.server
        try waitUntil(15, "the reference server to be ready") {
            // A server that could not start says why in its log ("address in use").
            if let server, !server.isRunning { throw HarnessError("the server exited:\n\(server.output)", fatal: true) }
            return FileManager.default.fileExists(atPath: dir + "/server/ready")
        }
        let ready = try String(contentsOfFile: dir + "/server/ready", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        serverOrigin = ready
        serverPort = Int(ready.split(separator: ":").last ?? "") ?? 0
        if let i = serverArguments.firstIndex(of: "--port") { serverArguments[i + 1] = "\(serverPort)" }
    }

    /// Stops the server (it can be started again on the same port).
    public func stopServer() { server?.stop() }

    // MARK: Clients and broker

    public func writeClient(
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

    public func environment() -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["XDG_CONFIG_HOME"] = dir + "/config"
        env["XDG_STATE_HOME"] = dir + "/state"
        env["XDG_RUNTIME_DIR"] = dir + "/run"
        env["XDG_DATA_DIRS"] = dir + "/data"
        env["BROWSER"] = "/bin/true"
        if let keyring { env["DBUS_SESSION_BUS_ADDRESS"] = keyring.address }
        for (k, v) in brokerEnvironment { env[k] = v }
        return env
    }

    /// Starts the harness's own keyring unless the test chose a session bus.
    public func startKeyringIfNeeded() throws {
        guard keyring == nil, brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] == nil else { return }
        keyring = try PrivateKeyring(dir: dir + "/keyring")
    }

    /// `secret-tool lookup` for a broker item in the harness's keyring.
    public func keyringLookup(_ attributes: [String: String]) -> String? {
        BrowserLoginTestSupport.keyringLookup(attributes, busAddress: keyring?.address)
    }

    public func startBroker(arguments: [String] = ["--log-level", "debug"]) throws {
        try startKeyringIfNeeded()
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
    public func brokerPostMortem() -> String {
        guard let broker, broker.isRunning else { return "broker log:\n\(broker?.output ?? "")" }
        var stacks = "(gdb not installed)"
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb") {
            stacks =
                (try? spawnAndWait(
                    ["/usr/bin/gdb", "-p", "\(broker.pid)", "-batch", "-nx", "-ex", "thread apply all bt 30"]
                ).stdout) ?? "(gdb failed)"
            try? stacks.write(toFile: dir + "/broker-stacks.txt", atomically: false, encoding: .utf8)
        }
        return "broker log:\n\(broker.output)\nbroker threads:\n\(stacks)"
    }

    public func restartBroker() throws {
        broker?.stop()
        try startBroker()
    }

    public func rpc(timeout: Duration = .seconds(60)) throws -> RPCClient {
        try RPCClient(socketPath: socketPath, timeout: timeout)
    }

    /// Runs the CLI against this broker.
    public func cli(_ args: [String]) throws -> (status: Int32, out: String, err: String) {
        try runProgram(binDirectory + "/browser-login", ["--socket", socketPath] + args, environment: environment())
    }

    // MARK: Sign-in

    public func browser() throws -> ScriptedBrowser { try ScriptedBrowser(serverOrigin: serverOrigin) }

    /// Starts a login and plays the user on the hosted page; answers the
    /// broker's attempt and the callback URL the browser was sent to.
    public func startAndAuthorize(client: String = "com.example.notes", rpc: RPCClient? = nil) throws -> (
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
    public func signIn(client: String = "com.example.notes") throws -> JSONValue {
        let (attempt, callback) = try startAndAuthorize(client: client)
        let result = try cli(["finish", callback])
        guard result.status == 0 else { throw HarnessError("finish failed: \(result.err)") }
        return attempt
    }

    /// Makes the broker's "browser" the scripted user agent (as `make demo`
    /// does): a `login.start` that opens the browser then signs in by itself
    /// as `testEmail` and delivers the callback with `browser-login finish`.
    /// Call after `startServer` and before `startBroker`.
    public func useScriptedUserAgent() {
        brokerEnvironment["BROWSER"] = binDirectory + "/browser-login-demo-agent %s"
        brokerEnvironment["DEMO_SERVER_ORIGIN"] = serverOrigin
        brokerEnvironment["DEMO_EMAIL"] = testEmail
        brokerEnvironment["DEMO_CODE"] = "000000"
        brokerEnvironment["DEMO_DELIVER"] = binDirectory + "/browser-login --socket " + socketPath + " finish"
    }

    /// The server's attempt id, from an authorize URL (`…?attempt=ID`).
    public static func serverAttemptId(_ authorizeURL: String) -> String {
        String(authorizeURL.split(separator: "=").last ?? "")
    }

    /// Every byte of the broker's SQLite files.
    public func databaseBytes() -> String {
        ["", "-wal", "-shm"].map {
            (try? Data(contentsOf: URL(fileURLWithPath: databasePath + $0))).map { String(decoding: $0, as: UTF8.self) }
                ?? ""
        }.joined()
    }
}
