import BrokerJOSE
import BrowserLoginProtocol
import Foundation

/// WebAuthn Level 2's relying-party checks (§7.1 registration, §7.2
/// authentication), as pure functions of the bytes a browser sent and what
/// the server expects: no database, no clock. CBOR is read with libcbor
/// (`CBOR`), signatures are checked with libcrypto (`SignatureKey`).
enum WebAuthn {
    /// What one ceremony must show: its type, the challenge the server
    /// issued, the page's origin and the RP id chosen from it.
    struct Expectation: Sendable {
        enum Ceremony: String, Sendable {
            case create = "webauthn.create"
            case get = "webauthn.get"
        }
        var ceremony: Ceremony
        var challenge: String
        var origin: String
        var rpId: String
    }

    /// A new credential, checked (§7.1 steps 5–26 as they apply to `none` and self attestation).
    struct Registration: Sendable, Equatable {
        var credentialId: [UInt8]
        /// The COSE_Key as the authenticator sent it (stored; read again at each sign-in).
        var publicKey: [UInt8]
        var algorithm: SignatureKey.Algorithm
        var signCount: UInt32
        var attestationFormat: String
    }

    /// The authenticator data (§6.1).
    struct AuthenticatorData: Sendable {
        static let userPresent: UInt8 = 0x01
        static let userVerified: UInt8 = 0x04
        static let attestedCredentialData: UInt8 = 0x40
        static let extensionData: UInt8 = 0x80

        var rpIdHash: [UInt8]
        var flags: UInt8
        var signCount: UInt32
        var credentialId: [UInt8]?
        var publicKey: [UInt8]?
    }

    static func invalid(_ message: String) -> APIError { APIError(.passkeyInvalid, message) }

    // MARK: Client data (§5.8.1)

    private struct ClientData: Decodable {
        var type: String
        var challenge: String
        var origin: String
        var crossOrigin: Bool?
    }

    /// Checks `clientDataJSON`'s type, challenge and origin; answers its SHA-256.
    static func checkClientData(_ json: [UInt8], _ expected: Expectation) throws(APIError) -> [UInt8] {
        let data: ClientData
        do { data = try JSONDecoder().decode(ClientData.self, from: Data(json)) } catch {
            throw invalid("the client data is not the JSON a browser sends")
        }
        guard data.type == expected.ceremony.rawValue else {
            throw invalid("the client data is for another ceremony (\(data.type.prefix(32)))")
        }
        guard Crypto.constantTimeEquals(data.challenge, expected.challenge) else {
            throw invalid("the client data answers another challenge")
        }
        guard data.origin == expected.origin else { throw invalid("the client data names another origin") }
        if data.crossOrigin == true { throw invalid("the ceremony ran in a cross-origin frame") }
        return Crypto.sha256(json)
    }

    // MARK: Authenticator data (§6.1)

    static func parseAuthenticatorData(_ bytes: [UInt8]) throws(APIError) -> AuthenticatorData {
        guard bytes.count >= 37 else { throw invalid("the authenticator data is too short") }
        let flags = bytes[32]
        let count = bytes[33..<37].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        var data = AuthenticatorData(rpIdHash: Array(bytes[0..<32]), flags: flags, signCount: count)
        var rest = Array(bytes[37...])
        if flags & AuthenticatorData.attestedCredentialData != 0 {
            // AAGUID (16), credential id length (2), credential id, COSE key.
            guard rest.count >= 18 else { throw invalid("the attested credential data is too short") }
            let length = Int(rest[16]) << 8 | Int(rest[17])
            guard length >= 1, length <= 1023, rest.count >= 18 + length else {
                throw invalid("the credential id's length is wrong")
            }
            data.credentialId = Array(rest[18..<(18 + length)])
            let keyBytes = Array(rest[(18 + length)...])
            guard let (_, used) = CBOR.decodePrefix(keyBytes) else { throw invalid("the credential's public key is not CBOR") }
            data.publicKey = Array(keyBytes[..<used])
            rest = Array(keyBytes[used...])
        }
        if flags & AuthenticatorData.extensionData != 0 {
            guard let extensions = CBOR.decode(rest), extensions.mapCount != nil else {
                throw invalid("the authenticator's extension data is not a CBOR map")
            }
        } else if !rest.isEmpty {
            throw invalid("the authenticator data has bytes after its end")
        }
        return data
    }

    /// rpIdHash, then user presence, then user verification (required: the
    /// server always asks for `userVerification: "required"`).
    static func checkFlags(_ data: AuthenticatorData, rpId: String) throws(APIError) {
        guard data.rpIdHash == Crypto.sha256(Array(rpId.utf8)) else {
            throw invalid("the authenticator signed for another relying party")
        }
        guard data.flags & AuthenticatorData.userPresent != 0 else { throw invalid("the authenticator saw no user (UP)") }
        guard data.flags & AuthenticatorData.userVerified != 0 else {
            throw APIError(.passkeyUserVerificationFailed, "the authenticator did not verify the user (PIN or biometrics)")
        }
    }

