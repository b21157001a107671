import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Synchronization
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A session bus at a fixed address and a gnome-keyring on it, each of which
/// the test can stop and start again (same address, same keyring files), so
/// the broker sees its keyring restarted and its bus die and come back.
final class RestartableKeyring: @unchecked Sendable {
    // Safe: used by one test from one task.
    let dir: String
    let address: String
    private var busPid: Int32 = 0
    static let password = "restartable-pass"

    init(dir: String) throws {
        self.dir = dir
        for sub in ["run", "data", "empty-data"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        chmod(dir + "/run", 0o700)
        address = "unix:path=\(dir)/bus"
        try startBus()
    }

    deinit { stopAll() }

    func startBus() throws {
        unlink(dir + "/bus")
        let out = try PrivateKeyring.run(
            "/usr/bin/dbus-daemon", ["--session", "--fork", "--address=\(address)", "--print-pid=1"], env: [:])
        guard let pid = Int32(out.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw HarnessError("dbus-daemon did not start: \(out)")
        }
        busPid = pid
    }

    /// Starts gnome-keyring-daemon on the bus: unlocked with the password,
    /// locked (started without it), or over an empty data directory (no
    /// default keyring at all).
    enum Start { case unlocked, withoutPassword, withoutKeyrings }

    func startKeyring(_ how: Start) throws {
        let env = [
            "DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": dir + "/run",
            "XDG_DATA_HOME": dir + (how == .withoutKeyrings ? "/empty-data" : "/data"),
        ]
        let command =
            how == .unlocked
            ? "printf %s \(Self.password) | gnome-keyring-daemon --replace --daemonize --unlock --components=secrets"
            : "gnome-keyring-daemon --replace --daemonize --components=secrets"
        try PrivateKeyring.run("/bin/sh", ["-c", command + " >/dev/null"], env: env)
        try PrivateKeyring.run("/usr/bin/gdbus", ["wait", "--session", "--timeout", "10", "org.freedesktop.secrets"], env: env)
        if how == .unlocked {
            // Creates the default collection on first use.
            try PrivateKeyring.run("/bin/sh", ["-c", "printf x | secret-tool store --label=probe test probe"], env: env)
        }
    }

    /// The keyring daemon's pid, from the bus.
    func keyringPid() -> Int32? {
        let out = try? PrivateKeyring.run(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                "--method", "org.freedesktop.DBus.GetConnectionUnixProcessID", "org.freedesktop.secrets",
            ], env: ["DBUS_SESSION_BUS_ADDRESS": address])
        // "(uint32 1234,)": the last run of digits.
        return out.flatMap { text in Int32(text.split { !$0.isNumber }.last ?? "") }
    }

    func stopKeyring() {
        guard let pid = keyringPid() else { return }
        kill(pid, SIGTERM)
        for _ in 0..<200 where kill(pid, 0) == 0 { usleep(20_000) }
    }

    func hasOwner(_ name: String) -> Bool {
        let out = try? PrivateKeyring.run(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                "--method", "org.freedesktop.DBus.NameHasOwner", name,
            ], env: ["DBUS_SESSION_BUS_ADDRESS": address])
        return out?.contains("true") == true
    }

    func stopBus() {
        guard busPid > 0 else { return }
        kill(busPid, SIGTERM)
        for _ in 0..<200 where kill(busPid, 0) == 0 { usleep(20_000) }
        busPid = 0
    }

    /// Locks the default keyring, as the desktop's "lock" does.
    func lock() throws {
        try PrivateKeyring.run(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", "/org/freedesktop/secrets",
                "--method", "org.freedesktop.Secret.Service.Lock", "['/org/freedesktop/secrets/collection/login']",
            ], env: ["DBUS_SESSION_BUS_ADDRESS": address])
    }

    func stopAll() {
        stopKeyring()
        stopBus()
    }
}

