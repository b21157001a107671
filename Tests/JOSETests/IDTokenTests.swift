import BrokerJOSE
import BrowserLoginProtocol
import BrowserLoginTestSigner
import Foundation
import Testing

/// Keys made once for the suite (RSA key generation takes a moment).
enum Keys {
    static let rsa = TestSigner(.rsa(bits: 2048), keyId: "rsa-1")
    static let ec = TestSigner(.p256, keyId: "ec-1")
    static let ed = TestSigner(.ed25519, keyId: "ed-1")
    /// Another RSA key published under the same key id as `rsa`.
    static let impostor = TestSigner(.rsa(bits: 2048), keyId: "rsa-1")
    static let set = try! JWKSet(json: TestSigner.jwks([rsa.jwk(), ec.jwk(), ed.jwk()]))
}

let issuer = "https://id.example.com/realms/main"
let clientId = "chat-desktop"
let nonce = "n-0S6_WzA2Mj"
let now: Int64 = 1_800_000_000

/// Claims of a good token as JSON fragments, in order; tests replace or drop members.
func claims(_ changes: [String: String?] = [:]) -> String {
    var members: [(String, String)] = [
        ("iss", TestSigner.quoted(issuer)), ("sub", TestSigner.quoted("user-42")), ("aud", TestSigner.quoted(clientId)),
        ("exp", "\(now + 300)"), ("iat", "\(now - 10)"), ("nonce", TestSigner.quoted(nonce)),
        ("email", TestSigner.quoted("ada@example.com")), ("name", TestSigner.quoted("Ada")),
    ]
    for (name, value) in changes.sorted(by: { $0.key < $1.key }) {
        members.removeAll { $0.0 == name }
        if let value { members.append((name, value)) }
    }
    return TestSigner.object(members)
}

func expectations(issuer: String = issuer, nonce: String? = nonce, now: Int64 = now) -> IDTokenExpectations {
    IDTokenExpectations(issuer: issuer, clientId: clientId, nonce: nonce, now: now)
}

/// The reason `verify` refuses `token` with; nil when it accepts it. Also
/// checks that no message repeats the token or the nonce.
func refusal(_ token: String, keys: JWKSet = Keys.set, _ expect: IDTokenExpectations = expectations())
    -> JOSEError.Reason?
{
    do {
        _ = try IDToken.verify(token, keys: keys, expect: expect)
        return nil
    } catch {
        #expect(!error.message.contains(token) && !error.message.contains(nonce) && !error.message.isEmpty)
        return error.reason
    }
}