    // MARK: COSE keys (RFC 9052 §7, RFC 9053 §7, RFC 8230 §4)

    static func publicKey(cose bytes: [UInt8]) throws(APIError) -> SignatureKey {
        guard let key = CBOR.decode(bytes), key.mapCount != nil, let kty = key[1]?.int, let alg = key[3]?.int,
            let algorithm = SignatureKey.Algorithm(rawValue: alg)
        else { throw invalid("the public key is not a COSE key of ES256, RS256 or EdDSA") }
        let made: SignatureKey?
        switch (algorithm, kty) {
        case (.es256, 2):
            guard key[-1]?.int == 1, let x = key[-2]?.bytes, let y = key[-3]?.bytes else {
                throw invalid("an ES256 key is an EC2 key on P-256 with x and y")
            }
            made = SignatureKey.es256(x: x, y: y)
        case (.rs256, 3):
            guard let n = key[-1]?.bytes, let e = key[-2]?.bytes else { throw invalid("an RS256 key has n and e") }
            made = SignatureKey.rs256(modulus: n, exponent: e)
        case (.edDSA, 1):
            guard key[-1]?.int == 6, let x = key[-2]?.bytes else { throw invalid("an EdDSA key is an OKP key on Ed25519") }
            made = SignatureKey.edDSA(x)
        default: throw invalid("the key type does not fit the algorithm")
        }
        guard let made else { throw invalid("the public key is not a valid \(algorithm) key") }
        return made
    }

    // MARK: Registration (§7.1)

    static func verifyRegistration(clientDataJSON: [UInt8], attestationObject: [UInt8], expected: Expectation)
        throws(APIError) -> Registration
    {
        let clientDataHash = try checkClientData(clientDataJSON, expected)
        guard let object = CBOR.decode(attestationObject), let format = object["fmt"]?.text,
            let statement = object["attStmt"], statement.mapCount != nil, let authBytes = object["authData"]?.bytes
        else { throw invalid("the attestation object is not CBOR with fmt, attStmt and authData") }
        let data = try parseAuthenticatorData(authBytes)
        try checkFlags(data, rpId: expected.rpId)
        guard let credentialId = data.credentialId, let coseKey = data.publicKey else {
            throw invalid("the authenticator data carries no new credential")
        }
        let key = try publicKey(cose: coseKey)
        switch format {
        case "none":
            guard statement.mapCount == 0 else { throw invalid("a 'none' attestation has an empty statement") }
        case "packed":
            // Self attestation (§8.2): no certificate, signed by the credential's own key.
            guard statement["x5c"] == nil else {
                throw invalid("attestation with a certificate is not accepted; the page asks for none")
            }
            guard statement["alg"]?.int == key.algorithm.rawValue, let signature = statement["sig"]?.bytes else {
                throw invalid("a packed self attestation has the credential's alg and a sig")
            }
            guard key.verify(signature: signature, message: authBytes + clientDataHash) else {
                throw invalid("the packed self attestation's signature does not verify")
            }
        default: throw invalid("the attestation format is not accepted (none or packed self attestation)")
        }
        return Registration(
            credentialId: credentialId, publicKey: coseKey, algorithm: key.algorithm, signCount: data.signCount,
            attestationFormat: format)
    }

    // MARK: Authentication (§7.2)

    /// Checks an assertion against a stored credential and answers its new
    /// signature count. A count that does not grow (when either is not 0)
    /// is refused as a cloned authenticator (§6.1.1).
    static func verifyAssertion(
        clientDataJSON: [UInt8], authenticatorData: [UInt8], signature: [UInt8], publicKey coseKey: [UInt8],
        storedSignCount: UInt32, expected: Expectation
    ) throws(APIError) -> UInt32 {
        let clientDataHash = try checkClientData(clientDataJSON, expected)
        let data = try parseAuthenticatorData(authenticatorData)
        try checkFlags(data, rpId: expected.rpId)
        let key = try publicKey(cose: coseKey)
        guard key.verify(signature: signature, message: authenticatorData + clientDataHash) else {
            throw invalid("the passkey's signature does not verify")
        }
        if (data.signCount != 0 || storedSignCount != 0) && data.signCount <= storedSignCount {
            throw APIError(
                .passkeyCloned, "the passkey's signature counter went backwards: the authenticator may be a clone")
        }
        return data.signCount
    }
}

extension WebAuthn {
    /// The `challenge` member of client data, to find the ceremony it answers; nil when there is none.
    static func challenge(ofClientData json: [UInt8]) -> String? {
        struct Challenge: Decodable { var challenge: String }
        return try? JSONDecoder().decode(Challenge.self, from: Data(json)).challenge
    }
}
