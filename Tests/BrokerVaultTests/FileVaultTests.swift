import BrokerCore
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import Synchronization
import Testing

@testable import BrokerVault
@testable import VaultKey

#if canImport(Glibc)
    import Glibc
#endif

/// The file vault on real files and the real kernel user keyring. Each test
/// has a directory of its own, so its key's description
/// (`browser-login:vault:<directory>`) is its own too; every test unlinks
/// its key at the end.
@Suite struct FileVaultTests {
    /// A vault in a fresh directory; `body` runs with it, then its key is unlinked.
    static func withVault(_ body: (FileVault, TemporaryDirectory) async throws -> Void) async throws {
        let temporary = try TemporaryDirectory("fv")
        let vault = try FileVault(directory: temporary.path + "/vault")
        defer { vault.keyring.remove() }
        try await body(vault, temporary)
    }

    static let session = ["client": "com.example.notes", "kind": "session"]
    static let other = ["client": "com.example.chat", "kind": "session"]
    static let attempt = ["client": "com.example.notes", "attempt": "at_1", "kind": "attempt"]

    /// Every vault file's bytes, as text.
    static func files(_ vault: FileVault) throws -> [String: String] {
        var result: [String: String] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: vault.directory) {
            let data = try Data(contentsOf: URL(fileURLWithPath: vault.directory + "/" + name))
            result[name] = String(decoding: data, as: UTF8.self)
        }
        return result
    }

    static func mode(_ path: String) -> mode_t {
        var s = stat()
        return stat(path, &s) == 0 ? s.st_mode & 0o777 : 0
    }

    static func itemPath(_ vault: FileVault, _ attributes: [String: String]) -> String {
        vault.directory + "/" + FileVault.fileName(FileVault.canonical(attributes))
    }

    @Test func roundTripSealsWithTheKernelKey() async throws {
        try await Self.withVault { vault, _ in
            #expect(vault.keyring.find() == .absent)
            let health = await vault.health()
            #expect(health.vault == "file" && health.available && health.keyPresent == false)

            let secret = Array("{\"accessToken\":\"plain-token-value-123\"}".utf8) + [0, 255, 0]
            try await vault.store(secret, label: "x", attributes: Self.session)
            #expect(try await vault.lookup(attributes: Self.session) == secret)
            guard case .present(let key) = vault.keyring.find() else {
                Issue.record("no key in the user keyring after a store")
                return
            }
            #expect(key.count == 32)
            #expect(await vault.health().keyPresent == true)

            // Exact matching: other attributes are other items.
            #expect(try await vault.lookup(attributes: Self.other) == nil)
            #expect(try await vault.lookup(attributes: Self.attempt) == nil)
            try await vault.store([], label: "x", attributes: Self.attempt)
            #expect(try await vault.lookup(attributes: Self.attempt) == [])

            // Replace, then remove; removing what is not there is no error.
            try await vault.store(Array("second".utf8), label: "x", attributes: Self.session)
            #expect(try await vault.lookup(attributes: Self.session) == Array("second".utf8))
            try await vault.remove(attributes: Self.session)
            #expect(try await vault.lookup(attributes: Self.session) == nil)
            try await vault.remove(attributes: Self.session)

            // Modes, and no plaintext (nor the key) on disk.
            #expect(Self.mode(vault.directory) == 0o700)
            try await vault.store(secret, label: "x", attributes: Self.session)
            #expect(Self.mode(Self.itemPath(vault, Self.session)) == 0o600)
            let keyText = key.map { String(format: "%02x", $0) }.joined()
            for (name, text) in try Self.files(vault) {
                #expect(!text.contains("plain-token-value-123"), "\(name)")
                #expect(!text.contains(keyText) && !text.contains(Data(key).base64EncodedString()), "\(name)")
            }
            #expect(try Self.files(vault).count == 2)
        }
    }

    @Test func everyWriteHasAFreshNonce() async throws {
        try await Self.withVault { vault, _ in
            let secret = Array("same secret".utf8)
            try await vault.store(secret, label: "x", attributes: Self.session)
            let first = try Self.files(vault).values.first ?? ""
            try await vault.store(secret, label: "x", attributes: Self.session)
            let second = try Self.files(vault).values.first ?? ""
            let a = try JSONDecoder().decode(FileVault.SealedItem.self, from: Data(first.utf8))
            let b = try JSONDecoder().decode(FileVault.SealedItem.self, from: Data(second.utf8))
            #expect(a.nonce != b.nonce && a.sealed != b.sealed)
            #expect(a.key == b.key)
        }
    }

    @Test func aChangedFileIsDetectedAndKept() async throws {
        try await Self.withVault { vault, _ in
            try await vault.store(Array("token".utf8), label: "x", attributes: Self.session)
            let path = Self.itemPath(vault, Self.session)
            var item = try JSONDecoder().decode(
                FileVault.SealedItem.self, from: try Data(contentsOf: URL(fileURLWithPath: path)))
            var sealed = [UInt8](Data(base64Encoded: item.sealed)!)
            sealed[0] ^= 1
            item.sealed = Data(sealed).base64EncodedString()
            try JSONEncoder().encode(item).write(to: URL(fileURLWithPath: path))
            await #expect(throws: VaultError.self) { _ = try await vault.lookup(attributes: Self.session) }
            do throws(VaultError) {
                _ = try await vault.lookup(attributes: Self.session)
            } catch {
                #expect(error.message.contains("integrity"))
            }
            #expect(FileManager.default.fileExists(atPath: path), "a damaged item is kept")

            // Not JSON at all.
            try Data("garbage".utf8).write(to: URL(fileURLWithPath: path))
            await #expect(throws: VaultError.self) { _ = try await vault.lookup(attributes: Self.session) }
            #expect(vault.sweep().damaged == [FileVault.fileName(FileVault.canonical(Self.session))])
            #expect(FileManager.default.fileExists(atPath: path))
        }
    }

    @Test func aFileSwappedForAnotherItemIsDetected() async throws {
        try await Self.withVault { vault, _ in
            try await vault.store(Array("notes-token".utf8), label: "x", attributes: Self.session)
            try await vault.store(Array("chat-token".utf8), label: "x", attributes: Self.other)
            let notes = Self.itemPath(vault, Self.session)
            let chat = Self.itemPath(vault, Self.other)
            // Copied as it is: the file names other attributes.
            try FileManager.default.removeItem(atPath: notes)
            try FileManager.default.copyItem(atPath: chat, toPath: notes)
            await #expect(throws: VaultError.self) { _ = try await vault.lookup(attributes: Self.session) }
            // Copied with its clear-text attributes rewritten: the tag covers them.
            var item = try JSONDecoder().decode(
                FileVault.SealedItem.self, from: try Data(contentsOf: URL(fileURLWithPath: chat)))
            item.client = "com.example.notes"
            try JSONEncoder().encode(item).write(to: URL(fileURLWithPath: notes))
            await #expect(throws: VaultError.self) { _ = try await vault.lookup(attributes: Self.session) }
            #expect(try await vault.lookup(attributes: Self.other) == Array("chat-token".utf8))
        }
    }

    @Test func anotherKeyInTheKeyringMeansTheItemsAreLost() async throws {
        try await Self.withVault { vault, _ in
            let reported = Mutex<[[String: String]]>([])
            vault.onLost { items in reported.withLock { $0 += items } }
            try await vault.store(Array("token".utf8), label: "x", attributes: Self.session)
            // The key is replaced (another broker, or by hand): the old one is gone for good.
            #expect(vault.keyring.remove())
            #expect(vault.keyring.add(try Crypto.randomBytes(32)) == nil)
            #expect(try await vault.lookup(attributes: Self.session) == nil)
            #expect(reported.withLock { $0 } == [FileVault.canonical(Self.session).attributes])
            #expect(!FileManager.default.fileExists(atPath: Self.itemPath(vault, Self.session)))
            #expect(try await vault.lookup(attributes: Self.session) == nil)
        }
    }

    @Test func aMissingKeyLosesTheItemsAndANewKeyIsMade() async throws {
        try await Self.withVault { vault, _ in
            try await vault.store(Array("token".utf8), label: "x", attributes: Self.session)
            try await vault.store(Array("proofs".utf8), label: "x", attributes: Self.attempt)
            guard case .present(let oldKey) = vault.keyring.find() else {
                Issue.record("no key")
                return
            }
            #expect(vault.sweep() == FileVault.SweepReport(keyPresent: true, lost: [], damaged: [], problem: nil))

            // As after a reboot: the user keyring is empty.
            #expect(vault.keyring.remove())
            let report = vault.sweep()
            #expect(!report.keyPresent && report.problem == nil)
            #expect(
                Set(report.lost)
                    == Set([FileVault.canonical(Self.session).attributes, FileVault.canonical(Self.attempt).attributes]))
            #expect(try Self.files(vault).isEmpty)
            #expect(try await vault.lookup(attributes: Self.session) == nil)
            #expect(await vault.health().keyPresent == false)

            // The next store makes a new key.
            try await vault.store(Array("new token".utf8), label: "x", attributes: Self.session)
            guard case .present(let newKey) = vault.keyring.find() else {
                Issue.record("no new key")
                return
            }
            #expect(newKey != oldKey)
            #expect(try await vault.lookup(attributes: Self.session) == Array("new token".utf8))
        }
    }

    @Test func aKeyringThatCannotBeReadDeletesNothing() async throws {
        try await Self.withVault { vault, _ in
            try await vault.store(Array("token".utf8), label: "x", attributes: Self.session)
            // A key of the vault's description that is not 32 bytes: "cannot read it now", never "gone".
            #expect(vault.keyring.remove())
            #expect(vault.keyring.add(Array("short".utf8)) == nil)
            do throws(VaultError) {
                _ = try await vault.lookup(attributes: Self.session)
                Issue.record("read with a broken key")
            } catch {
                guard case .unavailable = error else {
                    Issue.record("not unavailable: \(error)")
                    return
                }
            }
            let report = vault.sweep()
            #expect(report.problem != nil && report.lost.isEmpty)
            #expect(FileManager.default.fileExists(atPath: Self.itemPath(vault, Self.session)))
            await #expect(throws: VaultError.self) {
                try await vault.store(Array("x".utf8), label: "x", attributes: Self.other)
            }
            #expect(await vault.health().available == false)
        }
    }

    @Test func writesAreAtomic() async throws {
        try await Self.withVault { vault, _ in
            try await vault.store(Array("first".utf8), label: "x", attributes: Self.session)
            let path = Self.itemPath(vault, Self.session)
            var before = stat()
            stat(path, &before)
            try await vault.store(Array("second".utf8), label: "x", attributes: Self.session)
            var after = stat()
            stat(path, &after)
            // A new file renamed over the old one, never the old one rewritten in place.
            #expect(before.st_ino != after.st_ino)
            #expect(try FileManager.default.contentsOfDirectory(atPath: vault.directory).allSatisfy { !$0.hasPrefix(".tmp-") })

            // A write cut short leaves only a temporary file: the item is intact, the sweep removes it.
            let partial = vault.directory + "/.tmp-cut-short"
            try Data("{\"format\":\"browser-login-vau".utf8).write(to: URL(fileURLWithPath: partial))
            #expect(try await vault.lookup(attributes: Self.session) == Array("second".utf8))
            #expect(vault.sweep().damaged.isEmpty)
            #expect(!FileManager.default.fileExists(atPath: partial))
        }
    }

    @Test func theDirectoryIsPrivate() async throws {
        let temporary = try TemporaryDirectory("fv")
        let path = temporary.path + "/open"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        chmod(path, 0o755)
        let vault = try FileVault(directory: path)
        defer { vault.keyring.remove() }
        #expect(Self.mode(path) == 0o700)
        #expect(vault.keyring.description == "browser-login:vault:" + vault.directory)
        try Data().write(to: URL(fileURLWithPath: temporary.path + "/file"))
        #expect(throws: VaultError.self) { _ = try FileVault(directory: temporary.path + "/file") }
    }

    @Test func aesGCMRejectsWrongKeyAndAssociatedData() throws {
        let key = try Crypto.randomBytes(32)
        let (nonce, sealed) = try AES256GCM.seal(Array("hello".utf8), key: key, associatedData: [1, 2, 3])
        #expect(try AES256GCM.open(sealed, nonce: nonce, key: key, associatedData: [1, 2, 3]) == Array("hello".utf8))
        #expect(throws: AES256GCM.Failure.notAuthentic) {
            _ = try AES256GCM.open(sealed, nonce: nonce, key: try Crypto.randomBytes(32), associatedData: [1, 2, 3])
        }
        #expect(throws: AES256GCM.Failure.notAuthentic) {
            _ = try AES256GCM.open(sealed, nonce: nonce, key: key, associatedData: [1, 2, 4])
        }
        #expect(throws: AES256GCM.Failure.notAuthentic) {
            _ = try AES256GCM.open(Array(sealed.dropLast()), nonce: nonce, key: key, associatedData: [1, 2, 3])
        }
    }
}