@Suite struct IDTokenSignatureTests {
    @Test(arguments: [
        (Keys.rsa, "RS256"), (Keys.rsa, "PS256"), (Keys.ec, "ES256"), (Keys.ed, "EdDSA"),
    ])
    func eachAlgorithmVerifies(signer: TestSigner, algorithm: String) throws {
        let token = signer.token(
            claims: claims(["tid": TestSigner.quoted("t1"), "auth_time": "\(now - 20)"]), algorithm: algorithm)
        let verified = try IDToken.verify(token, keys: Keys.set, expect: expectations())
        #expect(
            verified
                == IDTokenClaims(
                    issuer: issuer, subject: "user-42", audience: [clientId], authorizedParty: nil, expiresAt: now + 300,
                    issuedAt: now - 10, nonce: nonce, email: "ada@example.com", name: "Ada", preferredUsername: nil,
                    tenantId: "t1", authTime: now - 20))
        #expect(try IDToken.header(token) == JWSHeader(algorithm: algorithm, keyId: signer.keyId, type: "JWT"))
    }

    @Test(arguments: [
        (Keys.rsa, "RS256"), (Keys.rsa, "PS256"), (Keys.ec, "ES256"), (Keys.ed, "EdDSA"),
    ])
    func flippedByteIsABadSignature(signer: TestSigner, algorithm: String) {
        let parts = signer.token(claims: claims(), algorithm: algorithm).split(separator: ".").map(String.init)
        var signature = Base64URL.decode(parts[2])!
        signature[signature.count / 2] ^= 0x01
        #expect(refusal("\(parts[0]).\(parts[1]).\(Base64URL.encode(signature))") == .badSignature)
        // A changed claim under the original signature.
        let forged = Base64URL.encode(Array(claims(["sub": TestSigner.quoted("admin")]).utf8))
        #expect(refusal("\(parts[0]).\(forged).\(parts[2])") == .badSignature)
    }

    @Test func anotherKeyWithTheSameKeyIdIsABadSignature() {
        #expect(refusal(Keys.impostor.token(claims: claims())) == .badSignature)
    }

    @Test func algNoneIsRefused() {
        let header = Base64URL.encode(Array(#"{"alg":"none","kid":"rsa-1"}"#.utf8))
        let body = Base64URL.encode(Array(claims().utf8))
        #expect(refusal("\(header).\(body).") == .unsupportedAlgorithm)
        #expect(refusal("\(header).\(body)") == .malformed)
    }

    /// The algorithm confusion attack: HMAC keyed with the RSA public key.
    @Test func hs256WithTheRSAModulusIsRefused() {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","kid":"rsa-1"}"#.utf8))
        let input = "\(header).\(Base64URL.encode(Array(claims().utf8)))"
        let mac = Crypto.hmacSHA256(key: Keys.rsa.publicMembers["n"]!, message: Array(input.utf8))
        #expect(refusal("\(input).\(Base64URL.encode(mac))") == .unsupportedAlgorithm)
    }

    @Test func otherAlgorithmsAreRefused() {
        for algorithm in ["RS384", "ES512", "rs256", "Ed25519", ""] {
            let header = TestSigner.object([("alg", TestSigner.quoted(algorithm)), ("kid", "\"rsa-1\"")])
            #expect(
                refusal(Keys.rsa.token(header: header, claims: claims(), algorithm: "RS256")) == .unsupportedAlgorithm)
        }
    }

    @Test func unknownKeyId() throws {
        let stranger = TestSigner(.p256, keyId: "ec-2")
        let token = stranger.token(claims: claims())
        #expect(refusal(token) == .unknownKey)
        // After the caller re-fetches a set that has the key, the token verifies.
        let refreshed = try JWKSet(json: TestSigner.jwks([Keys.rsa.jwk(), stranger.jwk()]))
        #expect(refusal(token, keys: refreshed) == nil)
    }

    @Test func messagesQuoteTokenValuesBriefly() throws {
        let kid = String(repeating: "k", count: 5000) + "\\n"
        let header = TestSigner.object([("alg", "\"ES256\""), ("kid", "\"\(kid)\"")])
        do {
            _ = try IDToken.verify(
                Keys.ec.token(header: header, claims: claims(), algorithm: "ES256"), keys: Keys.set, expect: expectations())
            Issue.record("accepted an unknown key id")
        } catch {
            #expect(error.reason == .unknownKey)
            #expect(error.message.count < 200 && !error.message.contains("\n"))
        }
    }

    @Test func tokenWithoutKeyIdUsesTheOnlyKeyForItsAlgorithm() throws {
        let unnamed = TestSigner(.ed25519, keyId: nil)
        let set = try JWKSet(json: TestSigner.jwks([Keys.rsa.jwk(), unnamed.jwk()]))
        #expect(refusal(unnamed.token(claims: claims()), keys: set) == nil)
        #expect(set.key(id: nil, algorithm: "EdDSA") != nil)
        #expect(set.key(id: nil, algorithm: "ES256") == nil)
        // Two keys for the algorithm: a token without kid matches neither.
        let two = try JWKSet(json: TestSigner.jwks([Keys.ed.jwk(), unnamed.jwk()]))
        #expect(two.key(id: nil, algorithm: "EdDSA") == nil)
        #expect(refusal(unnamed.token(claims: claims()), keys: two) == .unknownKey)
    }

    @Test func es256SignatureInDERIsRefused() {
        let header = TestSigner.object([("alg", "\"ES256\""), ("kid", "\"ec-1\"")])
        let token = Keys.ec.token(header: header, claims: claims(), algorithm: "ES256", ecdsaDER: true)
        #expect(Base64URL.decode(String(token.split(separator: ".")[2]))!.count != 64)
        #expect(refusal(token) == .badSignature)
    }

    @Test func keyTypeMustFitTheAlgorithm() throws {
        // An RS256 header naming the EC key, an ES256 header naming the RSA key.
        let onEC = Keys.rsa.token(
            header: TestSigner.object([("alg", "\"RS256\""), ("kid", "\"ec-1\"")]), claims: claims(), algorithm: "RS256")
        #expect(refusal(onEC) == .unsupportedAlgorithm)
        let onRSA = Keys.ec.token(
            header: TestSigner.object([("alg", "\"ES256\""), ("kid", "\"rsa-1\"")]), claims: claims(), algorithm: "ES256")
        #expect(refusal(onRSA) == .unsupportedAlgorithm)
        // A JWK that names its algorithm is for that one only.
        let set = try JWKSet(json: TestSigner.jwks([Keys.rsa.jwk(extra: ["alg": "\"RS256\""])]))
        #expect(refusal(Keys.rsa.token(claims: claims(), algorithm: "RS256"), keys: set) == nil)
        #expect(refusal(Keys.rsa.token(claims: claims(), algorithm: "PS256"), keys: set) == .unsupportedAlgorithm)
    }
}

