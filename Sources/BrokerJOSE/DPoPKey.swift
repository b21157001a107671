import BrowserLoginProtocol
import CCryptoLoader
import Glibc

/// A session's DPoP key (RFC 9449): one ES256 (P-256) key pair, made at
/// `login.start` and kept in the vault with the attempt's proofs and then the
/// session's tokens. Its `serialized` form holds the private key: it goes to
/// the vault only, never to SQLite, a log, an error or the API.
/// `description` never shows it.
///
/// Sendable: the key is created in `init`, never changed afterwards, and only
/// read by `sign`, which makes a fresh EVP_MD_CTX per call; OpenSSL 3 allows
/// concurrent signing with one EVP_PKEY from many threads.
public final class DPoPKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    private let pkey: OpaquePointer
    /// The public point's affine coordinates, 32 bytes each.
    public let x: [UInt8]
    public let y: [UInt8]
    /// `d.x.y`, each base64url without padding: the vault's form.
    public let serialized: String

    public enum Failure: Error, Sendable, Equatable {
        /// libcrypto could not make or load the key.
        case unusable
    }

    private init(pkey: OpaquePointer, d: [UInt8], x: [UInt8], y: [UInt8]) {
        self.pkey = pkey
        self.x = x
        self.y = y
        serialized = Base64URL.encode(d) + "." + Base64URL.encode(x) + "." + Base64URL.encode(y)
    }
    deinit { libcrypto.EVP_PKEY_free(pkey) }

    public var description: String { "DPoPKey(ES256, thumbprint \(thumbprint))" }
    public var debugDescription: String { description }

    /// A fresh P-256 key pair from libcrypto's generator.
    public static func generate() throws(Failure) -> DPoPKey {
        defer { libcrypto.ERR_clear_error() }
        guard let context = libcrypto.EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw .unusable }
        defer { libcrypto.EVP_PKEY_CTX_free(context) }
        var generated: OpaquePointer?
        guard libcrypto.EVP_PKEY_keygen_init(context) == 1,
            libcrypto.EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            libcrypto.EVP_PKEY_generate(context, &generated) == 1, let pkey = generated
        else { throw .unusable }
        var secret: OpaquePointer?
        guard libcrypto.EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_PRIV_KEY, &secret) == 1, let secret else {
            libcrypto.EVP_PKEY_free(pkey)
            throw .unusable
        }
        defer { libcrypto.BN_clear_free(secret) }
        var d = [UInt8](repeating: 0, count: 32)
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        guard libcrypto.BN_bn2binpad(secret, &d, 32) == 32,
            libcrypto.EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_PUB_KEY, &point, point.count, &length) == 1,
            length == 65, point[0] == 0x04
        else {
            libcrypto.EVP_PKEY_free(pkey)
            throw .unusable
        }
        return DPoPKey(pkey: pkey, d: d, x: Array(point[1..<33]), y: Array(point[33..<65]))
    }

    /// Reads `serialized`; nil when it is not a P-256 key pair.
    public convenience init?(serialized text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let d = Base64URL.decode(String(parts[0])), let x = Base64URL.decode(String(parts[1])),
            let y = Base64URL.decode(String(parts[2])), d.count == 32, x.count == 32, y.count == 32,
            let pkey = Self.keyPair(d: d, x: x, y: y)
        else { return nil }
        self.init(pkey: pkey, d: d, x: x, y: y)
    }

    private static func keyPair(d: [UInt8], x: [UInt8], y: [UInt8]) -> OpaquePointer? {
        defer { libcrypto.ERR_clear_error() }
        guard let builder = libcrypto.OSSL_PARAM_BLD_new() else { return nil }
        defer { libcrypto.OSSL_PARAM_BLD_free(builder) }
        guard let secret = libcrypto.BN_bin2bn(d, Int32(d.count), nil) else { return nil }
        defer { libcrypto.BN_clear_free(secret) }
        let point = [0x04] + x + y
        // The builder keeps the name and value pointers until OSSL_PARAM_BLD_to_param: C copies that live until then.
        let names: [String] = [OSSL_PKEY_PARAM_GROUP_NAME, OSSL_PKEY_PARAM_PRIV_KEY, OSSL_PKEY_PARAM_PUB_KEY]
        let copies = names.map { strdup($0) }
        guard let group = strdup("P-256"), let pub = malloc(point.count) else { return nil }
        defer {
            copies.forEach { free($0) }
            free(group)
            free(pub)
        }
        pub.copyMemory(from: point, byteCount: point.count)
        guard copies.allSatisfy({ $0 != nil }),
            libcrypto.OSSL_PARAM_BLD_push_utf8_string(builder, copies[0], group, 0) == 1,
            libcrypto.OSSL_PARAM_BLD_push_BN(builder, copies[1], secret) == 1,
            libcrypto.OSSL_PARAM_BLD_push_octet_string(builder, copies[2], pub, point.count) == 1,
            let params = libcrypto.OSSL_PARAM_BLD_to_param(builder)
        else { return nil }
        defer { libcrypto.OSSL_PARAM_free(params) }
        guard let context = libcrypto.EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { return nil }
        defer { libcrypto.EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer?
        guard libcrypto.EVP_PKEY_fromdata_init(context) == 1,
            libcrypto.EVP_PKEY_fromdata(context, &pkey, bl_evp_pkey_keypair_selection(), params) == 1
        else { return nil }
        return pkey
    }

    /// The public JWK's members in RFC 7638 order (which is also the thumbprint's input).
    var publicJWK: String {
        #"{"crv":"P-256","kty":"EC","x":"\#(Base64URL.encode(x))","y":"\#(Base64URL.encode(y))"}"#
    }

    /// The JWK SHA-256 thumbprint (RFC 7638), base64url: what a provider binds tokens to (`cnf.jkt`).
    public var thumbprint: String { Base64URL.encode(Crypto.sha256(Array(publicJWK.utf8))) }

    /// A DPoP proof JWT (RFC 9449 §4.2): header `typ` `dpop+jwt`, `alg`
    /// ES256 and the public `jwk`; claims `jti` (16 random bytes), `htm`,
    /// `htu` (`url` without query and fragment), `iat` (seconds), `ath`
    /// (base64url SHA-256 of the access token) when one is given, and the
    /// server's `nonce` when one is known.
    public func proof(method: String, url: String, accessToken: String?, nonce: String?, now: Int64) throws(Failure)
        -> String
    {
        let jti: String
        do { jti = try Crypto.randomToken(bytes: 16) } catch { throw .unusable }
        let header = #"{"typ":"dpop+jwt","alg":"ES256","jwk":\#(publicJWK)}"#
        var claims = #"{"jti":"\#(jti)","htm":\#(Self.jsonString(method)),"htu":\#(Self.jsonString(Self.htu(url))),"iat":\#(now)"#
        if let accessToken { claims += #","ath":"\#(Crypto.digest(accessToken))""# }
        if let nonce { claims += #","nonce":\#(Self.jsonString(nonce))"# }
        claims += "}"
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }

    /// RFC 9449 §4.2: the target URI without query and fragment.
    public static func htu(_ url: String) -> String {
        String(url.prefix { $0 != "?" && $0 != "#" })
    }

    /// A JSON string: `"`, `\` and control characters escaped.
    static func jsonString(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// ES256 (RFC 7518 §3.4): ECDSA P-256 with SHA-256, as R || S (32 bytes each).
    func sign(_ input: [UInt8]) throws(Failure) -> [UInt8] {
        defer { libcrypto.ERR_clear_error() }
        guard let context = libcrypto.EVP_MD_CTX_new() else { throw .unusable }
        defer { libcrypto.EVP_MD_CTX_free(context) }
        guard libcrypto.EVP_DigestSignInit(context, nil, libcrypto.EVP_sha256(), nil, pkey) == 1 else {
            throw .unusable
        }
        var length = 0
        guard libcrypto.EVP_DigestSign(context, nil, &length, input, input.count) == 1, length > 0 else {
            throw .unusable
        }
        var der = [UInt8](repeating: 0, count: length)
        guard libcrypto.EVP_DigestSign(context, &der, &length, input, input.count) == 1 else { throw .unusable }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return libcrypto.d2i_ECDSA_SIG(nil, &cursor, length)
        }
        guard let parsed else { throw .unusable }
        defer { libcrypto.ECDSA_SIG_free(parsed) }
        var raw = [UInt8](repeating: 0, count: 64)
        guard let r = libcrypto.ECDSA_SIG_get0_r(parsed), let s = libcrypto.ECDSA_SIG_get0_s(parsed) else {
            throw .unusable
        }
        let wroteR = raw.withUnsafeMutableBufferPointer { libcrypto.BN_bn2binpad(r, $0.baseAddress, 32) }
        let wroteS = raw.withUnsafeMutableBufferPointer { libcrypto.BN_bn2binpad(s, $0.baseAddress! + 32, 32) }
        guard wroteR == 32, wroteS == 32 else { throw .unusable }
        return raw
    }
}

/// libcrypto's functions, loaded on first use (LibCrypto).
private var libcrypto: bl_crypto_functions { LibCrypto.functions }
