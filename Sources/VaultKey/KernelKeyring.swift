import CKeyutils

#if canImport(Glibc)
    import Glibc
#endif

/// The file vault's key in the kernel's user keyring (`@u`, keyrings(7)),
/// through libkeyutils: a `user` key whose payload is the 32-byte AEAD key.
///
/// The user keyring is the one keyring every process of the user reaches,
/// whatever its session: the broker under systemd (whose
/// `KeyringMode=private` gives the service a session keyring of its own),
/// the broker started by hand from an SSH login, and `browser-login doctor`
/// in another login all find the same key. The session keyring would not
/// do (each SSH login and each service start gets a new one), nor the
/// persistent keyring (it expires after days without use, and is not
/// built into every kernel). The user keyring lives until the machine
/// restarts (or the key is cleared): that is the file vault's reboot
/// behaviour (docs/operations.md).
public struct KernelKeyring: Sendable {
    /// The key's description, unique per vault directory.
    public let description: String

    public init(description: String) { self.description = description }

    /// What the keyring says about the key.
    public enum Lookup: Sendable, Equatable {
        /// The key, read from the keyring.
        case present([UInt8])
        /// There is no such key, or it was revoked or expired: whatever was
        /// sealed with an earlier key can never be read again.
        case absent
        /// The keyring could not be asked now (permissions, quota, memory, a
        /// seccomp filter): nothing can be concluded.
        case failed(String)
    }

    public static let keyLength = 32

    /// Looks the key up in the user keyring (and the keyrings it links).
    public func find() -> Lookup {
        let found = keyctl_search(bl_user_keyring(), "user", description, 0)
        if found < 0 {
            let code = errno
            if code == ENOKEY || code == EKEYREVOKED || code == EKEYEXPIRED { return .absent }
            return .failed(Self.describe(code, "searching the user keyring"))
        }
        let id = key_serial_t(truncatingIfNeeded: found)
        var buffer = [UInt8](repeating: 0, count: Self.keyLength + 1)
        let length = buffer.withUnsafeMutableBytes { keyctl_read(id, $0.baseAddress, $0.count) }
        defer { buffer.resetBytes() }
        if length < 0 {
            let code = errno
            // Gone (revoked, expired, unlinked) between the search and the read.
            if code == ENOKEY || code == EKEYREVOKED || code == EKEYEXPIRED { return .absent }
            return .failed(Self.describe(code, "reading the key"))
        }
        guard length == Self.keyLength else {
            return .failed(
                "the kernel keyring's key \"\(description)\" is \(length) bytes, not \(Self.keyLength): it was not made by the broker; remove it with `keyctl purge user '\(description)'` (the vault's items then need a new sign-in)"
            )
        }
        return .present(Array(buffer[0..<Self.keyLength]))
    }

    /// Adds `key` to the user keyring under the description (a key of that
    /// description already there is replaced: call only after `find` said
    /// `.absent`).
    public func add(_ key: [UInt8]) -> String? {
        let id = key.withUnsafeBytes { add_key("user", description, $0.baseAddress, $0.count, bl_user_keyring()) }
        if id < 0 { return Self.describe(errno, "adding the key to the user keyring") }
        if keyctl_setperm(id, bl_vault_key_permissions()) < 0 {
            let problem = Self.describe(errno, "setting the key's permissions")
            _ = keyctl_unlink(id, bl_user_keyring())
            return problem
        }
        return nil
    }

    /// Unlinks the key from the user keyring (tests, and `browser-login` has no use for it).
    @discardableResult
    public func remove() -> Bool {
        let found = keyctl_search(bl_user_keyring(), "user", description, 0)
        guard found >= 0 else { return false }
        return keyctl_unlink(key_serial_t(truncatingIfNeeded: found), bl_user_keyring()) == 0
    }

    static func describe(_ code: Int32, _ doing: String) -> String {
        let name = String(cString: strerror(code))
        let fix: String
        switch code {
        case EACCES, EPERM:
            fix =
                "check that the broker runs as the user who owns the keyring (`keyctl show @u`) and that no seccomp filter or container forbids the keyctl system calls"
        case EDQUOT:
            fix = "the user's key quota is full (/proc/sys/kernel/keys/maxkeys): remove unused keys with `keyctl show @u`"
        case ENOSYS:
            fix = "the kernel has no key management (CONFIG_KEYS): use the Secret Service vault (Vault=secret-service)"
        default:
            fix = "try again; if it persists, check the kernel keyring with `keyctl show @u`"
        }
        return "the kernel keyring failed while \(doing) (\(name)); \(fix)"
    }
}

extension Array where Element == UInt8 {
    /// Overwrites the bytes with zeros (best effort: copies made before are not reached).
    public mutating func resetBytes() {
        for i in indices { self[i] = 0 }
    }
}