@Suite struct JWKSetTests {
    /// One set and its keys serve many verifications at once (the keys are immutable EVP_PKEYs).
    @Test func concurrentVerification() async {
        let tokens = [Keys.rsa, Keys.ec, Keys.ed].map { $0.token(claims: claims()) }
        let accepted = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<60 {
                let token = tokens[index % 3]
                group.addTask { (try? IDToken.verify(token, keys: Keys.set, expect: expectations())) != nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(accepted == 60)
    }

    @Test func rsaBelow2048BitsIsRefused() throws {
        let weak = TestSigner(.rsa(bits: 1024), keyId: "weak")
        let set = try JWKSet(json: TestSigner.jwks([weak.jwk()]))
        #expect(set.keys.isEmpty)
        #expect(refusal(weak.token(claims: claims()), keys: set) == .unknownKey)
    }

    @Test func keysItCannotUseAreSkipped() throws {
        let n = Base64URL.encode(Keys.rsa.publicMembers["n"]!)
        let set = try JWKSet(
            json: TestSigner.jwks([
                Keys.ec.jwk(extra: ["use": "\"enc\""]),
                Keys.ed.jwk(extra: ["key_ops": #"["encrypt"]"#]),
                #"{"kty":"oct","kid":"hmac","k":"c2VjcmV0"}"#,
                #"{"kty":"EC","crv":"P-384","kid":"p384","x":"AA","y":"AA"}"#,
                #"{"kty":"EC","crv":"P-256","kid":"off-curve","x":"\#(Base64URL.encode([UInt8](repeating: 1, count: 32)))","y":"\#(Base64URL.encode([UInt8](repeating: 2, count: 32)))"}"#,
                #"{"kty":"RSA","kid":"bad","n":"not base64!","e":"AQAB"}"#,
                Keys.rsa.jwk(extra: ["use": "7"]),
                #"{"kty":"RSA","kid":"e-is-1","n":"\#(n)","e":"AQ"}"#,
                #"{"kty":"RSA","kid":"e-is-even","n":"\#(n)","e":"AQAA"}"#,
                "17",
                Keys.rsa.jwk(extra: ["use": "\"sig\"", "key_ops": #"["verify"]"#]),
            ]))
        #expect(set.keys.map(\.keyId) == ["rsa-1"])
        #expect(set.keys.map(\.keyType) == ["RSA"])
        #expect(refusal(Keys.ec.token(claims: claims()), keys: set) == .unknownKey)
        #expect(refusal(Keys.rsa.token(claims: claims()), keys: set) == nil)
    }

    @Test func notAKeySetIsMalformed() {
        for text in ["[]", "{}", #"{"keys":{}}"#, "{\"keys\":[]", #"{"keys":[],"keys":[]}"#] {
            #expect(throws: JOSEError.self) { try JWKSet(json: Array(text.utf8)) }
            do {
                _ = try JWKSet(json: Array(text.utf8))
            } catch {
                #expect(error.reason == .malformed)
            }
        }
    }
}

@Suite struct IDTokenFormTests {
    @Test func malformedEncodings() {
        let good = Keys.rsa.token(claims: claims())
        let parts = good.split(separator: ".").map(String.init)
        // The header's length is not a multiple of 3 bytes: base64 with padding would end it with "=".
        let padding = String(repeating: "=", count: (4 - parts[0].utf8.count % 4) % 4)
        #expect(!padding.isEmpty)
        for token in [
            "\(parts[0])\(padding).\(parts[1]).\(parts[2])",  // padding
            "\(parts[0]).\(parts[1]).\(parts[2])==",
            "\(parts[0])+.\(parts[1]).\(parts[2])",  // base64, not base64url
            "\(parts[0]).\(parts[1]).\(parts[2]).\(parts[2])",  // four parts
            "\(parts[0]).\(parts[1])",  // two parts
            Keys.rsa.token(claims: ""),  // empty claims, signed
            "", "...", "a.b.c",
            " \(good)",
        ] {
            #expect(refusal(token) == .malformed, "\(token.prefix(20))")
        }
    }

    @Test func strayBitsInTheLastCharacterAreRefused() {
        let parts = Keys.rsa.token(claims: claims()).split(separator: ".").map(String.init)
        // 256 signature bytes: 342 characters, the last carrying 2 bits and 4 zero bits.
        var signature = Array(parts[2].utf8)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let index = alphabet.firstIndex(of: signature[signature.count - 1])!
        signature[signature.count - 1] = alphabet[index | 1]
        #expect(refusal("\(parts[0]).\(parts[1]).\(String(decoding: signature, as: UTF8.self))") == .malformed)
    }

    @Test func duplicateMembersAreRefused() {
        let duplicateClaim = claims().dropLast() + #","sub":"admin"}"#
        #expect(refusal(Keys.rsa.token(claims: String(duplicateClaim))) == .malformed)
        let header = #"{"alg":"RS256","kid":"rsa-1","alg":"RS256"}"#
        #expect(refusal(Keys.rsa.token(header: header, claims: claims(), algorithm: "RS256")) == .malformed)
        #expect(throws: JOSEError.self) { try IDToken.header(Keys.rsa.token(header: header, claims: "{}", algorithm: "RS256")) }
    }

    @Test func headerMembers() {
        let signed = { (header: String) in Keys.rsa.token(header: header, claims: claims(), algorithm: "RS256") }
        #expect(refusal(signed(#"{"kid":"rsa-1"}"#)) == .malformed)
        #expect(refusal(signed(#"{"alg":"RS256","kid":1}"#)) == .malformed)
        #expect(refusal(signed(#"{"alg":"RS256","kid":"rsa-1","crit":["exp"],"exp":1}"#)) == .malformed)
        #expect(refusal(signed(#"["RS256"]"#)) == .malformed)
    }

    @Test func claimTypes() {
        let token = { (changes: [String: String?]) in Keys.rsa.token(claims: claims(changes)) }
        #expect(refusal(token(["exp": "\(now + 300).0"])) == .malformed)
        #expect(refusal(token(["exp": "1.8e9"])) == .malformed)
        #expect(refusal(token(["exp": "\"\(now + 300)\""])) == .malformed)
        #expect(refusal(token(["iat": "\(now).5"])) == .malformed)
        #expect(refusal(token(["auth_time": "true"])) == .malformed)
        #expect(refusal(token(["aud": "[\"chat-desktop\", 7]"])) == .malformed)
        #expect(refusal(token(["aud": "{}"])) == .malformed)
        #expect(refusal(token(["email": "null"])) == .malformed)
        #expect(refusal(Keys.rsa.token(claims: "[1]")) == .malformed)
        for name in ["iss", "sub", "aud", "exp", "iat"] {
            #expect(refusal(token([name: nil])) == .missingClaim, "\(name)")
        }
        #expect(refusal(token(["sub": "\"\""])) == .missingClaim)
    }

    @Test func messagesNeverCarryTheNonce() throws {
        do {
            _ = try IDToken.verify(
                Keys.rsa.token(claims: claims()), keys: Keys.set, expect: expectations(nonce: "other-secret-nonce"))
            Issue.record("accepted a wrong nonce")
        } catch {
            #expect(!error.message.contains("other-secret-nonce") && !error.message.contains(nonce))
            #expect(error.description == error.message)
        }
    }
}

@Suite struct IDTokenClaimTests {
    func verify(_ changes: [String: String?], _ expect: IDTokenExpectations = expectations()) -> JOSEError.Reason? {
        refusal(Keys.ec.token(claims: claims(changes)), expect)
    }

    @Test func issuerIsExact() {
        #expect(verify(["iss": "\"https://id.example.com/realms/other\""]) == .issuer)
        #expect(verify(["iss": "\"https://id.example.com/realms/main/\""]) == .issuer)
        #expect(verify(["iss": "\"HTTPS://id.example.com/realms/main\""]) == .issuer)
    }

    @Test func issuerTemplateTakesTheTenantId() {
        let template = expectations(issuer: "https://login.example.com/{tenantid}/v2.0")
        let tenant = "9188040d-6c67-4c5b-b112-36a304b66dad"
        let tokenIssuer = TestSigner.quoted("https://login.example.com/\(tenant)/v2.0")
        #expect(verify(["iss": tokenIssuer, "tid": TestSigner.quoted(tenant)], template) == nil)
        #expect(verify(["iss": tokenIssuer, "tid": "\"another-tenant\""], template) == .issuer)
        #expect(verify(["iss": tokenIssuer], template) == .missingClaim)
        #expect(verify(["iss": "\"https://login.example.com/{tenantid}/v2.0\""], template) == .missingClaim)
        // Without the placeholder, tid is not consulted.
        #expect(verify(["tid": TestSigner.quoted(tenant)]) == nil)
    }

    @Test func audienceAndAuthorizedParty() {
        #expect(verify(["aud": "\"other-app\""]) == .audience)
        #expect(verify(["aud": "[\"other-app\",\"api\"]"]) == .audience)
        #expect(verify(["aud": "[]"]) == .audience)
        #expect(verify(["aud": "[\"chat-desktop\"]"]) == nil)
        #expect(verify(["aud": "[\"chat-desktop\",\"api\"]"]) == .authorizedParty)
        #expect(verify(["aud": "[\"chat-desktop\",\"api\"]", "azp": "\"api\""]) == .authorizedParty)
        #expect(verify(["aud": "[\"chat-desktop\",\"api\"]", "azp": "\"chat-desktop\""]) == nil)
        #expect(verify(["azp": "\"other-app\""]) == .authorizedParty)
        #expect(verify(["azp": "\"chat-desktop\""]) == nil)
    }

    @Test func expiryWithSkew() {
        #expect(verify(["exp": "\(now - 61)"]) == .expired)
        #expect(verify(["exp": "\(now - 60)"]) == .expired)
        #expect(verify(["exp": "\(now - 59)"]) == nil)
        #expect(
            verify(
                ["exp": "\(now - 30)"],
                IDTokenExpectations(issuer: issuer, clientId: clientId, nonce: nonce, now: now, skewSeconds: 0)) == .expired)
    }

    @Test func issuedInTheFuture() {
        #expect(verify(["iat": "\(now + 61)"]) == .issuedInFuture)
        #expect(verify(["iat": "\(now + 60)"]) == nil)
    }

    @Test func nonceMustMatch() {
        #expect(verify(["nonce": "\"n-0S6_WzA2Mk\""]) == .nonce)
        #expect(verify(["nonce": "\"n-0S6_WzA2Mj \""]) == .nonce)
        #expect(verify(["nonce": nil]) == .nonce)
        // No nonce expected (device grant): none checked, whatever the token carries.
        #expect(verify(["nonce": nil], expectations(nonce: nil)) == nil)
        #expect(verify(["nonce": "\"whatever\""], expectations(nonce: nil)) == nil)
    }
}
