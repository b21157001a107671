import BrowserLoginProtocol
import CCrypto

/// A key pair made by libcrypto for tests, which publishes its public half as
/// a JWK (RFC 7517) and signs compact JWS tokens (RFC 7515 §7.1) with RS256,
/// PS256, ES256 or EdDSA — the provider's side of an ID token.
///
/// `@unchecked Sendable`: the EVP_PKEY is made in `init` and never changed;
/// every signature uses a fresh EVP_MD_CTX, which OpenSSL 3 allows from many
/// threads at once on one key.
public final class TestSigner: @unchecked Sendable {
    public enum Kind: Sendable, Equatable {
        case rsa(bits: Int32)
        case p256
        case ed25519
    }

    public let kind: Kind
    public let keyId: String?
    private let pkey: OpaquePointer

    /// A fresh key pair; traps if libcrypto cannot make one (a broken test machine).
    public init(_ kind: Kind, keyId: String?) {
        self.kind = kind
        self.keyId = keyId
        let name =
            switch kind {
            case .rsa: "RSA"
            case .p256: "EC"
            case .ed25519: "ED25519"
            }
        let context = EVP_PKEY_CTX_new_from_name(nil, name, nil)
        defer { EVP_PKEY_CTX_free(context) }
        precondition(context != nil && EVP_PKEY_keygen_init(context) == 1, "keygen init failed")
        switch kind {
        case .rsa(let bits): precondition(EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1)
        case .p256: precondition(EVP_PKEY_CTX_set_group_name(context, "P-256") == 1)
        case .ed25519: break
        }
        var pkey: OpaquePointer?
        precondition(EVP_PKEY_generate(context, &pkey) == 1 && pkey != nil, "keygen failed")
        self.pkey = pkey!
    }

    deinit { EVP_PKEY_free(pkey) }

    /// The algorithm a provider would name for this key.
    public var defaultAlgorithm: String {
        switch kind {
        case .rsa: "RS256"
        case .p256: "ES256"
        case .ed25519: "EdDSA"
        }
    }