/// "Cannot read the vault now" is never "the session is gone" (issue 14,
/// item 8): a keyring restarted without the password or without its default
/// keyring, and a session bus that dies, leave sign-ins intact, and the
/// broker recovers on its own once the real keyring is back.
@Suite("Vault faults end to end", .dedicatedThread)
struct VaultRecoveryTests {
    func me(_ rpc: RPCClient) throws -> JSONValue {
        try rpc.call("http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
    }

    func signedIn() throws -> (Harness, RestartableKeyring) {
        let h = try Harness()
        let keyring = try RestartableKeyring(dir: h.dir + "/keyring")
        try keyring.startKeyring(.unlocked)
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = keyring.address
        try h.startBroker()
        try h.signIn()
        #expect(try me(try h.rpc())["status"] == 200)
        return (h, keyring)
    }

    @Test func aKeyringThatCannotBeReadNowSignsNobodyOut() throws {
        let (h, keyring) = try signedIn()
        defer { keyring.stopAll() }
        h.broker?.stop()
        for start in [RestartableKeyring.Start.withoutPassword, .withoutKeyrings] {
            keyring.stopKeyring()
            try keyring.startKeyring(start)
            try h.startBroker(arguments: ["--log-level", "debug", "--verify-interval", "0.2"])
            let rpc = try h.rpc()
            // The start-up checks and a few verification rounds run against the unreadable keyring.
            usleep(1_500_000)
            #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
            let code = try errorCode(rpc, "http.request", ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
            #expect(code == (start == .withoutPassword ? "VAULT_LOCKED" : "VAULT_UNAVAILABLE"), "\(start)")
            h.broker?.stop()
        }
        // The real keyring is back: the same session works, with no new sign-in.
        keyring.stopKeyring()
        try keyring.startKeyring(.unlocked)
        try h.startBroker()
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
        #expect(try me(rpc)["status"] == 200)
    }

    @Test func aKeyringThatDiesMidWriteLosesNothing() throws {
        let (h, keyring) = try signedIn()
        defer { keyring.stopAll() }
        let rpc = try h.rpc()
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        // The keyring freezes, so the next write hangs in it; then it dies mid-write.
        let pid = try #require(keyring.keyringPid())
        kill(pid, SIGSTOP)
        let answer = Mutex<String??>(nil)
        let socket = h.socketPath
        let starter = Thread {
            let code = try? errorCode(
                RPCClient(socketPath: socket, timeout: .seconds(60)), "login.start",
                ["client": "com.example.notes", "openBrowser": false])
            answer.withLock { $0 = .some(code) }
        }
        starter.start()
        usleep(500_000)
        #expect(answer.withLock { $0 } == nil, "login.start should be waiting on the frozen keyring")
        kill(pid, SIGKILL)
        try waitUntil(30, "login.start to answer") { answer.withLock { $0 } != nil }
        #expect(answer.withLock { $0 } == .some("VAULT_UNAVAILABLE"))
        // Nothing half-made is left: no attempt, and the broker still serves.
        #expect(try rpc.call("login.list", params: ["states": ["starting", "waiting"]]).arrayValue?.isEmpty == true)
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
        // The keyring is back: a new sign-in works, with no broker restart.
        try keyring.startKeyring(.unlocked)
        try waitUntil(15, "the keyring to be usable") { try rpc.call("broker.info")["vaultAvailable"] == true }
        try h.signIn()
        #expect(try me(rpc)["status"] == 200)
    }

    @Test func theBrokerOutlivesItsSessionBusAndReconnects() throws {
        let (h, keyring) = try signedIn()
        defer { keyring.stopAll() }
        try waitUntil(10, "the broker to own its bus name") { keyring.hasOwner("org.browserlogin.Broker") }
        keyring.stopKeyring()
        keyring.stopBus()
        usleep(500_000)
        #expect(h.broker?.isRunning == true)
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
        // broker.info asks the keyring at most every 2 s.
        try waitUntil(10, "the broker to see the keyring gone") { try rpc.call("broker.info")["vaultAvailable"] == false }
        // The bus and the keyring come back at the same address: no restart needed.
        try keyring.startBus()
        try keyring.startKeyring(.unlocked)
        try waitUntil(15, "the keyring to be used again") { try rpc.call("broker.info")["vaultAvailable"] == true }
        try waitUntil(15, "the broker to own its bus name again") { keyring.hasOwner("org.browserlogin.Broker") }
        // The vault works for real: sign out (moves the tokens) and sign in again.
        #expect(try rpc.call("session.signOut", params: ["client": "com.example.notes"])["status"] == "signedOut")
        try h.signIn()
        #expect(try me(rpc)["status"] == 200)
        #expect(h.broker?.isRunning == true)
    }

    /// `broker.info` follows the Secret Service's change signals (issue 19):
    /// polling it does not ask the keyring, and a lock is seen at once.
    @Test func brokerInfoFollowsTheKeyringsSignalsInsteadOfAskingIt() throws {
        let (h, keyring) = try signedIn()
        defer { keyring.stopAll() }
        try waitUntil(15, "the broker to own its bus name") { keyring.hasOwner("org.browserlogin.Broker") }
        let rpc = try h.rpc()
        // The keyring's method calls and change signals, as they happen.
        let monitor = try SpawnedProcess(
            [
                "/usr/bin/dbus-monitor", "--address", keyring.address,
                "type='method_call',path_namespace='/org/freedesktop/secrets'",
                "type='signal',interface='org.freedesktop.Secret.Service'",
            ],
            environment: ProcessInfo.processInfo.environment, log: h.dir + "/monitor.log")
        defer { _ = monitor.stop() }
        func log() -> String { (try? String(contentsOfFile: monitor.log, encoding: .utf8)) ?? "" }
        try waitUntil(10, "dbus-monitor to attach") { log().contains("NameAcquired") }
        // Quiet first: the sign-in's last keyring writes (and their signals) are over
        // once nothing reaches the keyring for 1.5 s while broker.info is asked.
        var quiet = 0
        var size = log().utf8.count
        try waitUntil(30, "the keyring to be quiet", interval: 0.5) {
            guard try rpc.call("broker.info")["vaultLocked"] == false else { return false }
            let now = log().utf8.count
            quiet = now == size ? quiet + 1 : 0
            size = now
            return quiet >= 3
        }
        // Then an app polls for 3 s, longer than the 2 s the answer is kept
        // without the signals: the keyring is not asked once.
        for _ in 0..<30 {
            #expect(try rpc.call("broker.info")["vaultLocked"] == false)
            usleep(100_000)
        }
        let calls = String(log().utf8.dropFirst(size)) ?? ""
        #expect(!calls.contains("method call"), "the broker asked the keyring while polled: \(calls)")
        // Another app stores and removes an item of its own: the collection's
        // PropertiesChanged (`Items`) says nothing about its lock, so the answer
        // is still the one kept, and the keyring is not asked again.
        // Its signals do not even reach the broker's D-Bus thread: the message filter drops them.
        var other = ProcessInfo.processInfo.environment
        other["DBUS_SESSION_BUS_ADDRESS"] = keyring.address
        func busThreadSwitches() -> Int {
            ProcFS.contextSwitches(pid: h.broker?.pid ?? -1).values.filter { $0.name == "browser-login.d" }
                .reduce(0) { $0 + $1.count }
        }
        let busThreadBefore = busThreadSwitches()
        let app = try spawnAndWait(
            ["/bin/sh", "-c", "printf x | secret-tool store --label=other app other-item && secret-tool clear app other-item"],
            environment: other)
        #expect(app.status == 0, "secret-tool failed: \(app.stdout)")
        usleep(200_000)
        #expect(busThreadSwitches() == busThreadBefore, "another app's keyring write woke the broker's D-Bus thread")
        let afterApp = log().utf8.count
        for _ in 0..<30 {
            #expect(try rpc.call("broker.info")["vaultLocked"] == false)
            usleep(100_000)
        }
        let askedAfterApp = String(log().utf8.dropFirst(afterApp)) ?? ""
        #expect(
            !askedAfterApp.contains("method call"),
            "another app's keyring write made the broker ask the keyring: \(askedAfterApp)")
        // Locked behind the broker's back: the signal makes the next answer ask.
        try keyring.lock()
        try waitUntil(10, "broker.info to see the keyring locked") { try rpc.call("broker.info")["vaultLocked"] == true }
    }
}
