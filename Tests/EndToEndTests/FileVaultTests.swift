import BrokerCore
import BrokerRPC
import BrokerVault
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A session bus of the test's own with nothing on it: no gnome-keyring, no
/// Secret Service, as on a server reached over SSH.
final class BareBus: @unchecked Sendable {
    // Safe: used by one test from one task; `stop` is idempotent.
    let address: String
    let pid: Int32
    private var stopped = false

    init(dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir + "/run", withIntermediateDirectories: true)
        chmod(dir + "/run", 0o700)
        try writeSessionBusConfiguration(at: dir + "/bus.conf", socketDirectory: dir + "/run", services: false)
        let out = try PrivateKeyring.run(
            "/usr/bin/dbus-daemon", ["--config-file=\(dir)/bus.conf", "--fork", "--print-address=1", "--print-pid=1"],
            env: [:])
        let lines = out.split(separator: "\n").map(String.init)
        guard lines.count >= 2, let pid = Int32(lines[1]) else { throw HarnessError("dbus-daemon did not start: \(out)") }
        address = lines[0]
        self.pid = pid
    }

    deinit { stop() }

    func stop() {
        if stopped { return }
        stopped = true
        terminate(pid)
    }

    /// Whether org.freedesktop.secrets has an owner on this bus.
    func hasSecretService() throws -> Bool {
        let out = try PrivateKeyring.run(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                "--method", "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.secrets",
            ], env: ["DBUS_SESSION_BUS_ADDRESS": address])
        return out.contains("true")
    }
}

/// `Vault=file` end to end: the real daemon, the reference server, a
/// session bus without a Secret Service, and the real kernel user keyring.
@Suite("The file vault", .dedicatedThread)
struct FileVaultTests {
    static let notes = "com.example.notes"

    /// A harness whose broker's bus has no Secret Service, and broker.conf saying `conf`.
    static func world(_ conf: String?) throws -> (Harness, BareBus) {
        let h = try Harness()
        let bus = try BareBus(dir: h.dir + "/bus")
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        try #require(try !bus.hasSecretService())
        if let conf { try Data(conf.utf8).write(to: URL(fileURLWithPath: h.dir + "/config/browser-login/broker.conf")) }
        try h.startServer()
        h.writeClient()
        return (h, bus)
    }

    static func vaultDirectory(_ h: Harness) -> String { h.dir + "/state/browser-login/vault" }

