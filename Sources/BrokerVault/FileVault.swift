import BrokerCore
import BrowserLoginProtocol
import Synchronization
import SystemSupport
import VaultKey

#if canImport(Glibc)
    import Glibc
#endif

/// A `SecretVault` in files, for machines without a Secret Service (servers
/// reached over SSH, minimal sessions), chosen only with `Vault=file` in
/// broker.conf (docs/operations.md, "The file vault").
///
/// - One file per item, `<sha256 of the attributes>.item`, in a directory of
///   mode 0700, each file 0600. One file per item keeps every write small
///   and atomic on its own (temporary file, fsync, rename, fsync of the
///   directory): a crash or a full disk while one item is written never
///   damages another, and no write reads or rewrites the others.
/// - The secret is sealed with AES-256-GCM under a 32-byte key that lives
///   only in the kernel's user keyring (`KernelKeyring`), with a fresh
///   random nonce per write. The associated data is the format, the key's
///   id and the item's attributes, so a file copied over another item's
///   name, or edited, does not open: the vault reports it as damaged.
/// - The file names the attributes (client id, the broker's attempt id,
///   kind) in clear, as the state database does; never a secret.
/// - "Cannot read it now" is never "it is gone": a keyring that cannot be
///   asked is `.unavailable`, and nothing is deleted. Only when the key is
///   certainly gone (no key of the vault's description in the user keyring,
///   or a different one there) are the items sealed with it deleted — they
///   can never be read again — and reported as lost (`sweep`, and the
///   handler set with `onLost`), so that the broker signs their sessions
///   out; a lookup of such an item then answers nil, as for any item that
///   does not exist. A key is made when there is none and an item is stored.
public final class FileVault: SecretVault {
    /// The vault's directory (absolute, symbolic links resolved).
    public let directory: String
    public let keyring: KernelKeyring

    /// File operations and key creation, one at a time.
    private let lock = Mutex<Void>(())
    /// Where store, lookup and remove run: they wait for fsync, which is
    /// kept off the caller's (cooperative) threads. One thread for every file
    /// vault of the process, started on first use (file operations are one at a time anyway).
    private static let lane = ThreadPool(name: "bl-file-vault", maximumThreads: 1)
    private var queue: ThreadPool { Self.lane }
    /// Boxed: a bare closure in a lock's value grows by a thunk on every `withLock` (`Hook`).
    private let lostHandler = Mutex<Hook<[[String: String]]>?>(nil)

    static let format = "browser-login-vault-item"
    static let version = 1
    static let cipher = "AES-256-GCM"
    static let suffix = ".item"

    /// Opens (making it when missing, mode 0700) the vault directory.
    /// `keyDescription` defaults to `browser-login:vault:<directory>`.
    public init(directory: String, keyDescription: String? = nil) throws(VaultError) {
        do {
            try FileSystem.createDirectories(directory, mode: 0o700)
        } catch {
            throw .unavailable(
                "the file vault's directory \(directory) cannot be made (\(error)); set VaultDirectory= in broker.conf to a directory the broker can write"
            )
        }
        guard let resolved = realpath(directory, nil) else {
            throw .unavailable("the file vault's directory \(directory) cannot be resolved (\(String(cString: strerror(errno))))")
        }
        self.directory = String(cString: resolved)
        free(resolved)
        var status = stat()
        guard stat(self.directory, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw .unavailable("the file vault's path \(self.directory) is not a directory; set VaultDirectory= in broker.conf")
        }
        guard status.st_uid == geteuid() else {
            throw .unavailable(
                "the file vault's directory \(self.directory) belongs to another user; the broker keeps it in a directory of its own user"
            )
        }
        if status.st_mode & 0o077 != 0 { chmod(self.directory, 0o700) }
        keyring = KernelKeyring(description: keyDescription ?? Self.keyDescription(directory: self.directory))
    }

    /// The description of the key of the vault in `directory`.
    public static func keyDescription(directory: String) -> String { VaultKeyId.description(directory: directory) }

    /// Called with the attributes of items found sealed with a key that is
    /// gone (and deleted) by a lookup; `sweep` answers them instead.
    public func onLost(_ handler: @escaping @Sendable ([[String: String]]) -> Void) {
        lostHandler.withLock { $0 = Hook(handler) }
    }

    // MARK: - SecretVault

