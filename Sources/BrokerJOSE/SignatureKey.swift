/// A public key and the one algorithm it verifies, for signatures outside
/// JOSE: the reference server's passkeys (WebAuthn, COSE keys), whose
/// parameters are the JWK ones (RFC 9053 §7, RFC 8230 §4). The checks are
/// `PublicKey`'s: a P-256 point on the curve, an RSA modulus of 2048 bits or
/// more with an odd exponent, an Ed25519 key of 32 bytes.
public struct SignatureKey: Sendable {
    /// The algorithms, by their COSE numbers (ES256 -7, RS256 -257, EdDSA -8).
    public enum Algorithm: Int, Sendable, CaseIterable {
        case es256 = -7
        case rs256 = -257
        case edDSA = -8

        var signature: SignatureAlgorithm {
            switch self {
            case .es256: .es256
            case .rs256: .rs256
            case .edDSA: .edDSA
            }
        }
    }

    public let algorithm: Algorithm
    private let key: PublicKey

    /// ES256: a P-256 point from its 32-byte affine coordinates; nil when it is not on the curve.
    public static func es256(x: [UInt8], y: [UInt8]) -> SignatureKey? {
        PublicKey.p256(x: x, y: y).map { SignatureKey(algorithm: .es256, key: $0) }
    }

    /// RS256 (RSASSA-PKCS1-v1_5 with SHA-256): big-endian modulus and exponent.
    public static func rs256(modulus: [UInt8], exponent: [UInt8]) -> SignatureKey? {
        PublicKey.rsa(modulus: modulus, exponent: exponent).map { SignatureKey(algorithm: .rs256, key: $0) }
    }

    /// EdDSA with Ed25519: the 32 raw bytes of the key.
    public static func edDSA(_ raw: [UInt8]) -> SignatureKey? {
        PublicKey.ed25519(raw).map { SignatureKey(algorithm: .edDSA, key: $0) }
    }

    /// True when `signature` signs `message` with this key. An ES256
    /// signature is DER (an ECDSA-Sig-Value, as WebAuthn and X.509 carry it).
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        key.verify(algorithm.signature, signature: signature, input: message, derECDSA: true)
    }
}
