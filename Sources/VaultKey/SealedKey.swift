import BrowserLoginProtocol
import CArgon2
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The file vault's key sealed with a passphrase (docs/vault.md): the file
/// `vault.key` in the vault's directory. Its presence makes the vault
/// passphrase-sealed: when the kernel keyring has no key (after a restart)
/// the vault is *locked* — nothing is lost, nothing is deleted — until
/// `browser-login vault unlock` opens this file and puts the key back in the
/// keyring.
///
/// The passphrase is stretched with Argon2id (RFC 9106, Debian's libargon2)
/// into a 32-byte wrapping key; the vault's key is sealed under it with
/// AES-256-GCM. The associated data binds the format, the Argon2 parameters,
/// the salt and the vault key's id, so an edited parameter does not open.
/// Changing the passphrase seals the same vault key again: the items are
/// never rewritten.
public struct SealedKey: Codable, Sendable, Equatable {
    public var format: String
    public var version: Int
    public var kdf: String
    /// Argon2id's time cost (passes).
    public var iterations: Int
    /// Argon2id's memory cost, in KiB.
    public var memoryKiB: Int
    /// Argon2id's lanes.
    public var lanes: Int
    /// Base64 of the random salt.
    public var salt: String
    public var cipher: String
    /// The sealed vault key's id (`VaultKeyId.of`), as in every item file.
    public var key: String
    /// Base64.
    public var nonce: String
    /// Base64 of the wrapped key and its tag.
    public var sealed: String

    public static let fileName = "vault.key"
    static let formatName = "browser-login-vault-key"
    static let currentVersion = 1
    static let kdfName = "argon2id"
    static let cipherName = "AES-256-GCM"
    /// The largest `vault.key` read: it is a few hundred bytes.
    static let maximumFileBytes = 4096
    /// Passphrases longer than this are refused (bytes of UTF-8).
    public static let maximumPassphraseBytes = 1024
    /// A new passphrase is at least this long (characters).
    public static let minimumPassphraseCharacters = 8

    /// The parameters of a new seal: RFC 9106's second recommended option
    /// (t=3, 64 MiB), one lane (the broker's machines may have two CPUs).
    public struct Cost: Sendable, Equatable {
        public var iterations: Int
        public var memoryKiB: Int
        public var lanes: Int
        public static let standard = Cost(iterations: 3, memoryKiB: 64 * 1024, lanes: 1)
        public init(iterations: Int, memoryKiB: Int, lanes: Int) {
            self.iterations = iterations
            self.memoryKiB = memoryKiB
            self.lanes = lanes
        }
        /// Whether a file's parameters are ones this program will run: a
        /// damaged or hostile file must not make it allocate gigabytes or spin.
        var isAcceptable: Bool {
            (1...16).contains(iterations) && (8 * lanes...1024 * 1024).contains(memoryKiB) && (1...8).contains(lanes)
        }
    }

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// The passphrase does not open the file.
        case wrongPassphrase
        /// The file is not a sealed key this program reads.
        case damaged(String)
        /// Argon2 or libcrypto failed (memory, random bytes).
        case failed(String)