    public func store(_ secret: [UInt8], label: String, attributes: [String: String]) async throws(VaultError) {
        try SecretServiceVault.validate(attributes)
        let item = Self.canonical(attributes)
        try await run { () throws(VaultError) in try self.seal(secret, item) }
    }

    private func seal(_ secret: [UInt8], _ item: Item) throws(VaultError) {
        try lock.withLock { _ throws(VaultError) in
            var key = try currentKey(create: true)!
            defer { key.resetBytes() }
            let keyId = Self.keyId(key)
            let sealed: (nonce: [UInt8], sealed: [UInt8])
            do {
                sealed = try AES256GCM.seal(secret, key: key, associatedData: Self.associatedData(keyId: keyId, item))
            } catch {
                throw .failed(VaultMessages.fileFailed("the item could not be sealed: \(error)"))
            }
            let file = SealedItem(
                format: Self.format, version: Self.version, cipher: Self.cipher, key: keyId, client: item.client,
                attempt: item.attempt, kind: item.kind, nonce: Base64.encode(sealed.nonce),
                sealed: Base64.encode(sealed.sealed))
            let bytes: [UInt8]
            do { bytes = try ProtocolJSON.encode(file) } catch {
                throw .failed(VaultMessages.fileFailed("the item could not be encoded"))
            }
            try writeAtomically(bytes, name: Self.fileName(item))
        }
    }

    public func lookup(attributes: [String: String]) async throws(VaultError) -> [UInt8]? {
        try SecretServiceVault.validate(attributes)
        let item = Self.canonical(attributes)
        let outcome = try await run { () throws(VaultError) -> LookupOutcome in
            try self.lock.withLock { _ throws(VaultError) -> LookupOutcome in try self.open(item) }
        }
        switch outcome {
        case .found(let secret): return secret
        case .none: return nil
        case .lost:
            // Gone for good, and deleted: "no such item" is now the truth. The
            // broker hears why through the handler (its session is signed out).
            if let handler = lostHandler.withLock({ $0 }) { handler([item.attributes]) }
            return nil
        }
    }

