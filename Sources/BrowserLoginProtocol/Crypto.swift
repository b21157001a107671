import CCryptoLoader
import CGLib
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// base64url without padding (RFC 4648 §5).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var buffer: UInt32 = 0
        var bits = 0
        for b in bytes {
            buffer = buffer << 8 | UInt32(b)
            bits += 8
            while bits >= 6 {
                bits -= 6
                out.append(alphabet[Int((buffer >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(6 - bits)) & 0x3F)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url; nil for any other character or a bad length.
    public static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case 0x41...0x5A: v = c - 0x41
            case 0x61...0x7A: v = c - 0x61 + 26
            case 0x30...0x39: v = c - 0x30 + 52
            case UInt8(ascii: "-"): v = 62
            case UInt8(ascii: "_"): v = 63
            default: return nil
            }
            buffer = buffer << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8((buffer >> UInt32(bits)) & 0xFF))
            }
        }
        if bits >= 6 { return nil }
        return out
    }

    /// True for a string of exactly `length` base64url characters.
    public static func isEncoded(_ text: String, length: Int) -> Bool {
        text.utf8.count == length && text.utf8.allSatisfy { isASCIIAlphanumeric($0, or: "-_") }
    }
}

/// Errors of the kernel's random generator.
public enum CryptoError: Error, Sendable {
    case randomUnavailable
}

/// libcrypto, loaded on its first use (CCryptoLoader's shim): the functions of the signature checks
/// (BrokerJOSE), the file vault's AES-GCM (BrokerVault) and HMAC. Loading it costs a process ≈ 1.6 MiB of
/// resident memory, so the broker loads it only when a standard provider's ID token or the file vault needs
/// it; SHA-256, random bytes and constant-time comparison need no libcrypto.
public enum LibCrypto {
    private static let skipConfiguration = Atomic<Bool>(false)

    /// The resolved functions. The first use loads the library; a program whose libcrypto cannot be loaded
    /// is broken the way a missing linked library would have broken it at start-up, and stops with the
    /// package to install.
    public static let functions: bl_crypto_functions = {
        switch load(BL_CRYPTO_SONAME) {
        case .success(let functions): return functions
        case .failure(let error):
            fatalError("libcrypto (\(BL_CRYPTO_SONAME), Debian package libssl3) cannot be loaded: \(error.message)")
        }
    }()

    /// Tells libcrypto, when it is loaded, not to read the system's openssl.cnf in this process. For the
    /// daemon: it makes no TLS connection (its HTTP helper does, with the system's settings), and the HMAC,
    /// AES-GCM and signature checks it uses are not configured there; reading it costs ≈ 0.6 MiB. Call
    /// before the first use.
    public static func skipSystemConfiguration() { skipConfiguration.store(true, ordering: .releasing) }

    public struct LoadError: Error { public let message: String }

    /// Loads `soname` and resolves the functions (the tests load a missing name).
    public static func load(_ soname: String) -> Result<bl_crypto_functions, LoadError> {
        // The table has no empty value in Swift (its members are non-optional): filled in C memory.
        let functions = UnsafeMutablePointer<bl_crypto_functions>.allocate(capacity: 1)
        defer { functions.deallocate() }
        var error = [CChar](repeating: 0, count: 512)
        let skip: Int32 = skipConfiguration.load(ordering: .acquiring) ? 1 : 0
        guard bl_crypto_load(soname, skip, functions, &error, error.count) == 0 else {
            return .failure(LoadError(message: String(decoding: error.prefix { $0 != 0 }.map(UInt8.init), as: UTF8.self)))
        }
        return .success(functions.pointee)
    }
}

/// Randomness from the kernel, SHA-256 from GLib, constant-time comparison; HMAC through libcrypto.
public enum Crypto {
    /// `count` bytes from the kernel's random generator (getrandom(2), which waits only until
    /// the generator is seeded at boot): what libcrypto's own generator seeds itself from, without
    /// its DRBG's set-up in every process that only needs a token (≈ 1 MiB of the daemon's memory).
    public static func randomBytes(_ count: Int) throws(CryptoError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = bytes.withUnsafeMutableBytes { getrandom($0.baseAddress! + filled, count - filled, 0) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw .randomUnavailable }
            filled += n
        }
        return bytes
    }

    /// An opaque URL-safe identifier with `bytes` × 8 bits of randomness
    /// (16 bytes = 128 bits for ids, 32 bytes = 256 bits for tokens).
    public static func randomToken(bytes: Int = 32) throws(CryptoError) -> String {
        Base64URL.encode(try randomBytes(bytes))
    }

    public static func sha256<Bytes: Collection>(_ data: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        let input = Array(data)
        var digest = [UInt8](repeating: 0, count: 32)
        input.withUnsafeBufferPointer { inBuf in
            digest.withUnsafeMutableBufferPointer { bl_sha256(inBuf.baseAddress, inBuf.count, $0.baseAddress) }
        }
        return digest
    }

    /// HMAC-SHA-256 of `message` under `key`.
    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        key.withUnsafeBufferPointer { k in
            message.withUnsafeBufferPointer { m in
                out.withUnsafeMutableBufferPointer { o in
                    let c = LibCrypto.functions
                    _ = c.HMAC(c.EVP_sha256(), k.baseAddress, Int32(k.count), m.baseAddress, m.count, o.baseAddress, &length)
                }
            }
        }
        precondition(length == 32, "HMAC-SHA-256 failed")
        return out
    }

    /// BASE64URL-NOPAD(SHA-256(ASCII(text))): PKCE S256 challenges, recovery
    /// challenges and receipt token digests.
    public static func digest(_ text: String) -> String {
        Base64URL.encode(sha256(Array(text.utf8)))
    }

    /// Compares in time that depends only on the lengths (bl_constant_time_equals).
    public static func constantTimeEquals(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        if x.isEmpty { return true }
        return x.withUnsafeBytes { xb in
            y.withUnsafeBytes { yb in bl_constant_time_equals(xb.baseAddress, yb.baseAddress, x.count) == 1 }
        }
    }
}

/// A PKCE verifier or a recovery key: 32 random bytes, base64url without
/// padding (43 characters of the RFC 7636 alphabet). Never log one.
public struct ProofSecret: Sendable, Hashable {
    public let value: String

    public init(value: String) { self.value = value }

    /// A fresh secret from `RAND_bytes`.
    public static func generate() throws(CryptoError) -> ProofSecret {
        ProofSecret(value: try Crypto.randomToken(bytes: 32))
    }

    /// BASE64URL-NOPAD(SHA-256(ASCII(value))) — the S256 challenge.
    public var challenge: String { Crypto.digest(value) }

    /// True when `challenge` is this secret's S256 challenge, compared in constant time.
    public func verifies(challenge: String) -> Bool {
        Crypto.constantTimeEquals(self.challenge, challenge)
    }

    /// 43 characters of the base64url alphabet.
    public static func isWellFormed(_ text: String) -> Bool { Base64URL.isEncoded(text, length: 43) }
}