    /// The public key members (RFC 7518 §6, RFC 8037 §2), unencoded: RSA `n`
    /// and `e`, EC `x` and `y`, OKP `x`.
    public var publicMembers: [String: [UInt8]] {
        switch kind {
        case .rsa: return ["n": bigNumber(OSSL_PKEY_PARAM_RSA_N), "e": bigNumber(OSSL_PKEY_PARAM_RSA_E)]
        case .p256:
            var point = [UInt8](repeating: 0, count: 65)
            var length = 0
            precondition(EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_PUB_KEY, &point, 65, &length) == 1)
            precondition(length == 65 && point[0] == 0x04, "not an uncompressed point")
            return ["x": Array(point[1..<33]), "y": Array(point[33..<65])]
        case .ed25519:
            var raw = [UInt8](repeating: 0, count: 32)
            var length = 32
            precondition(EVP_PKEY_get_raw_public_key(pkey, &raw, &length) == 1 && length == 32)
            return ["x": raw]
        }
    }

    private func bigNumber(_ name: String) -> [UInt8] {
        var number: OpaquePointer?
        precondition(EVP_PKEY_get_bn_param(pkey, name, &number) == 1 && number != nil)
        defer { BN_free(number) }
        var bytes = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
        _ = BN_bn2bin(number, &bytes)
        return bytes
    }

    /// This key as one JWK object (JSON text). `extra` members are JSON
    /// fragments added as they are (e.g. `["alg": "\"RS256\"", "use": "\"enc\""]`).
    public func jwk(extra: [String: String] = [:]) -> String {
        var members: [(String, String)] = []
        switch kind {
        case .rsa: members.append(("kty", Self.quoted("RSA")))
        case .p256: members += [("kty", Self.quoted("EC")), ("crv", Self.quoted("P-256"))]
        case .ed25519: members += [("kty", Self.quoted("OKP")), ("crv", Self.quoted("Ed25519"))]
        }
        if let keyId { members.append(("kid", Self.quoted(keyId))) }
        for (name, bytes) in publicMembers.sorted(by: { $0.key < $1.key }) {
            members.append((name, Self.quoted(Base64URL.encode(bytes))))
        }
        members += extra.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) }
        return Self.object(members)
    }

    /// A JWK set (RFC 7517 §5) of the given JWK objects.
    public static func jwks(_ keys: [String]) -> [UInt8] {
        Array("{\"keys\":[\(keys.joined(separator: ","))]}".utf8)
    }

    /// A JWS signature of `input` with `algorithm` (RS256, PS256, ES256, EdDSA).
    /// ES256 gives raw R || S (RFC 7518 §3.4) unless `ecdsaDER` asks for the
    /// DER form OpenSSL makes (which a JWS verifier must refuse).
    public func signature(_ input: [UInt8], algorithm: String, ecdsaDER: Bool = false) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        var keyContext: OpaquePointer?
        let digest = algorithm == "EdDSA" ? nil : EVP_sha256()
        precondition(EVP_DigestSignInit(context, &keyContext, digest, nil, pkey) == 1, "sign init failed")
        if algorithm == "PS256" {
            precondition(
                EVP_PKEY_CTX_set_rsa_padding(keyContext, RSA_PKCS1_PSS_PADDING) == 1
                    && EVP_PKEY_CTX_set_rsa_pss_saltlen(keyContext, 32) == 1
                    && EVP_PKEY_CTX_set_rsa_mgf1_md(keyContext, EVP_sha256()) == 1)
        }
        var length = 0
        precondition(EVP_DigestSign(context, nil, &length, input, input.count) == 1)
        var signature = [UInt8](repeating: 0, count: length)
        precondition(EVP_DigestSign(context, &signature, &length, input, input.count) == 1)
        signature.removeSubrange(length...)
        guard algorithm == "ES256", !ecdsaDER else { return signature }
        return Self.rawECDSA(der: signature)
    }

    private static func rawECDSA(der: [UInt8]) -> [UInt8] {
        let parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            var cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let parsed else { preconditionFailure("not a DER ECDSA signature") }
        defer { ECDSA_SIG_free(parsed) }
        var raw = [UInt8](repeating: 0, count: 64)
        raw.withUnsafeMutableBufferPointer { out in
            _ = BN_bn2binpad(ECDSA_SIG_get0_r(parsed), out.baseAddress, 32)
            _ = BN_bn2binpad(ECDSA_SIG_get0_s(parsed), out.baseAddress! + 32, 32)
        }
        return raw
    }

    /// A compact JWS of the given header and claims texts, signed with `algorithm`.
    public func token(header: String, claims: String, algorithm: String, ecdsaDER: Bool = false) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        return input + "." + Base64URL.encode(signature(Array(input.utf8), algorithm: algorithm, ecdsaDER: ecdsaDER))
    }

    /// A compact JWS with the header `{"alg":…,"kid":…,"typ":"JWT"}` (kid when this key has one).
    public func token(claims: String, algorithm: String? = nil) -> String {
        let algorithm = algorithm ?? defaultAlgorithm
        var header = [("alg", Self.quoted(algorithm)), ("typ", Self.quoted("JWT"))]
        if let keyId { header.append(("kid", Self.quoted(keyId))) }
        return token(header: Self.object(header), claims: claims, algorithm: algorithm)
    }

    /// A JSON object text from members whose values are JSON fragments, in order
    /// (duplicates are written as given).
    public static func object(_ members: [(String, String)]) -> String {
        "{" + members.map { "\(quoted($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// A JSON string of ASCII text without quotes, backslashes or controls (test values).
    public static func quoted(_ text: String) -> String {
        precondition(text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C })
        return "\"\(text)\""
    }
}
