import BrokerRPC
import BrowserLoginTestSupport
import Foundation
import ScriptedBrowser

#if canImport(Glibc)
    import Glibc
#endif

/// Everything the benchmarks run against, on loopback and in one temporary
/// directory: the real reference server, client files, and broker daemons
/// (release builds), under the session's (headless) keyring.
///
/// `@unchecked Sendable`: the mutable members (`server`, `serverOrigin`,
/// `broker`) are set during set-up on the main thread, before any worker
/// thread starts, and only read afterwards.
final class World: @unchecked Sendable {
    let dir: String
    let binDirectory: String
    let clientIds: [String]
    var server: SpawnedProcess?
    var serverOrigin = ""
    var broker: SpawnedProcess?
    let testEmailBase: String
    /// More arguments for the reference server, and more variables for brokers.
    var serverExtraArguments: [String] = []
    var brokerEnvironment: [String: String] = [:]
    /// Counts of the server's replay and reuse warnings already judged (the crash run).
    var seenReplays = 0
    var seenReuses = 0
    var foreignItems: Set<String> = []

    static let baseEmail = "ada@example.com"

    init(binDirectory: String, clientCount: Int, clientPrefix: String = "com.example.bench") throws {
        dir = try makeTemporaryDirectory("blb")
        for sub in ["config/browser-login/clients.d", "state", "run", "data", "server", "cold", "status"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        chmod(dir + "/run", 0o700)
        self.binDirectory = binDirectory
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        clientIds = (0..<clientCount).map { clientPrefix + String(letters[$0 % 26]) }
        testEmailBase = "ada+bltest\(UInt32.random(in: 0...UInt32.max))"
    }

    func stopAll() {
        broker?.stop(SIGKILL)
        server?.stop(SIGKILL)
        if ProcessInfo.processInfo.environment["BENCH_KEEP"] == nil { try? FileManager.default.removeItem(atPath: dir) }
    }

    var socketPath: String { dir + "/run/browser-login/broker.sock" }

    func returnURL(_ client: String) -> String { client + ":/callback" }

    func email(_ tag: Int) -> String { "\(testEmailBase)x\(tag)@example.com" }

    // MARK: Server

    func startServer() throws {
        let config: [String: Any] = [
            "clients": clientIds.map {
                ["clientId": $0, "appName": "Bench \($0.suffix(1))", "returnUrls": [returnURL($0)], "policy": "confirm"]
            },
            "testAccounts": [World.baseEmail],
            "rateLimits": [
                "create": ["burst": 100_000_000, "perMinute": 1_000_000_000],
                "exchange": ["burst": 100_000_000, "perMinute": 1_000_000_000],
                "codeEntry": ["burst": 100_000_000, "perMinute": 1_000_000_000],
            ],
        ]
        let data = try JSONSerialization.data(withJSONObject: config)
        _ = FileManager.default.createFile(atPath: dir + "/server/server.json", contents: data)
        let args =
            [
                binDirectory + "/browser-login-server", "serve", "--config", dir + "/server/server.json", "--listen",
                "127.0.0.1", "--port", "0", "--database", dir + "/server/server.sqlite", "--outbox", dir + "/server/outbox",
                "--ready-file", dir + "/server/ready", "--lifetime-ms", "300000",
            ] + serverExtraArguments
        server = try SpawnedProcess(args, environment: ProcessInfo.processInfo.environment, log: dir + "/server.log")
        try waitUntil(15, "the reference server", interval: 0.005) {
            FileManager.default.fileExists(atPath: dir + "/server/ready")
        }
        usleep(20_000)
        serverOrigin = try String(contentsOfFile: dir + "/server/ready", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        for id in clientIds {
            let text = """
                [Client]
                Id=\(id)
                AppName=Bench \(id.suffix(1))
                Server=\(serverOrigin)
                ReturnUrl=\(returnURL(id))

                """
            _ = FileManager.default.createFile(
                atPath: dir + "/config/browser-login/clients.d/\(id).conf", contents: Data(text.utf8))
        }
        // A client bound to this program (Peers=): every call on it checks the caller.
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let bound = """
            [Client]
            Id=\(boundClientId)
            AppName=Bench bound
            Server=\(serverOrigin)
            ReturnUrl=\(returnURL(boundClientId))
            Peers=\(me)

            """
        _ = FileManager.default.createFile(
            atPath: dir + "/config/browser-login/clients.d/\(boundClientId).conf", contents: Data(bound.utf8))
    }

    /// The client whose file's `Peers=` names the bench (never signed in).
    var boundClientId: String { (clientIds.first.map { String($0.dropLast()) } ?? "com.example.bench") + "bound" }

    // MARK: Broker

    func environment(notifySocket: String? = nil) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["XDG_CONFIG_HOME"] = dir + "/config"
        env["XDG_STATE_HOME"] = dir + "/state"
        env["XDG_RUNTIME_DIR"] = dir + "/run"
        env["XDG_DATA_DIRS"] = dir + "/data"
        env["BROWSER"] = "/bin/true"
        env.removeValue(forKey: "LISTEN_FDS")
        env.removeValue(forKey: "LISTEN_PID")
        env.removeValue(forKey: "LISTEN_FDNAMES")
        env.removeValue(forKey: "NOTIFY_SOCKET")
        if let notifySocket { env["NOTIFY_SOCKET"] = notifySocket }
        for (k, v) in brokerEnvironment { env[k] = v }
        return env
    }

    var brokerExecutable: String { binDirectory + "/browser-login-broker" }

    /// Starts a broker and waits for READY=1; answers it and the time from exec to READY=1 (ns).
    func spawnBroker(arguments: [String], log: String) throws -> (SpawnedProcess, UInt64) {
        let notify = try NotifySocket(path: dir + "/run/notify-\(UInt32.random(in: 0...UInt32.max))")
        let start = nowNanos()
        let child = try SpawnedProcess(
            [brokerExecutable] + arguments, environment: environment(notifySocket: notify.path), log: log)
        do {
            let ready = try notify.waitForReady()
            return (child, ready - start)
        } catch {
            child.stop(SIGKILL)
            throw BenchError("the broker did not become ready (\(error)); see \(log)")
        }
    }

    func startBroker() throws {
        (broker, _) = try spawnBroker(arguments: ["--socket", socketPath], log: dir + "/broker.log")
    }

    func rpc() throws -> RPCClient { try RPCClient(socketPath: socketPath, timeout: .seconds(60)) }

    // MARK: Sign-in

    /// One complete sign-in of `client`: login.start, the hosted page in a
    /// scripted browser, login.finish. Answers the login.finish round trip (ns).
    @discardableResult
    func signIn(_ rpc: RPCClient, client: String, emailTag: Int) throws -> UInt64 {
        let attempt = try rpc.call("login.start", params: ["client": .string(client), "openBrowser": false])
        guard let url = attempt["authorizeUrl"]?.stringValue else { throw BenchError("no authorizeUrl") }
        let callback = try ScriptedBrowser(serverOrigin: serverOrigin).signInAndAuthorize(
            authorizeURL: url, email: email(emailTag), code: "000000")
        let start = nowNanos()
        let finished = try rpc.call("login.finish", params: ["url": .string(callback)])
        let elapsed = nowNanos() - start
        guard finished["state"]?.stringValue == "completed" else { throw BenchError("sign-in did not complete") }
        return elapsed
    }
}
