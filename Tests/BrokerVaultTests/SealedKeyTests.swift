import BrokerCore
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import Testing

@testable import BrokerVault
@testable import VaultKey

/// The file vault's passphrase-sealed key (`vault.key`, docs/vault.md):
/// Argon2id (libargon2) and AES-256-GCM on real files and the real kernel
/// user keyring. A cheap Argon2 cost keeps them quick; the standard one is
/// what `browser-login vault` writes (the end-to-end test uses it).
@Suite struct SealedKeyTests {
    static let cheap = SealedKey.Cost(iterations: 1, memoryKiB: 64, lanes: 1)
    static let passphrase = Array("correct horse battery".utf8)

    @Test func opensWithThePassphraseOnly() throws {
        let key = try Crypto.randomBytes(32)
        let sealed = try SealedKey.seal(key, passphrase: Self.passphrase, cost: Self.cheap)
        #expect(try sealed.open(passphrase: Self.passphrase) == key)
        #expect(sealed.key == VaultKeyId.of(key))
        #expect(throws: SealedKey.Failure.wrongPassphrase) { _ = try sealed.open(passphrase: Array("wrong".utf8)) }
        // Neither the key nor the passphrase is in the file.
        let text = String(decoding: try ProtocolJSON.encode(sealed), as: UTF8.self)
        #expect(!text.contains(Base64.encode(key)) && !text.contains("correct horse"))
        // A fresh salt and nonce each time.
        let again = try SealedKey.seal(key, passphrase: Self.passphrase, cost: Self.cheap)
        #expect(again.salt != sealed.salt && again.nonce != sealed.nonce && again.sealed != sealed.sealed)
    }

    @Test func editedParametersDoNotOpen() throws {
        let key = try Crypto.randomBytes(32)
        let sealed = try SealedKey.seal(key, passphrase: Self.passphrase, cost: Self.cheap)
        var cheaper = sealed
        cheaper.memoryKiB = 32
        #expect(throws: SealedKey.Failure.wrongPassphrase) { _ = try cheaper.open(passphrase: Self.passphrase) }
        var otherKey = sealed
        otherKey.key = String(repeating: "0", count: 32)
        #expect(throws: SealedKey.Failure.wrongPassphrase) { _ = try otherKey.open(passphrase: Self.passphrase) }
    }

    @Test func hostileParametersAreRefusedBeforeArgon2Runs() throws {
        let sealed = try SealedKey.seal(try Crypto.randomBytes(32), passphrase: Self.passphrase, cost: Self.cheap)
        for edit: (inout SealedKey) -> Void in [
            { $0.memoryKiB = 64 * 1024 * 1024 }, { $0.iterations = 1_000_000 }, { $0.lanes = 0 }, { $0.kdf = "argon2i" },
            { $0.version = 2 }, { $0.salt = "???" },
        ] {
            var hostile = sealed
            edit(&hostile)
            #expect(throws: SealedKey.Failure.self) { _ = try hostile.open(passphrase: Self.passphrase) }
            #expect((try? hostile.open(passphrase: Self.passphrase)) == nil)
        }
    }

    @Test func theFileIsWrittenPrivateAndReadBack() throws {
        let temporary = try TemporaryDirectory("sk")
        #expect(SealedKey.read(directory: temporary.path) == .none)
        let sealed = try SealedKey.seal(try Crypto.randomBytes(32), passphrase: Self.passphrase, cost: Self.cheap)
        #expect(sealed.write(directory: temporary.path) == nil)
        #expect(SealedKey.read(directory: temporary.path) == .sealed(sealed))
        #expect(FileVaultTests.mode(temporary.path + "/vault.key") == 0o600)
        try Data("not json".utf8).write(to: URL(fileURLWithPath: temporary.path + "/vault.key"))
        guard case .unreadable = SealedKey.read(directory: temporary.path) else {
            Issue.record("a damaged vault.key was read")
            return
        }
    }

    /// A sealed vault whose key is not in the keyring is locked: its items are
    /// kept (never "lost"), every operation answers `.locked`, and putting the
    /// sealed key back opens them all; a new passphrase re-wraps the key only.
    @Test func aSealedVaultWithoutItsKeyIsLockedNotLost() async throws {
        try await FileVaultTests.withVault { vault, _ in
            let secret = Array("session tokens".utf8)
            try await vault.store(secret, label: "x", attributes: FileVaultTests.session)
            guard case .present(let key) = vault.keyring.find() else {
                Issue.record("no key in the keyring")
                return
            }
            #expect(!vault.isSealed)
            let sealed = try SealedKey.seal(key, passphrase: Self.passphrase, cost: Self.cheap)
            #expect(sealed.write(directory: vault.directory) == nil)
            #expect(vault.isSealed)
            let unlockedHealth = await vault.health()
            #expect(!unlockedHealth.locked && unlockedHealth.sealed == true)
            #expect(unlockedHealth.detail.contains("passphrase-sealed"))
            let itemsBefore = try FileVaultTests.files(vault)

            // A restart: the keyring forgets the key.
            #expect(vault.keyring.remove())
            let health = await vault.health()
            #expect(health.locked && health.available && health.directory == vault.directory)
            #expect(health.detail.contains("browser-login vault unlock"))
            let report = vault.sweep()
            #expect(report.locked && report.lost.isEmpty && report.problem == nil)
            await #expect(throws: VaultError.locked(VaultMessages.fileLocked(vault.directory))) {
                _ = try await vault.lookup(attributes: FileVaultTests.session)
            }
            await #expect(throws: VaultError.self) {
                try await vault.store(secret, label: "x", attributes: FileVaultTests.other)
            }
            // A different key in the keyring does not count, and is not used to seal.
            #expect(vault.keyring.add(try Crypto.randomBytes(32)) == nil)
            #expect(vault.sweep().locked)
            await #expect(throws: VaultError.self) { _ = try await vault.lookup(attributes: FileVaultTests.session) }
            #expect(try FileVaultTests.files(vault) == itemsBefore)

            // Unlocked (as `browser-login vault unlock` does): everything opens.
            let opened = SealedKey.read(directory: vault.directory)
            guard case .sealed(let onDisk) = opened else {
                Issue.record("no sealed key")
                return
            }
            #expect(vault.keyring.add(try onDisk.open(passphrase: Self.passphrase)) == nil)
            #expect(try await vault.lookup(attributes: FileVaultTests.session) == secret)

            // A new passphrase: the same key, sealed again; the items untouched.
            let resealed = try SealedKey.seal(
                try onDisk.open(passphrase: Self.passphrase), passphrase: Array("another passphrase".utf8), cost: Self.cheap)
            #expect(resealed.write(directory: vault.directory) == nil)
            #expect(resealed.key == onDisk.key)
            var after = try FileVaultTests.files(vault)
            after["vault.key"] = nil
            var before = itemsBefore
            before["vault.key"] = nil
            #expect(after == before)
            #expect(try await vault.lookup(attributes: FileVaultTests.session) == secret)
        }
    }
}
