import BrowserLoginProtocol

/// Why an ID token or a key set is refused. The message says which check
/// failed; it never contains the token, a signature or the nonce, and names
/// at most the issuer, audience and key id values.
public struct JOSEError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        case malformed, unsupportedAlgorithm, unknownKey, badSignature, issuer, audience, authorizedParty, expired,
            issuedInFuture, nonce, missingClaim
    }
    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { message }
}

/// One public key of a JWK set (RFC 7517 §4) that this verifier can use.
public struct JWK: Sendable {
    public let keyId: String?
    /// `kty`: `RSA`, `EC` or `OKP`.
    public let keyType: String
    /// `alg` when the key names one; the token's algorithm must then be that one.
    public let algorithm: String?
    /// `crv` of an `EC` or `OKP` key.
    let curve: String?
    let publicKey: PublicKey

    /// True when this key may verify a signature made with `algorithm`
    /// (RFC 7517 §4.4: a key with `alg` is for that algorithm only).
    func fits(_ algorithm: SignatureAlgorithm) -> Bool {
        guard sameBytes(keyType, algorithm.keyType) else { return false }
        if let curve = algorithm.curve, !(self.curve.map { sameBytes($0, curve) } ?? false) { return false }
        if let own = self.algorithm, !sameBytes(own, algorithm.rawValue) { return false }
        return true
    }

    /// Builds the key from one member of the set's `keys` array; nil for a key
    /// this verifier cannot use (another `kty` or `crv`, `use` other than
    /// `sig`, `key_ops` without `verify`, bad members, RSA below 2048 bits).
    init?(_ object: JSONObject) {
        guard case .string(let keyType) = object["kty"] else { return nil }
        if let use = object["use"] {
            guard case .string(let value) = use, sameBytes(value, "sig") else { return nil }
        }
        if case .array(let operations) = object["key_ops"] {
            guard operations.contains(where: { if case .string(let op) = $0 { sameBytes(op, "verify") } else { false } })
            else { return nil }
        }
        func member(_ name: String) -> [UInt8]? {
            guard case .string(let text) = object[name] else { return nil }
            return strictBase64URL(text)
        }
        var curve: String?
        if case .string(let value) = object["crv"] { curve = value }
        let publicKey: PublicKey?
        switch (keyType, curve) {
        case ("RSA", _):
            guard let n = member("n"), let e = member("e") else { return nil }
            publicKey = PublicKey.rsa(modulus: n, exponent: e)
        case ("EC", "P-256"):
            guard let x = member("x"), let y = member("y") else { return nil }
            publicKey = PublicKey.p256(x: x, y: y)
        case ("OKP", "Ed25519"):
            guard let x = member("x") else { return nil }
            publicKey = PublicKey.ed25519(x)
        default:
            return nil
        }
        guard let publicKey else { return nil }
        if case .string(let kid) = object["kid"] { keyId = kid } else { keyId = nil }
        if case .string(let alg) = object["alg"] { algorithm = alg } else { algorithm = nil }
        self.keyType = keyType
        self.curve = curve
        self.publicKey = publicKey
    }
}

/// A JWK set (RFC 7517 §5), as served at the provider's `jwks_uri`.
public struct JWKSet: Sendable {
    public var keys: [JWK]

    /// Reads the set strictly (one JSON object, no duplicate member names, a
    /// `keys` array). Keys it cannot use are skipped, not fatal: providers
    /// publish encryption keys and key types beside their signing keys.
    public init(json: [UInt8]) throws(JOSEError) {
        guard let root = JSON.parseObject(json) else {
            throw JOSEError(.malformed, "the key set is not one JSON object (or has a duplicate member)")
        }
        guard case .array(let members) = root["keys"] else {
            throw JOSEError(.malformed, "the key set has no 'keys' array")
        }
        keys = members.compactMap { if case .object(let object) = $0 { JWK(object) } else { nil } }
    }

    /// The key with id `id` that fits `algorithm`; when `id` is nil, the one
    /// key that fits `algorithm` if the set has exactly one.
    public func key(id: String?, algorithm: String) -> JWK? {
        guard let algorithm = SignatureAlgorithm(name: algorithm) else { return nil }
        let usable = keys.filter { $0.fits(algorithm) }
        guard let id else { return usable.count == 1 ? usable[0] : nil }
        return usable.first { $0.keyId.map { sameBytes($0, id) } ?? false }
    }
}

/// Unpadded base64url in its one canonical spelling (RFC 7515 §2): no `=`,
/// no other alphabet, no stray bits in the last character.
func strictBase64URL(_ text: String) -> [UInt8]? {
    guard let bytes = Base64URL.decode(text), sameBytes(Base64URL.encode(bytes), text) else { return nil }
    return bytes
}
