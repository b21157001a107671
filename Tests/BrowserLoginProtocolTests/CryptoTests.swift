import Testing

@testable import BrowserLoginProtocol

@Suite struct PKCETests {
    /// RFC 7636 Appendix B.
    static let rfcVerifierBytes: [UInt8] = [
        116, 24, 223, 180, 151, 153, 224, 37, 79, 250, 96, 125, 216, 173, 187, 186, 22, 212, 37, 77, 105, 214, 191, 240,
        91, 88, 5, 88, 83, 132, 141, 121,
    ]
    static let rfcVerifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    static let rfcChallenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"

    @Test func rfc7636AppendixB() {
        #expect(Base64URL.encode(Self.rfcVerifierBytes) == Self.rfcVerifier)
        #expect(Base64URL.decode(Self.rfcVerifier) == Self.rfcVerifierBytes)
        let secret = ProofSecret(value: Self.rfcVerifier)
        #expect(secret.challenge == Self.rfcChallenge)
        #expect(Crypto.digest(Self.rfcVerifier) == Self.rfcChallenge)
        #expect(secret.verifies(challenge: Self.rfcChallenge))
        #expect(!secret.verifies(challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGMSJw8-cN"))
        #expect(!secret.verifies(challenge: String(Self.rfcChallenge.dropLast())))
        #expect(ProofSecret.isWellFormed(Self.rfcVerifier))
        #expect(ProofSecret.isWellFormed(Self.rfcChallenge))
    }

    /// The second example of docs/protocol.md §3.
    @Test func docsRecoveryExample() {
        let key = ProofSecret(value: "Jr6sV2xQm8bT0cLw4nYhE1uKpZ9aGfD3oXiR7eS5_-M")
        #expect(key.challenge == "WzK8ZggyFMv8v5D1L3K2PkBU5pedUPl6UJYDVMqfJOU")
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
    }

    @Test func sha256KnownAnswers() {
        let empty = Self.hex(Crypto.sha256([UInt8]()))
        #expect(empty == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let abc = Self.hex(Crypto.sha256(Array("abc".utf8)))
        #expect(abc == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // The receipt's tokenDigest is the same construction over the access token.
        #expect(Crypto.digest("") == "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU")
        // FIPS 180-2's two-block message, and a million 'a's (many blocks, one call).
        let twoBlocks = Self.hex(Crypto.sha256(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
        #expect(twoBlocks == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        let million = Self.hex(Crypto.sha256([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)))
        #expect(million == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// libcrypto is loaded on first use: a missing library is an error that names it, not a crash at load.
    @Test func libcryptoThatCannotBeLoadedIsNamed() throws {
        guard case .failure(let error) = LibCrypto.load("libcrypto-missing.so.99") else {
            Issue.record("a missing library loaded")
            return
        }
        #expect(error.message.contains("libcrypto-missing.so.99"))
        // The real one loads, with every function the programs call.
        guard case .success = LibCrypto.load("libcrypto.so.3") else {
            Issue.record("libcrypto.so.3 did not load")
            return
        }
    }

    /// RFC 4231 test case 2.
    @Test func hmacKnownAnswer() {
        let mac = Crypto.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(Base64URL.encode(mac) == "W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM")
    }

    @Test func generatedSecretsAreWellFormedAndDiffer() throws {
        var seen: Set<String> = []
        for _ in 0..<64 {
            let secret = try ProofSecret.generate()
            #expect(secret.value.utf8.count == 43)
            #expect(ProofSecret.isWellFormed(secret.value))
            #expect(Base64URL.decode(secret.value)?.count == 32)
            #expect(ProofSecret.isWellFormed(secret.challenge))
            seen.insert(secret.value)
        }
        #expect(seen.count == 64)
    }

    @Test func randomBytesAndTokens() throws {
        #expect(try Crypto.randomBytes(0).isEmpty)
        #expect(try Crypto.randomBytes(32).count == 32)
        #expect(try Crypto.randomBytes(32) != Crypto.randomBytes(32))
        #expect(try Crypto.randomToken(bytes: 16).utf8.count == 22)  // 128 bits for ids
        #expect(try Crypto.randomToken().utf8.count == 43)  // 256 bits for tokens
    }

    @Test(arguments: [
        ("", "", true), ("a", "a", true), (rfcVerifier, rfcVerifier, true), ("a", "b", false), ("a", "", false),
        ("", "a", false), ("abc", "abd", false), ("abc", "abcd", false), ("abcd", "abc", false), ("Abc", "abc", false),
        ("é", "e\u{301}", false),  // bytes, not canonical equivalence
    ])
    func constantTimeEquals(_ a: String, _ b: String, _ equal: Bool) {
        #expect(Crypto.constantTimeEquals(a, b) == equal)
    }
}

@Suite struct Base64URLTests {
    @Test(arguments: [
        ([UInt8](), ""), ([0x66], "Zg"), ([0x66, 0x6F], "Zm8"), ([0x66, 0x6F, 0x6F], "Zm9v"),
        (Array("foobar".utf8), "Zm9vYmFy"), ([0xFB, 0xFF], "-_8"), ([0xFF, 0xFF, 0xFE], "___-"), ([0x00], "AA"),
    ])
    func knownEncodings(_ bytes: [UInt8], _ text: String) {
        #expect(Base64URL.encode(bytes) == text)
        #expect(Base64URL.decode(text) == bytes)
    }

    @Test func roundTripsEveryLength() throws {
        for length in 0...70 {
            let bytes = try Crypto.randomBytes(length)
            let text = Base64URL.encode(bytes)
            #expect(text.utf8.count == (length * 8 + 5) / 6)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
    }

    @Test(arguments: [
        "Zg==", "Zg=", "Zm8=", "+/8", "Zm 9v", "Zm9v\n", "A", "AAAAA", "Zm9vY", "é", "Zm9v.", "%41%41",
    ])
    func refuses(_ text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test(arguments: [
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", 43, true),
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjX", 43, false),
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXkk", 43, false),
        ("dBjftJeZ4CVP+mB92K27uhbUJU1p1r/wW1gFWFOEjXk", 43, false),
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjX=", 43, false),
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjX~", 43, false),
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjX.", 43, false),
        ("", 0, true),
    ])
    func isEncoded(_ text: String, _ length: Int, _ expected: Bool) {
        #expect(Base64URL.isEncoded(text, length: length) == expected)
    }
}
