import BrowserLoginProtocol
import CCryptoLoader
import Glibc

/// The JWS algorithms this verifier accepts (RFC 7518 §3, RFC 8037 §3.1).
/// `none` and the HMAC algorithms are never accepted: an ID token is checked
/// with the provider's public keys only.
enum SignatureAlgorithm: String, CaseIterable, Sendable {
    case rs256 = "RS256"
    case ps256 = "PS256"
    case es256 = "ES256"
    case edDSA = "EdDSA"

    /// By exact bytes (not Unicode equivalence).
    init?(name: String) {
        guard let found = Self.allCases.first(where: { sameBytes($0.rawValue, name) }) else { return nil }
        self = found
    }

    /// The JWK `kty` (and `crv`) a key must have to verify this algorithm.
    var keyType: String {
        switch self {
        case .rs256, .ps256: "RSA"
        case .es256: "EC"
        case .edDSA: "OKP"
        }
    }
    var curve: String? {
        switch self {
        case .rs256, .ps256: nil
        case .es256: "P-256"
        case .edDSA: "Ed25519"
        }
    }
}

/// An OpenSSL public key (EVP_PKEY), freed with its owner.
///
/// Sendable: the key is created in `init`, never changed afterwards, and only
/// read by `verify`, which makes a fresh EVP_MD_CTX per call; OpenSSL 3
/// allows concurrent use of one EVP_PKEY for verification from many threads.
final class PublicKey: @unchecked Sendable {
    private let pkey: OpaquePointer

    private init(_ pkey: OpaquePointer) { self.pkey = pkey }
    deinit { libcrypto.EVP_PKEY_free(pkey) }

    /// The smallest RSA modulus accepted (RFC 7518 §3.3: 2048 bits or larger).
    static let minimumRSABits: Int32 = 2048

    /// An RSA public key from its big-endian modulus and exponent (RFC 7518 §6.3.1).
    static func rsa(modulus: [UInt8], exponent: [UInt8]) -> PublicKey? {
        guard let n = libcrypto.BN_bin2bn(modulus, Int32(modulus.count), nil) else { return nil }
        defer { libcrypto.BN_free(n) }
        guard let e = libcrypto.BN_bin2bn(exponent, Int32(exponent.count), nil) else { return nil }
        defer { libcrypto.BN_free(e) }
        // An even or unit exponent is no RSA key (e = 1 would make any padded message its own signature).
        guard libcrypto.BN_is_odd(e) == 1, libcrypto.BN_num_bits(e) > 1 else { return nil }
        let key = fromData(type: "RSA", [(OSSL_PKEY_PARAM_RSA_N, .number(n)), (OSSL_PKEY_PARAM_RSA_E, .number(e))])
        guard let key, libcrypto.EVP_PKEY_get_bits(key.pkey) >= minimumRSABits else { return nil }
        return key
    }

    /// A P-256 public key from its affine coordinates (RFC 7518 §6.2.1), as an
    /// uncompressed point; OpenSSL refuses a point that is not on the curve.
    static func p256(x: [UInt8], y: [UInt8]) -> PublicKey? {
        guard x.count == 32, y.count == 32 else { return nil }
        return fromData(
            type: "EC", [(OSSL_PKEY_PARAM_GROUP_NAME, .text("P-256")), (OSSL_PKEY_PARAM_PUB_KEY, .octets([0x04] + x + y))])
    }

