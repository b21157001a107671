import BrowserLoginProtocol
import BrowserLoginTestSigner
import Foundation

/// Encodes CBOR for the test authenticator (the server reads it with libcbor):
/// definite lengths, the shortest heads, map pairs in the order given.
indirect enum TestCBOR {
    case int(Int)
    case bytes([UInt8])
    case text(String)
    case map([(TestCBOR, TestCBOR)])
    case array([TestCBOR])

    var encoded: [UInt8] {
        switch self {
        case .int(let n): n >= 0 ? Self.head(0, UInt64(n)) : Self.head(1, UInt64(-1 - n))
        case .bytes(let b): Self.head(2, UInt64(b.count)) + b
        case .text(let t): Self.head(3, UInt64(t.utf8.count)) + Array(t.utf8)
        case .array(let items): Self.head(4, UInt64(items.count)) + items.flatMap(\.encoded)
        case .map(let pairs): Self.head(5, UInt64(pairs.count)) + pairs.flatMap { $0.0.encoded + $0.1.encoded }
        }
    }

    static func head(_ major: UInt8, _ value: UInt64) -> [UInt8] {
        let m = major << 5
        switch value {
        case 0..<24: return [m | UInt8(value)]
        case 24..<0x100: return [m | 24, UInt8(value)]
        case 0x100..<0x10000: return [m | 25, UInt8(value >> 8), UInt8(value & 0xFF)]
        case 0x10000..<0x1_0000_0000: return [m | 26] + (0..<4).reversed().map { UInt8((value >> (8 * UInt64($0))) & 0xFF) }
        default: return [m | 27] + (0..<8).reversed().map { UInt8((value >> (8 * UInt64($0))) & 0xFF) }
        }
    }
}

/// A WebAuthn authenticator in the test: one credential (a libcrypto key
/// pair of `TestSigner`), its signature counter, and the bytes a browser
/// would send for a registration or a sign-in. Every part can be bent to
/// make one check fail.
final class TestAuthenticator {
    let signer: TestSigner
    let credentialId: [UInt8]
    var counter: UInt32 = 0
    /// The user handle (the server's user id, as its `user.id` option gave it).
    var userHandle: [UInt8] = []

    init(_ kind: TestSigner.Kind) {
        signer = TestSigner(kind, keyId: nil)
        credentialId = (0..<16).map { _ in UInt8.random(in: 0...255) }
    }

    var coseAlgorithm: Int {
        switch signer.kind {
        case .p256: -7
        case .rsa: -257
        case .ed25519: -8
        }
    }

    /// The credential's public key as a COSE_Key.
    var coseKey: [UInt8] {
        let m = signer.publicMembers
        let pairs: [(TestCBOR, TestCBOR)] =
            switch signer.kind {
            case .p256:
                [
                    (.int(1), .int(2)), (.int(3), .int(-7)), (.int(-1), .int(1)), (.int(-2), .bytes(m["x"]!)),
                    (.int(-3), .bytes(m["y"]!)),
                ]
            case .rsa: [(.int(1), .int(3)), (.int(3), .int(-257)), (.int(-1), .bytes(m["n"]!)), (.int(-2), .bytes(m["e"]!))]
            case .ed25519: [(.int(1), .int(1)), (.int(3), .int(-8)), (.int(-1), .int(6)), (.int(-2), .bytes(m["x"]!))]
            }
        return TestCBOR.map(pairs).encoded
    }

    struct Bend {
        var type: String? = nil
        var origin: String? = nil
        var rpId: String? = nil
        var userPresent = true
        var userVerified = true
        var counter: UInt32? = nil
        var crossOrigin = false
    }