    /// Every file under `directory`, as text.
    static func allFiles(_ directory: String) -> String {
        var text = ""
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            if let data = FileManager.default.contents(atPath: directory + "/" + name) {
                text += String(decoding: data, as: UTF8.self)
            }
        }
        return text
    }

    @Test func signsInKeepsTheSessionOverARestartAndSignsOutWhenTheKeyIsGone() async throws {
        let (h, bus) = try Self.world("[Broker]\n# the server has no desktop keyring\nVault=file\n")
        defer { bus.stop() }
        // Open before the broker: the vault's key description is its directory's.
        let vault = try FileVault(directory: Self.vaultDirectory(h))
        defer { vault.keyring.remove() }
        #expect(vault.keyring.find() == .absent)

        try h.startBroker()
        let info = try h.rpc().call("broker.info")
        #expect(info["vault"] == "file")
        #expect(info["vaultAvailable"] == true)
        #expect(info["vaultDetail"]?.stringValue?.contains("not in the kernel user keyring") == true)

        try h.signIn()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
        guard case .present = vault.keyring.find() else {
            Issue.record("the broker made no key in the user keyring")
            return
        }
        #expect(
            try h.rpc().call("broker.info")["vaultDetail"]?.stringValue?.contains("its key is in the kernel user keyring") == true
        )
        let text = try h.cli(["session", Self.notes])
        #expect(text.status == 0 && text.out.contains("vault: file"), "\(text)")

        // doctor: which vault, whether its key is there; no Secret Service needed.
        let doctor = try h.cli(["doctor", "--json"])
        var findings: [String: JSONValue] = [:]
        for finding in try JSONValue.parse(doctor.out).arrayValue ?? [] {
            if let check = finding["check"]?.stringValue { findings[check] = finding }
        }
        #expect(findings["vault"]?["status"] == "ok", "\(doctor.out)")
        #expect(findings["vault"]?["message"]?.stringValue?.contains("file vault") == true, "\(doctor.out)")
        #expect(
            findings["vault"]?["message"]?.stringValue?.contains("its key is in the kernel user keyring") == true,
            "\(doctor.out)")
        #expect(findings["secret-service"]?["status"] == "ok", "\(doctor.out)")
        #expect(findings["keyring-default"] == nil && findings["keyring-unlocked"] == nil, "\(doctor.out)")
        // Over SSH without a session bus: only a warning with the file vault.
        var noBus = h.environment()
        noBus["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=" + h.dir + "/no-bus"
        let bare = try runProgram(
            binDirectory + "/browser-login", ["--socket", h.socketPath, "doctor", "--json"], environment: noBus)
        let sessionBus = try JSONValue.parse(bare.out).arrayValue?.first { $0["check"] == "session-bus" }
        #expect(sessionBus?["status"] == "warning", "\(bare.out)")

        // The tokens, read as the broker reads them, are nowhere in clear.
        let item = try #require(try await vault.lookup(attributes: ["kind": "session", "client": Self.notes]))
        let stored = try JSONValue.parse(item)["session"]
        let accessToken = try #require(stored?["accessToken"]?.stringValue)
        let refreshToken = try #require(stored?["refreshToken"]?.stringValue)
        let onDisk = Self.allFiles(h.dir + "/state") + Self.allFiles(h.dir + "/config")
        #expect(onDisk.contains("browser-login-vault-item"), "no vault item in the state directory")
        let brokerLog = h.broker?.output ?? ""
        for (name, secret) in [("access token", accessToken), ("refresh token", refreshToken)] {
            #expect(!onDisk.contains(secret), "the \(name) is on disk in clear")
            #expect(!brokerLog.contains(secret), "the \(name) is in the broker's log")
        }

        // A restart: still signed in, and the tokens open (the app's request is authorised).
        try h.restartBroker()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
        let me = try h.rpc().call(
            "http.request", params: ["client": .string(Self.notes), "method": "GET", "path": "/api/me"])
        #expect(me["status"] == 200, "\(me)")

        // The key is cleared (as a reboot does) while the broker is stopped.
        h.broker?.stop()
        #expect(vault.keyring.remove())
        try h.startBroker()
        let after = try h.rpc().call("session.get", params: ["client": .string(Self.notes)])
        #expect(after["status"] == "signedOut")
        #expect(after["reason"] == "VAULT_KEY_LOST")
        #expect(h.broker?.isRunning == true)
        let log = h.broker?.output ?? ""
        #expect(log.contains("session signed out: the file vault's key is gone"), "\(log)")
        #expect(log.contains("VAULT_KEY_LOST"))
        #expect(!Self.allFiles(Self.vaultDirectory(h)).contains(accessToken))
        #expect(try FileManager.default.contentsOfDirectory(atPath: vault.directory).filter { $0.hasSuffix(".item") }.isEmpty)
        let outside = try h.cli(["session", Self.notes])
        #expect(outside.status == 1 && outside.out.contains("VAULT_KEY_LOST"), "\(outside)")

        // Signing in again works, under a new key.
        try h.signIn()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
        guard case .present = vault.keyring.find() else {
            Issue.record("no new key after the new sign-in")
            return
        }
        try h.restartBroker()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
    }

    @Test func aKeyClearedWhileTheBrokerRunsLeavesASignOutThatWorks() async throws {
        let (h, bus) = try Self.world("[Broker]\nVault=file\n")
        defer { bus.stop() }
        let vault = try FileVault(directory: Self.vaultDirectory(h))
        defer { vault.keyring.remove() }
        try h.startBroker()
        try h.signIn()
        try h.restartBroker()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
        #expect(vault.keyring.remove())

        // The running broker read the tokens at start-up (its session check)
        // and keeps them in memory; signing out reads the item again: it is
        // gone for good, so the sign-out is local, with nothing to revoke.
        let out = try h.rpc().call("session.signOut", params: ["client": .string(Self.notes)])
        #expect(out["status"] == "signedOut", "\(out)")
        #expect(h.broker?.isRunning == true)
        try waitUntil(10, "the broker to log the lost key") {
            h.broker?.output.contains("session signed out: the file vault's key is gone") == true
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: vault.directory).filter { $0.hasSuffix(".item") }.isEmpty)
        try h.signIn()
        #expect(try h.rpc().call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
    }

    @Test func vaultDirectoryMovesTheVaultAndConfigNamesTheFile() async throws {
        let (h, bus) = try Self.world(nil)
        defer { bus.stop() }
        let directory = h.dir + "/elsewhere/vault"
        let conf = h.dir + "/other.conf"
        try Data("[Broker]\nVault=file\nVaultDirectory=\(directory)\n".utf8).write(to: URL(fileURLWithPath: conf))
        let vault = try FileVault(directory: directory)
        defer { vault.keyring.remove() }
        try h.startBroker(arguments: ["--config", conf])
        #expect(try h.rpc().call("broker.info")["vaultDetail"]?.stringValue?.contains(vault.directory) == true)
        try h.signIn()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).contains { $0.hasSuffix(".item") })
        #expect(!FileManager.default.fileExists(atPath: Self.vaultDirectory(h)))
        #expect(try await vault.lookup(attributes: ["kind": "session", "client": Self.notes]) != nil)

        // --config names a file that must exist.
        let missing = try runProgram(
            binDirectory + "/browser-login-broker", ["--config", h.dir + "/none.conf", "--check-config"],
            environment: h.environment())
        #expect(missing.status == 78 && missing.out.contains("none.conf"), "\(missing)")
    }

    @Test func withoutBrokerConfTheSecretServiceIsUsedNeverTheFileVault() throws {
        let (h, bus) = try Self.world(nil)
        defer { bus.stop() }
        try h.startBroker()
        let info = try h.rpc().call("broker.info")
        #expect(info["vault"] == "secret-service")
        #expect(info["vaultAvailable"] == false)
        do {
            _ = try h.rpc().call("login.start", params: ["client": .string(Self.notes), "openBrowser": false])
            Issue.record("a sign-in started without a vault")
        } catch let error as RPCError {
            #expect(error.applicationCode == "VAULT_UNAVAILABLE", "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: Self.vaultDirectory(h)))

        // Vault=secret-service says the same.
        h.broker?.stop()
        try Data("[Broker]\nVault=secret-service\n".utf8).write(
            to: URL(fileURLWithPath: h.dir + "/config/browser-login/broker.conf"))
        try h.startBroker()
        #expect(try h.rpc().call("broker.info")["vault"] == "secret-service")
        #expect(!FileManager.default.fileExists(atPath: Self.vaultDirectory(h)))
    }

    @Test(arguments: [
        ("[Broker]\nVault=files\n", "Vault"),
        ("[Broker]\nVault=file\nVaultDir=/tmp\n", "VaultDir"),
        ("[Broker]\nVault=file\nVaultDirectory=relative/path\n", "VaultDirectory"),
        ("[Vault]\nVault=file\n", "[Vault]"),
        ("Vault=file\n", "key file"),
        // GKeyFile would read `Vault=file` and drop the rest of the line.
        ("[Broker]\nVault=file\u{0}x\nVaultDirectory=/tmp/x\n", "NUL byte on line 2"),
        // GKeyFile would merge the groups, the later value winning.
        ("[Broker]\nVault=file\n\n [Broker]\nVault=secret-service\n", "second [Broker] group on line 4"),
    ])
    func aBrokerConfWithAMistakeStopsTheBroker(conf: String, named: String) throws {
        let (h, bus) = try Self.world(conf)
        defer { bus.stop() }
        let broker = binDirectory + "/browser-login-broker"
        let check = try runProgram(broker, ["--check-config"], environment: h.environment())
        #expect(check.status == 78, "\(check)")
        #expect(check.out.contains("broker.conf") && check.out.contains(named), "\(check)")
        let run = try runProgram(broker, ["--socket", h.socketPath, "--no-dbus"], environment: h.environment())
        #expect(run.status == 78, "\(run)")
        #expect(run.err.contains("broker.conf") && run.err.contains("CONFIG_INVALID"), "\(run)")
        #expect(!FileManager.default.fileExists(atPath: Self.vaultDirectory(h)))
    }
}
