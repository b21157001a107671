/// The passkey checks on any bytes: the fuzz target `webauthn`
/// (docs/reliability.md, "Fuzzing"). The first byte picks what the rest is:
/// an attestation object, authenticator data with a COSE key and a
/// signature, a COSE key, client data, or any CBOR. A refusal is a normal
/// outcome; a crash, or a CBOR item read whole but not as a prefix, is a
/// finding (`check`).
public enum PasskeyFuzzing {
    static let expected = WebAuthn.Expectation(
        ceremony: .create, challenge: "AAAA", origin: "https://login.example.com", rpId: "login.example.com")
    static let clientData = Array(
        #"{"type":"webauthn.create","challenge":"AAAA","origin":"https://login.example.com"}"#.utf8)

    public static func run(_ bytes: [UInt8], check: (Bool, String) -> Void) {
        guard let control = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        switch control % 5 {
        case 0: _ = try? WebAuthn.verifyRegistration(clientDataJSON: clientData, attestationObject: rest, expected: expected)
        case 1:
            // Two length bytes, that many of authenticator data, then the COSE key; the signature is the data's tail.
            guard rest.count >= 2 else { return }
            let length = min(Int(rest[0]) << 8 | Int(rest[1]), rest.count - 2)
            let data = Array(rest[2..<(2 + length)])
            let key = Array(rest[(2 + length)...])
            var get = expected
            get.ceremony = .get
            let clientData = Array(#"{"type":"webauthn.get","challenge":"AAAA","origin":"https://login.example.com"}"#.utf8)
            _ = try? WebAuthn.verifyAssertion(
                clientDataJSON: clientData, authenticatorData: data, signature: Array(data.suffix(64)), publicKey: key,
                storedSignCount: UInt32(control), expected: get)
        case 2: _ = try? WebAuthn.publicKey(cose: rest)
        case 3:
            _ = try? WebAuthn.checkClientData(rest, expected)
            _ = WebAuthn.challenge(ofClientData: rest)
        default:
            let whole = CBOR.decode(rest)
            let prefix = CBOR.decodePrefix(rest)
            if whole != nil { check(prefix?.length == rest.count && prefix?.value == whole, "decode and decodePrefix disagree") }
        }
    }
}