    /// An Ed25519 public key from its 32 raw bytes (RFC 8037 §2).
    static func ed25519(_ raw: [UInt8]) -> PublicKey? {
        guard raw.count == 32, let pkey = libcrypto.EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, raw.count) else {
            return nil
        }
        return PublicKey(pkey)
    }

    private enum Parameter {
        case number(OpaquePointer)
        case text(String)
        case octets([UInt8])
    }

    /// EVP_PKEY_fromdata of a public key with parameters built by OSSL_PARAM_BLD.
    /// The builder keeps the name and value pointers it is given until
    /// `OSSL_PARAM_BLD_to_param`, so they are copied to C memory that lives until then.
    private static func fromData(type: String, _ parameters: [(String, Parameter)]) -> PublicKey? {
        defer { libcrypto.ERR_clear_error() }
        guard let builder = libcrypto.OSSL_PARAM_BLD_new() else { return nil }
        defer { libcrypto.OSSL_PARAM_BLD_free(builder) }
        var copies: [UnsafeMutableRawPointer?] = []
        defer { copies.forEach { free($0) } }
        for (name, value) in parameters {
            let key = strdup(name)
            copies.append(key)
            let pushed: Int32
            switch value {
            case .number(let number): pushed = libcrypto.OSSL_PARAM_BLD_push_BN(builder, key, number)
            case .text(let text):
                let copy = strdup(text)
                copies.append(copy)
                pushed = libcrypto.OSSL_PARAM_BLD_push_utf8_string(builder, key, copy, 0)
            case .octets(let bytes):
                let copy = malloc(bytes.count)
                copies.append(copy)
                copy?.copyMemory(from: bytes, byteCount: bytes.count)
                pushed = libcrypto.OSSL_PARAM_BLD_push_octet_string(builder, key, copy, bytes.count)
            }
            guard key != nil, pushed == 1 else { return nil }
        }
        guard let params = libcrypto.OSSL_PARAM_BLD_to_param(builder) else { return nil }
        defer { libcrypto.OSSL_PARAM_free(params) }
        guard let context = libcrypto.EVP_PKEY_CTX_new_from_name(nil, type, nil) else { return nil }
        defer { libcrypto.EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer?
        guard libcrypto.EVP_PKEY_fromdata_init(context) == 1,
            libcrypto.EVP_PKEY_fromdata(context, &pkey, bl_evp_pkey_public_key_selection(), params) == 1, let pkey
        else { return nil }
        return PublicKey(pkey)
    }

    /// True when `signature` is a valid JWS signature of `input` (RFC 7515 §5.2)
    /// with this key. The caller has checked that the key fits the algorithm.
    /// `derECDSA`: an ES256 signature already in DER (WebAuthn's, not JWS's R || S).
    func verify(_ algorithm: SignatureAlgorithm, signature: [UInt8], input: [UInt8], derECDSA: Bool = false) -> Bool {
        defer { libcrypto.ERR_clear_error() }
        var signature = signature
        if algorithm == .es256 && !derECDSA {
            // JWS carries R || S, 32 bytes each (RFC 7518 §3.4); OpenSSL wants DER.
            guard let der = Self.derSignature(rawP256: signature) else { return false }
            signature = der
        }
        guard let context = libcrypto.EVP_MD_CTX_new() else { return false }
        defer { libcrypto.EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        // EdDSA hashes internally: no digest (RFC 8032 §5.1).
        let digest = algorithm == .edDSA ? nil : libcrypto.EVP_sha256()
        guard libcrypto.EVP_DigestVerifyInit(context, &keyContext, digest, nil, pkey) == 1 else { return false }
        if algorithm == .ps256 {
            // RFC 7518 §3.5: MGF1 with SHA-256 and a salt as long as the hash.
            guard libcrypto.EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING) == 1,
                libcrypto.EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, 32) == 1,
                libcrypto.EVP_PKEY_CTX_set_rsa_mgf1_md(keyContext, libcrypto.EVP_sha256()) == 1
            else { return false }
        }
        return libcrypto.EVP_DigestVerify(context, signature, signature.count, input, input.count) == 1
    }

    /// The DER ECDSA-Sig-Value of a raw 64-byte P-256 signature; nil for any other length.
    static func derSignature(rawP256 raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = libcrypto.ECDSA_SIG_new() else { return nil }
        defer { libcrypto.ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { libcrypto.BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { libcrypto.BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, libcrypto.ECDSA_SIG_set0(signature, r, s) == 1 else {
            libcrypto.BN_free(r)
            libcrypto.BN_free(s)
            return nil
        }
        let length = libcrypto.i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return libcrypto.i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}

/// libcrypto's functions, loaded on first use (LibCrypto).
private var libcrypto: bl_crypto_functions { LibCrypto.functions }
