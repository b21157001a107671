import BrowserLoginProtocol
import BrowserLoginTestSigner
import Testing

@testable import LoginServer

/// The ceremony checks of `WebAuthn` (WebAuthn Level 2 §7.1, §7.2) with real
/// signatures: the test authenticator signs with libcrypto, the server
/// reads its CBOR with libcbor and verifies with libcrypto.
@Suite struct WebAuthnTests {
    static let origin = "https://login.example.com"
    static let rpId = "login.example.com"
    static let challenge = "Yz1mNzg0ZjJhM2I5YzU0ZDFlYTg2ZjA5YjNlYjU1Y2Q"
    static let kinds: [TestSigner.Kind] = [.p256, .rsa(bits: 2048), .ed25519]

    func expectation(_ ceremony: WebAuthn.Expectation.Ceremony) -> WebAuthn.Expectation {
        WebAuthn.Expectation(ceremony: ceremony, challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId)
    }

    func register(_ a: TestAuthenticator, format: String = "none", bend: TestAuthenticator.Bend = .init()) throws(APIError)
        -> WebAuthn.Registration
    {
        let made = a.register(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId, format: format, bend: bend)
        return try WebAuthn.verifyRegistration(
            clientDataJSON: made.clientData, attestationObject: made.attestationObject, expected: expectation(.create))
    }