    static func clientData(type: String, challenge: String, origin: String, crossOrigin: Bool = false) -> [UInt8] {
        Array(
            #"{"type":"\#(type)","challenge":"\#(challenge)","origin":"\#(origin)","crossOrigin":\#(crossOrigin)}"#.utf8)
    }

    func authenticatorData(rpId: String, bend: Bend, attested: Bool) -> [UInt8] {
        var flags: UInt8 = 0
        if bend.userPresent { flags |= 0x01 }
        if bend.userVerified { flags |= 0x04 }
        if attested { flags |= 0x40 }
        let count = bend.counter ?? counter
        var data = Crypto.sha256(Array((bend.rpId ?? rpId).utf8)) + [flags]
        data += (0..<4).reversed().map { UInt8((count >> (8 * UInt32($0))) & 0xFF) }
        if attested {
            data += [UInt8](repeating: 0, count: 16)
            data += [UInt8(credentialId.count >> 8), UInt8(credentialId.count & 0xFF)] + credentialId + coseKey
        }
        return data
    }

    /// `navigator.credentials.create`'s answer: client data and attestation object.
    /// `format`: "none", or "packed" (self attestation, signed with the credential's key).
    func register(challenge: String, origin: String, rpId: String, format: String = "none", bend: Bend = Bend())
        -> (clientData: [UInt8], attestationObject: [UInt8])
    {
        let clientData = Self.clientData(
            type: bend.type ?? "webauthn.create", challenge: challenge, origin: bend.origin ?? origin,
            crossOrigin: bend.crossOrigin)
        let authData = authenticatorData(rpId: rpId, bend: bend, attested: true)
        var statement: TestCBOR = .map([])
        if format == "packed" {
            let signature = signer.signature(
                authData + Crypto.sha256(clientData), algorithm: signer.defaultAlgorithm, ecdsaDER: true)
            statement = .map([(.text("alg"), .int(coseAlgorithm)), (.text("sig"), .bytes(signature))])
        }
        let object = TestCBOR.map([
            (.text("fmt"), .text(format)), (.text("attStmt"), statement), (.text("authData"), .bytes(authData)),
        ])
        return (clientData, object.encoded)
    }

    /// `navigator.credentials.get`'s answer; the counter moves first, as an authenticator's does.
    func assert(challenge: String, origin: String, rpId: String, bend: Bend = Bend())
        -> (clientData: [UInt8], authenticatorData: [UInt8], signature: [UInt8])
    {
        counter += 1
        let clientData = Self.clientData(
            type: bend.type ?? "webauthn.get", challenge: challenge, origin: bend.origin ?? origin,
            crossOrigin: bend.crossOrigin)
        let authData = authenticatorData(rpId: rpId, bend: bend, attested: false)
        let signature = signer.signature(
            authData + Crypto.sha256(clientData), algorithm: signer.defaultAlgorithm, ecdsaDER: true)
        return (clientData, authData, signature)
    }

    // MARK: The JSON the page sends (PublicKeyCredential.toJSON())

    func registrationJSON(_ made: (clientData: [UInt8], attestationObject: [UInt8])) -> [String: Any] {
        [
            "id": Base64URL.encode(credentialId), "rawId": Base64URL.encode(credentialId), "type": "public-key",
            "authenticatorAttachment": "platform", "clientExtensionResults": [String: Any](),
            "response": [
                "clientDataJSON": Base64URL.encode(made.clientData),
                "attestationObject": Base64URL.encode(made.attestationObject), "transports": ["internal"],
            ],
        ]
    }

    func assertionJSON(_ made: (clientData: [UInt8], authenticatorData: [UInt8], signature: [UInt8])) -> [String: Any] {
        [
            "id": Base64URL.encode(credentialId), "rawId": Base64URL.encode(credentialId), "type": "public-key",
            "clientExtensionResults": [String: Any](),
            "response": [
                "clientDataJSON": Base64URL.encode(made.clientData),
                "authenticatorData": Base64URL.encode(made.authenticatorData),
                "signature": Base64URL.encode(made.signature), "userHandle": Base64URL.encode(userHandle),
            ],
        ]
    }
}