        public var description: String {
            switch self {
            case .wrongPassphrase: "the passphrase does not open the vault's key"
            case .damaged(let detail), .failed(let detail): detail
            }
        }
    }

    /// Seals `key` (32 bytes) under `passphrase`, with a fresh salt and nonce.
    public static func seal(_ key: [UInt8], passphrase: [UInt8], cost: Cost = .standard) throws(Failure) -> SealedKey {
        precondition(key.count == KernelKeyring.keyLength)
        guard let salt = try? Crypto.randomBytes(16) else { throw .failed("no random bytes for the salt") }
        var sealedKey = SealedKey(
            format: formatName, version: currentVersion, kdf: kdfName, iterations: cost.iterations,
            memoryKiB: cost.memoryKiB, lanes: cost.lanes, salt: Base64.encode(salt), cipher: cipherName,
            key: VaultKeyId.of(key), nonce: "", sealed: "")
        var wrapping = try derive(passphrase, salt: salt, cost: cost)
        defer { wrapping.resetBytes() }
        do {
            let (nonce, sealed) = try AES256GCM.seal(key, key: wrapping, associatedData: sealedKey.associatedData)
            sealedKey.nonce = Base64.encode(nonce)
            sealedKey.sealed = Base64.encode(sealed)
        } catch {
            throw .failed("the key could not be sealed: \(error)")
        }
        return sealedKey
    }

    /// Opens the sealed key with `passphrase`: the vault's 32-byte key.
    public func open(passphrase: [UInt8]) throws(Failure) -> [UInt8] {
        let cost = Cost(iterations: iterations, memoryKiB: memoryKiB, lanes: lanes)
        guard format == Self.formatName, version == Self.currentVersion, kdf == Self.kdfName,
            cipher == Self.cipherName, cost.isAcceptable
        else { throw .damaged("the sealed key's format or parameters are not ones this version reads") }
        guard let salt = Base64.decode(self.salt), salt.count >= 16, salt.count <= 64,
            let nonce = Base64.decode(self.nonce), let sealed = Base64.decode(self.sealed)
        else { throw .damaged("the sealed key's salt, nonce or ciphertext is not valid Base64") }
        var wrapping = try Self.derive(passphrase, salt: salt, cost: cost)
        defer { wrapping.resetBytes() }
        let key: [UInt8]
        do {
            key = try AES256GCM.open(sealed, nonce: nonce, key: wrapping, associatedData: associatedData)
        } catch {
            if case .crypto(let problem) = error { throw .failed(problem) }
            throw .wrongPassphrase
        }
        guard key.count == KernelKeyring.keyLength, VaultKeyId.of(key) == self.key else {
            throw .damaged("the sealed key does not match its id")
        }
        return key
    }

    /// What the tag covers besides the key.
    var associatedData: [UInt8] {
        Array("\(format)/\(version)\0\(kdf)\0\(iterations)\0\(memoryKiB)\0\(lanes)\0\(salt)\0\(cipher)\0\(key)".utf8)
    }

    /// Argon2id of the passphrase: the 32-byte wrapping key.
    static func derive(_ passphrase: [UInt8], salt: [UInt8], cost: Cost) throws(Failure) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: AES256GCM.keyLength)
        let status = passphrase.withUnsafeBytes { pass in
            salt.withUnsafeBytes { salt in
                output.withUnsafeMutableBytes { out in
                    argon2id_hash_raw(
                        UInt32(cost.iterations), UInt32(cost.memoryKiB), UInt32(cost.lanes), pass.baseAddress,
                        pass.count, salt.baseAddress, salt.count, out.baseAddress, out.count)
                }
            }
        }
        guard status == ARGON2_OK.rawValue else {
            throw .failed("Argon2id failed (\(String(cString: argon2_error_message(status))))")
        }
        return output
    }

    // MARK: - The file

    /// What `read` found in a vault directory.
    public enum Found: Sendable, Equatable {
        /// No `vault.key`: the vault is not passphrase-sealed.
        case none
        case sealed(SealedKey)
        /// A `vault.key` that cannot be read or is not one.
        case unreadable(String)
    }

    /// Reads `vault.key` from the vault's directory.
    public static func read(directory: String) -> Found {
        let path = directory + "/" + fileName
        var status = stat()
        if lstat(path, &status) != 0 {
            if errno == ENOENT { return .none }
            return .unreadable("\(path) cannot be read (\(String(cString: strerror(errno))))")
        }
        guard status.st_mode & S_IFMT == S_IFREG, status.st_size <= maximumFileBytes else {
            return .unreadable("\(path) is not a sealed key (not a small regular file)")
        }
        guard let data = FileSystem.read(path) else {
            return .unreadable("\(path) cannot be read (\(String(cString: strerror(errno))))")
        }
        guard let value = try? JSONValue.parse(data), let sealed = try? value.decode(SealedKey.self),
            sealed.format == formatName
        else { return .unreadable("\(path) is not a sealed key (not its JSON)") }
        return .sealed(sealed)
    }

    /// Writes `vault.key` (mode 0600) in the directory: a temporary file,
    /// written and fsynced, renamed over the old one, the directory fsynced.
    /// Answers a problem, or nil.
    public func write(directory: String) -> String? {
        guard let bytes = try? ProtocolJSON.encode(self) else { return "the sealed key could not be encoded" }
        let temporary = directory + "/.tmp-" + ((try? Crypto.randomToken(bytes: 9)) ?? "\(getpid())")
        do {
            try FileSystem.writeAtomically(
                bytes, to: directory + "/" + Self.fileName, mode: 0o600, temporary: temporary, durable: true)
        } catch {
            return "cannot \(error)"
        }
        return nil
    }
}

/// The id of a vault key, kept in each item file and in `vault.key`: an HMAC
/// of a fixed text under the key (it says which key sealed a file, and
/// nothing about the key).
public enum VaultKeyId {
    public static func of(_ key: [UInt8]) -> String {
        Hex.encode(Crypto.hmacSHA256(key: key, message: Array("browser-login vault key id".utf8)).prefix(16))
    }

    /// The kernel keyring description of the key of the vault in `directory` (resolved).
    public static func description(directory: String) -> String { "browser-login:vault:" + directory }
}