    func expectCode(
        _ code: ServerErrorCode, _ body: () throws(APIError) -> Void, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        do {
            try body()
            Issue.record("accepted; expected \(code)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(error.message)", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: kinds) func registersAndSignsInWithEachKeyType(kind: TestSigner.Kind) throws {
        let a = TestAuthenticator(kind)
        for format in ["none", "packed"] {
            let registration = try register(a, format: format)
            #expect(registration.credentialId == a.credentialId)
            #expect(registration.publicKey == a.coseKey)
            #expect(registration.algorithm.rawValue == a.coseAlgorithm)
            #expect(registration.attestationFormat == format)
        }
        var stored: UInt32 = 0
        for _ in 0..<3 {
            let made = a.assert(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId)
            stored = try WebAuthn.verifyAssertion(
                clientDataJSON: made.clientData, authenticatorData: made.authenticatorData, signature: made.signature,
                publicKey: a.coseKey, storedSignCount: stored, expected: expectation(.get))
            #expect(stored == a.counter)
        }
    }

    @Test func clientDataIsChecked() {
        let a = TestAuthenticator(.p256)
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(type: "webauthn.get")) }
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(origin: "https://evil.example")) }
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(origin: "http://login.example.com"))
        }
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(crossOrigin: true)) }
        let other = a.register(challenge: "b3RoZXI", origin: Self.origin, rpId: Self.rpId)
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.verifyRegistration(
                clientDataJSON: other.clientData, attestationObject: other.attestationObject, expected: expectation(.create))
        }
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.checkClientData(Array("not json".utf8), expectation(.create))
        }
    }

    @Test func authenticatorDataFlagsAndRpAreChecked() {
        let a = TestAuthenticator(.ed25519)
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(rpId: "example.com")) }
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try register(a, bend: .init(userPresent: false)) }
        expectCode(.passkeyUserVerificationFailed) { () throws(APIError) in _ = try register(a, bend: .init(userVerified: false))
        }
        let made = a.assert(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId, bend: .init(userVerified: false))
        expectCode(.passkeyUserVerificationFailed) { () throws(APIError) in
            _ = try WebAuthn.verifyAssertion(
                clientDataJSON: made.clientData, authenticatorData: made.authenticatorData, signature: made.signature,
                publicKey: a.coseKey, storedSignCount: 0, expected: expectation(.get))
        }
    }

    @Test func signaturesAreChecked() throws {
        let a = TestAuthenticator(.p256)
        let b = TestAuthenticator(.p256)
        let made = a.assert(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId)
        // Another key's public half.
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.verifyAssertion(
                clientDataJSON: made.clientData, authenticatorData: made.authenticatorData, signature: made.signature,
                publicKey: b.coseKey, storedSignCount: 0, expected: expectation(.get))
        }
        // The counter changed after signing.
        var tampered = made.authenticatorData
        tampered[36] ^= 0x40
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.verifyAssertion(
                clientDataJSON: made.clientData, authenticatorData: tampered, signature: made.signature,
                publicKey: a.coseKey, storedSignCount: 0, expected: expectation(.get))
        }
        // A packed self attestation whose signature is another key's.
        let packed = a.register(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId, format: "packed")
        let forged = b.register(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId, format: "packed")
        guard let object = CBOR.decode(packed.attestationObject), let forgedObject = CBOR.decode(forged.attestationObject),
            let authData = object["authData"]?.bytes, let forgedSig = forgedObject["attStmt"]?["sig"]?.bytes
        else {
            Issue.record("the test authenticator's CBOR did not decode")
            return
        }
        let bad = TestCBOR.map([
            (.text("fmt"), .text("packed")),
            (.text("attStmt"), .map([(.text("alg"), .int(-7)), (.text("sig"), .bytes(forgedSig))])),
            (.text("authData"), .bytes(authData)),
        ]).encoded
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.verifyRegistration(
                clientDataJSON: packed.clientData, attestationObject: bad, expected: expectation(.create))
        }
        // A certificate chain (full attestation) is not accepted.
        let withChain = TestCBOR.map([
            (.text("fmt"), .text("packed")),
            (
                .text("attStmt"),
                .map([(.text("alg"), .int(-7)), (.text("sig"), .bytes(forgedSig)), (.text("x5c"), .array([.bytes([1, 2])]))])
            ),
            (.text("authData"), .bytes(authData)),
        ]).encoded
        expectCode(.passkeyInvalid) { () throws(APIError) in
            _ = try WebAuthn.verifyRegistration(
                clientDataJSON: packed.clientData, attestationObject: withChain, expected: expectation(.create))
        }
    }

    @Test func aCounterThatDoesNotGrowIsRefusedAsAClone() throws {
        let a = TestAuthenticator(.ed25519)
        a.counter = 4
        let made = a.assert(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId)  // counter 5
        for stored: UInt32 in [5, 9] {
            expectCode(.passkeyCloned) { () throws(APIError) in
                _ = try WebAuthn.verifyAssertion(
                    clientDataJSON: made.clientData, authenticatorData: made.authenticatorData, signature: made.signature,
                    publicKey: a.coseKey, storedSignCount: stored, expected: expectation(.get))
            }
        }
        #expect(
            try WebAuthn.verifyAssertion(
                clientDataJSON: made.clientData, authenticatorData: made.authenticatorData, signature: made.signature,
                publicKey: a.coseKey, storedSignCount: 4, expected: expectation(.get)) == 5)
        // An authenticator without a counter (always 0) is accepted.
        let still = a.assert(challenge: Self.challenge, origin: Self.origin, rpId: Self.rpId, bend: .init(counter: 0))
        #expect(
            try WebAuthn.verifyAssertion(
                clientDataJSON: still.clientData, authenticatorData: still.authenticatorData, signature: still.signature,
                publicKey: a.coseKey, storedSignCount: 0, expected: expectation(.get)) == 0)
    }

    @Test func cborIsReadStrictly() {
        #expect(CBOR.decode([0xA1, 0x01, 0x02]) == .map([CBORPair(key: .unsigned(1), value: .unsigned(2))]))
        #expect(CBOR.decode([0x20]) == .negative(0))
        #expect(CBOR.decode([0xA1, 0x01, 0x02, 0x00]) == nil, "bytes after the item")
        #expect(CBOR.decode([0xA2, 0x01, 0x02, 0x01, 0x03]) == nil, "a key twice")
        #expect(CBOR.decode([0x5F, 0x41, 0x00, 0xFF]) == nil, "an indefinite byte string")
        #expect(CBOR.decode([0xC1, 0x01]) == nil, "a tag")
        // Floats are refused, not asked whether they are null (libcbor asserts on that).
        #expect(CBOR.decode([0xFA, 0x00, 0x00, 0x03, 0x00]) == nil, "a float")
        #expect(CBOR.decode([0xA1, 0x61, 0x78, 0xF9, 0x3C, 0x00]) == nil, "a half float in a map")
        #expect(CBOR.decode([0xF6]) == .null)
        // Containers that claim more items than there are bytes (libcbor would allocate them first).
        #expect(CBOR.decode([0xBB, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00]) == nil, "a map of 2^36 pairs")
        #expect(CBOR.decode([0x9A, 0x00, 0x01, 0x00, 0x00] + [UInt8](repeating: 0x00, count: 100)) == nil, "an array of 65536")
        #expect(CBOR.decode([0x83, 0x81, 0x01, 0x82, 0x02, 0x03, 0xA1, 0x04, 0x05]) != nil, "claims that fit")
        #expect(CBOR.decode([0xF5]) == .bool(true))
        #expect(CBOR.decode([0xA1, 0x01]) == nil, "truncated")
        #expect(CBOR.decode(Array(repeating: 0x81, count: 40) + [0x01]) == nil, "nested too deep")
        #expect(CBOR.decodePrefix([0x01, 0x02])?.length == 1)
    }

    @Test func aKeyThatIsNotValidIsRefused() {
        // A P-256 point off the curve; an RSA key of 1024 bits; an alg that does not fit the kty.
        let offCurve = TestCBOR.map([
            (.int(1), .int(2)), (.int(3), .int(-7)), (.int(-1), .int(1)), (.int(-2), .bytes([UInt8](repeating: 1, count: 32))),
            (.int(-3), .bytes([UInt8](repeating: 2, count: 32))),
        ]).encoded
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try WebAuthn.publicKey(cose: offCurve) }
        let small = TestAuthenticator(.rsa(bits: 1024))
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try WebAuthn.publicKey(cose: small.coseKey) }
        let mixed = TestCBOR.map([
            (.int(1), .int(1)), (.int(3), .int(-7)), (.int(-1), .int(6)), (.int(-2), .bytes([UInt8](repeating: 1, count: 32))),
        ]).encoded
        expectCode(.passkeyInvalid) { () throws(APIError) in _ = try WebAuthn.publicKey(cose: mixed) }
    }

    @Test func theRelyingPartyComesFromTheOriginsHost() {
        let configured = ["example.com", "login.example.com", "localhost"]
        #expect(Passkeys.relyingParty(host: "login.example.com", configured: configured) == "login.example.com")
        #expect(Passkeys.relyingParty(host: "www.example.com", configured: configured) == "example.com")
        #expect(Passkeys.relyingParty(host: "localhost", configured: configured) == "localhost")
        #expect(Passkeys.relyingParty(host: "badexample.com", configured: configured) == nil)
        #expect(Passkeys.relyingParty(host: "example.org", configured: configured) == nil)
        #expect(Passkeys.relyingParty(host: "127.0.0.1", configured: configured + ["127.0.0.1"]) == nil)
        #expect(Passkeys.relyingParty(host: "[::1]", configured: configured) == nil)
    }

    @Test func passkeyRpIdsAreValidated() throws {
        func check(_ ids: [String]) -> String? {
            var c = ServerConfiguration()
            c.passkeyRpIds = ids
            do {
                try c.validateSignInMethods()
                return nil
            } catch { return error.rule }
        }
        #expect(check([]) == nil)
        #expect(check(["login.example.com", "localhost"]) == nil)
        #expect(check(["127.0.0.1"]) == "not-ip")
        #expect(check(["::1"]) == "not-ip")
        #expect(check(["[::1]"]) == "not-ip")
        #expect(check(["Login.example.com"]) == "host-name")
        #expect(check(["https://login.example.com"]) == "host-name")
        #expect(check(["login.example.com:443"]) == "host-name")
        #expect(check(["localhost", "localhost"]) == "unique")
    }
}