    public func remove(attributes: [String: String]) async throws(VaultError) {
        try SecretServiceVault.validate(attributes)
        let name = Self.fileName(Self.canonical(attributes))
        try await run { () throws(VaultError) in
            try self.lock.withLock { _ throws(VaultError) in try self.delete(name) }
        }
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable () throws(VaultError) -> T) async throws(VaultError) -> T {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, VaultError>, Never>) in
            queue.async {
                do throws(VaultError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    public func health() async -> VaultHealth {
        let state = lock.withLock { _ in keyState() }
        let sealed = isSealed
        let kind = sealed ? "passphrase-sealed file vault" : "file vault"
        var health: VaultHealth
        switch state {
        case .present:
            health = VaultHealth(
                available: true, locked: false,
                detail:
                    "The \(kind) \(directory) is in use; its key is in the kernel user keyring (\"\(keyring.description)\")."
            )
        case .absent:
            health = VaultHealth(
                available: true, locked: false,
                detail:
                    "The file vault \(directory) is in use; its key is not in the kernel user keyring (none yet, or lost at a restart): a new one is made at the next sign-in. `browser-login vault passphrase` seals it so that it survives a restart."
            )
        case .locked:
            health = VaultHealth(available: true, locked: true, detail: VaultMessages.fileLocked(directory))
        case .failed(let problem):
            health = VaultHealth(available: false, locked: false, detail: "The \(kind) \(directory): \(problem).")
        }
        health.vault = "file"
        health.keyPresent = { if case .present = state { true } else { false } }()
        health.directory = directory
        health.sealed = sealed
        return health
    }

    // MARK: - Start-up

    /// What `sweep` found.
    public struct SweepReport: Sendable, Equatable {
        /// Whether the key is in the keyring now.
        public var keyPresent: Bool
        /// The attributes of the items that can never be read again (their key is gone); deleted.
        public var lost: [[String: String]]
        /// Files that are not vault items, or are damaged (kept, for the user to look at).
        public var damaged: [String]
        /// The keyring could not be asked: nothing was concluded or deleted.
        public var problem: String?
        /// The key is sealed with a passphrase and not in the keyring: nothing was deleted.
        public var locked = false
    }

    /// Run once at start-up: deletes the items sealed with a key that is gone
    /// and answers their attributes, and removes temporary files left by a
    /// write that was cut short. A keyring that cannot be asked deletes nothing.
    public func sweep() -> SweepReport {
        lock.withLock { _ in
            var report = SweepReport(keyPresent: false, lost: [], damaged: [], problem: nil)
            let names = FileSystem.directoryEntries(directory) ?? []
            for name in names where name.hasPrefix(".tmp-") { unlink(directory + "/" + name) }
            let currentId: String?
            switch keyState() {
            case .failed(let problem):
                report.problem = problem
                return report
            case .locked:
                report.locked = true
                return report
            case .absent:
                currentId = nil
            case .present(let key):
                currentId = Self.keyId(key)
                report.keyPresent = true
            }
            for name in names.sorted() where name.hasSuffix(Self.suffix) {
                guard let data = FileSystem.read(directory + "/" + name),
                    let file = Self.decodeItem(data), file.format == Self.format
                else {
                    report.damaged.append(name)
                    continue
                }
                guard file.key != currentId else { continue }
                let attributes = Self.canonical(["client": file.client, "attempt": file.attempt, "kind": file.kind])
                if (try? delete(name)) != nil { report.lost.append(attributes.attributes) }
            }
            if !report.lost.isEmpty { FileSystem.syncDirectory(directory) }
            return report
        }
    }

    // MARK: - Items

    /// An item's attributes, all three present (absent ones as "").
    struct Item: Equatable {
        var client: String
        var attempt: String
        var kind: String
        var attributes: [String: String] { ["client": client, "attempt": attempt, "kind": kind] }
    }

    static func canonical(_ attributes: [String: String]) -> Item {
        Item(client: attributes["client"] ?? "", attempt: attributes["attempt"] ?? "", kind: attributes["kind"] ?? "")
    }

    /// The file of an item: the SHA-256 of its attributes (NUL cannot occur in them).
    static func fileName(_ item: Item) -> String {
        let digest = Crypto.sha256(Array("\(item.client)\0\(item.attempt)\0\(item.kind)".utf8))
        return Hex.encode(digest) + suffix
    }

    /// What the tag covers besides the secret: the format, the key's id and the attributes.
    static func associatedData(keyId: String, _ item: Item) -> [UInt8] {
        Array("\(format)/\(version)\0\(keyId)\0\(item.client)\0\(item.attempt)\0\(item.kind)".utf8)
    }

    /// The key's id, kept in each file: an HMAC of a fixed text under the key
    /// (it says which key sealed a file, and nothing about the key).
    static func keyId(_ key: [UInt8]) -> String { VaultKeyId.of(key) }

    /// One item file.
    struct SealedItem: Codable, Equatable {
        var format: String
        var version: Int
        var cipher: String
        /// `keyId` of the key that sealed it.
        var key: String
        var client: String
        var attempt: String
        var kind: String
        /// Base64.
        var nonce: String
        /// Base64 of the ciphertext and its 16-byte tag.
        var sealed: String
    }

    enum LookupOutcome: Sendable {
        case found([UInt8])
        case none
        /// Sealed with a key that is gone; the file is deleted.
        case lost
    }

    /// Where the vault's key is now.
    enum KeyState {
        /// In the kernel keyring (and, for a sealed vault, the sealed one).
        case present([UInt8])
        /// Not in the keyring, and not sealed with a passphrase: items sealed with an earlier key are lost.
        case absent
        /// Sealed with a passphrase (`vault.key`) and not in the keyring: nothing is lost, `vault unlock` opens it.
        case locked
        /// The keyring or `vault.key` cannot be read now: nothing can be concluded.
        case failed(String)
    }

    /// The key's state: the keyring, and `vault.key` when the keyring has
    /// none or a key that is not the sealed one (that key is not used:
    /// `vault unlock` replaces it).
    func keyState() -> KeyState {
        let found = keyring.find()
        if case .failed(let problem) = found { return .failed(problem) }
        switch SealedKey.read(directory: directory) {
        case .unreadable(let problem):
            return .failed("the vault's sealed key cannot be read: \(problem)")
        case .none:
            if case .present(let key) = found { return .present(key) }
            return .absent
        case .sealed(let sealed):
            if case .present(let key) = found, Self.keyId(key) == sealed.key { return .present(key) }
            return .locked
        }
    }

    /// Whether the vault's key is sealed with a passphrase (`vault.key` is there).
    public var isSealed: Bool {
        if case .none = SealedKey.read(directory: directory) { return false }
        return true
    }

    /// The key, from the keyring; with `create`, a new one is made (and
    /// added) when there is none. Nil only without `create`. A locked vault
    /// throws `.locked`: its items are kept.
    private func currentKey(create: Bool) throws(VaultError) -> [UInt8]? {
        switch keyState() {
        case .present(let key): return key
        case .failed(let problem): throw .unavailable(VaultMessages.keyringFailed(problem))
        case .locked: throw .locked(VaultMessages.fileLocked(directory))
        case .absent:
            guard create else { return nil }
            let key: [UInt8]
            do { key = try Crypto.randomBytes(KernelKeyring.keyLength) } catch {
                throw .failed(VaultMessages.fileFailed("no random bytes for a new key"))
            }
            if let problem = keyring.add(key) { throw .unavailable(VaultMessages.keyringFailed(problem)) }
            return key
        }
    }

    private func open(_ item: Item) throws(VaultError) -> LookupOutcome {
        let name = Self.fileName(item)
        let path = directory + "/" + name
        guard let data = FileSystem.read(path) else {
            if errno == ENOENT { return .none }
            throw .failed(VaultMessages.fileFailed("\(path) cannot be read: \(Self.errnoText())"))
        }
        guard let file = Self.decodeItem(data), file.format == Self.format,
            file.version == Self.version, file.cipher == Self.cipher
        else { throw .failed(VaultMessages.damaged(path)) }
        guard Self.canonical(["client": file.client, "attempt": file.attempt, "kind": file.kind]) == item else {
            throw .failed(VaultMessages.damaged(path))
        }
        guard var key = try currentKey(create: false) else {
            try delete(name)
            return .lost
        }
        defer { key.resetBytes() }
        guard Self.keyId(key) == file.key else {
            // Sealed with a key that is no longer in the keyring: it can never be opened.
            try delete(name)
            return .lost
        }
        guard let nonce = Base64.decode(file.nonce), let sealed = Base64.decode(file.sealed) else {
            throw .failed(VaultMessages.damaged(path))
        }
        do {
            return .found(
                try AES256GCM.open(
                    sealed, nonce: nonce, key: key, associatedData: Self.associatedData(keyId: file.key, item)))
        } catch {
            if case .crypto(let problem) = error { throw .failed(VaultMessages.fileFailed(problem)) }
            throw .failed(VaultMessages.damaged(path))
        }
    }

    /// Writes a file of mode 0600 in the directory: a temporary file,
    /// written and fsynced, renamed over the item, then the directory fsynced.
    private func writeAtomically(_ bytes: [UInt8], name: String) throws(VaultError) {
        let temporary = directory + "/.tmp-" + ((try? Crypto.randomToken(bytes: 9)) ?? "\(getpid())")
        do {
            try FileSystem.writeAtomically(
                bytes, to: directory + "/" + name, mode: 0o600, temporary: temporary, durable: true)
        } catch {
            throw .failed(VaultMessages.fileFailed("cannot \(error)"))
        }
    }

    private func delete(_ name: String) throws(VaultError) {
        let path = directory + "/" + name
        if unlink(path) != 0 && errno != ENOENT {
            throw .failed(VaultMessages.fileFailed("cannot remove \(path): \(Self.errnoText())"))
        }
        FileSystem.syncDirectory(directory)
    }

    private static func errnoText() -> String { String(cString: strerror(errno)) }

    /// An item file's JSON, nil when it is not one.
    static func decodeItem(_ data: [UInt8]) -> SealedItem? {
        guard let value = try? JSONValue.parse(data) else { return nil }
        return try? value.decode(SealedItem.self)
    }

}

extension VaultMessages {
    static func fileFailed(_ detail: String) -> String {
        "The file vault failed (\(detail)). Check the vault directory's permissions and free space, and try again."
    }
    static func keyringFailed(_ detail: String) -> String {
        "The file vault's key cannot be reached: \(detail). Nothing was deleted; try again once the keyring answers."
    }
    static func fileLocked(_ directory: String) -> String {
        "The file vault \(directory) is locked: its key is sealed with a passphrase and is not in the kernel keyring (the machine restarted, or the key was cleared). Nothing is lost: run `browser-login vault unlock` and try again."
    }
    static func damaged(_ path: String) -> String {
        "The file vault's item \(path) fails its integrity check (changed on disk, or copied from another item); it is kept for inspection. Sign out and sign in again (or delete the file) to replace it."
    }
}
