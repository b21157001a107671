import BrokerCore
import BrokerRPC
import BrokerVault
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing
import VaultKey

/// The passphrase-sealed file vault end to end (docs/vault.md): the real
/// daemon, the reference server, a session bus without a Secret Service, the
/// real kernel user keyring and `browser-login vault` (the standard Argon2id
/// cost). A restart is simulated by clearing the key from the kernel keyring
/// while the broker is stopped.
@Suite("The passphrase-sealed file vault", .dedicatedThread)
struct SealedVaultTests {
    static let notes = FileVaultTests.notes

    static func items(_ directory: String) throws -> [String: Data] {
        var result: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".item") {
            result[name] = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
        }
        return result
    }

    @Test func aSealedVaultIsLockedAfterARestartAndUnlockedWithEverySessionIntact() async throws {
        let (h, bus) = try FileVaultTests.world("[Broker]\nVault=file\n")
        defer { bus.stop() }
        let vault = try FileVault(directory: FileVaultTests.vaultDirectory(h))
        defer { vault.keyring.remove() }
        let first = h.dir + "/passphrase"
        let second = h.dir + "/new-passphrase"
        let firstPassphrase = "first sealing passphrase 7d1e"
        let secondPassphrase = "second sealing passphrase 93b4"
        try Data((firstPassphrase + "\n").utf8).write(to: URL(fileURLWithPath: first))
        try Data(secondPassphrase.utf8).write(to: URL(fileURLWithPath: second))

        try h.startBroker()
        try h.signIn()
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")
        var info = try rpc.call("broker.info")
        #expect(info["vaultDirectory"]?.stringValue == vault.directory && info["vaultSealed"] == false, "\(info)")
        let unsealed = try h.cli(["vault", "status", "--json"])
        let unsealedView = try JSONValue.parse(unsealed.out)
        #expect(unsealed.status == 0 && unsealedView["sealed"] == false, "\(unsealed)")
        // Nothing to unlock yet.
        #expect(try h.cli(["vault", "unlock", "--passphrase-file", first]).status == 1)

        // Sealed with a passphrase while the broker runs: nothing changes for it.
        let seal = try h.cli(["vault", "passphrase", "--new-passphrase-file", first])
        #expect(seal.status == 0, "\(seal)")
        #expect(FileManager.default.fileExists(atPath: vault.directory + "/vault.key"))
        info = try rpc.call("broker.info")
        #expect(info["vaultSealed"] == true && info["vaultLocked"] == false, "\(info)")
        let itemsBefore = try Self.items(vault.directory)
        #expect(!itemsBefore.isEmpty)

        // A restart: the broker stops and the kernel keyring forgets the key.
        h.broker?.stop()
        #expect(vault.keyring.remove())
        try h.startBroker()
        let locked = try h.rpc()
        info = try locked.call("broker.info")
        #expect(info["vault"] == "file" && info["vaultLocked"] == true && info["vaultAvailable"] == false, "\(info)")
        #expect(info["vaultDetail"]?.stringValue?.contains("browser-login vault unlock") == true, "\(info)")
        // Never "signed out": the session is there, its tokens answer VAULT_LOCKED.
        let session = try locked.call("session.get", params: ["client": .string(Self.notes)])
        #expect(session["status"] == "signedIn", "\(session)")
        do {
            _ = try locked.call(
                "http.request", params: ["client": .string(Self.notes), "method": "GET", "path": "/api/me"])
            Issue.record("a request was answered from a locked vault")
        } catch let error as RPCError {
            #expect(error.applicationCode == "VAULT_LOCKED", "\(error)")
            #expect("\(error)".contains("browser-login vault unlock"), "\(error)")
        }
        #expect(try Self.items(vault.directory) == itemsBefore)
        let log = h.broker?.output ?? ""
        #expect(log.contains("the file vault is locked"), "\(log)")
        #expect(!log.contains("VAULT_KEY_LOST"), "\(log)")
        // doctor: which vault, and that it is locked, with the command to run.
        let doctor = try h.cli(["doctor", "--json"])
        let finding = try JSONValue.parse(doctor.out).arrayValue?.first { $0["check"] == "vault" }
        #expect(finding?["status"] == "warning", "\(doctor.out)")
        #expect(finding?["fix"]?.stringValue?.contains("browser-login vault unlock") == true, "\(doctor.out)")
        let status = try h.cli(["vault", "status", "--json"])
        let statusView = try JSONValue.parse(status.out)
        #expect(statusView["locked"] == true, "\(status)")

        // The wrong passphrase does not open it; the right one does.
        let wrong = try h.cli(["vault", "unlock", "--passphrase-file", second])
        #expect(wrong.status == 77 && wrong.err.contains("passphrase does not open"), "\(wrong)")
        let unlock = try h.cli(["vault", "unlock", "--passphrase-file", first])
        #expect(unlock.status == 0, "\(unlock)")
        #expect(try locked.call("broker.info")["vaultLocked"] == false)
        let me = try locked.call(
            "http.request", params: ["client": .string(Self.notes), "method": "GET", "path": "/api/me"])
        #expect(me["status"] == 200, "\(me)")
        #expect(try locked.call("session.get", params: ["client": .string(Self.notes)])["status"] == "signedIn")

        // A new passphrase re-wraps the key: the items are not rewritten.
        let change = try h.cli(["vault", "passphrase", "--passphrase-file", first, "--new-passphrase-file", second])
        #expect(change.status == 0, "\(change)")
        #expect(try Self.items(vault.directory) == itemsBefore)
        #expect(try h.cli(["vault", "lock"]).status == 0)
        #expect(try h.rpc().call("broker.info")["vaultLocked"] == true)
        #expect(try h.cli(["vault", "unlock", "--passphrase-file", first]).status == 77)
        #expect(try h.cli(["vault", "unlock", "--passphrase-file", second]).status == 0)
        try h.restartBroker()
        let again = try h.rpc().call(
            "http.request", params: ["client": .string(Self.notes), "method": "GET", "path": "/api/me"])
        #expect(again["status"] == 200, "\(again)")

        // The passphrases are nowhere: not in the broker's log, its state, or the vault's files.
        let everything =
            (h.broker?.output ?? "") + FileVaultTests.allFiles(h.dir + "/state")
            + String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: h.databasePath))) ?? Data(), as: UTF8.self)
        for secret in [firstPassphrase, secondPassphrase] { #expect(!everything.contains(secret)) }
    }
}
