import BrowserLoginProtocol
import Foundation
import Testing

@testable import BrokerJOSE

/// RFC 9449 §4.2: the DPoP proof's header and claims, its ES256 signature,
/// and the key's round trip through its vault form.
struct DPoPProofTests {
    func object(_ piece: String) throws -> [String: Any] {
        let bytes = try #require(Base64URL.decode(piece))
        let value = try JSONSerialization.jsonObject(with: Data(bytes))
        return try #require(value as? [String: Any])
    }

    func parts(_ proof: String) throws -> (header: [String: Any], claims: [String: Any], signature: [UInt8], input: String) {
        let pieces = proof.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(pieces.count == 3)
        let signature = try #require(Base64URL.decode(pieces[2]))
        return (try object(pieces[0]), try object(pieces[1]), signature, pieces[0] + "." + pieces[1])
    }

    @Test func theProofHasTheHeaderAndClaimsOfRFC9449() throws {
        let key = try DPoPKey.generate()
        let proof = try key.proof(
            method: "POST", url: "https://id.example.com/token?x=1#frag", accessToken: nil, nonce: nil, now: 1_800_000_000)
        let (header, claims, signature, input) = try parts(proof)
        #expect(header["typ"] as? String == "dpop+jwt")
        #expect(header["alg"] as? String == "ES256")
        let jwk = try #require(header["jwk"] as? [String: Any])
        #expect(jwk["kty"] as? String == "EC" && jwk["crv"] as? String == "P-256")
        #expect(jwk["x"] as? String == Base64URL.encode(key.x) && jwk["y"] as? String == Base64URL.encode(key.y))
        #expect(jwk["d"] == nil, "the private key is never in a proof")
        #expect(claims["htm"] as? String == "POST")
        #expect(claims["htu"] as? String == "https://id.example.com/token", "no query, no fragment")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_800_000_000)
        #expect(claims["ath"] == nil && claims["nonce"] == nil)
        #expect(((claims["jti"] as? String)?.count ?? 0) >= 22)
        // The signature is ES256's R || S, and verifies with the public key.
        #expect(signature.count == 64)
        let publicKey = try #require(PublicKey.p256(x: key.x, y: key.y))
        #expect(publicKey.verify(.es256, signature: signature, input: Array(input.utf8)))
    }

    @Test func athAndNonceAndAFreshJtiEachTime() throws {
        let key = try DPoPKey.generate()
        let first = try parts(
            key.proof(method: "GET", url: "https://api.example.com/me", accessToken: "AT-1", nonce: "n\"1", now: 5))
        let second = try parts(
            key.proof(method: "GET", url: "https://api.example.com/me", accessToken: "AT-1", nonce: nil, now: 5))
        #expect(first.claims["ath"] as? String == Crypto.digest("AT-1"))
        #expect(first.claims["nonce"] as? String == "n\"1")
        #expect(first.claims["jti"] as? String != second.claims["jti"] as? String)
    }

    @Test func theVaultFormRoundTripsAndSigns() throws {
        let key = try DPoPKey.generate()
        let again = try #require(DPoPKey(serialized: key.serialized))
        #expect(again.x == key.x && again.y == key.y && again.thumbprint == key.thumbprint)
        let (_, _, signature, input) = try parts(
            again.proof(method: "POST", url: "https://id.example.com/revoke", accessToken: "AT", nonce: nil, now: 1))
        #expect(try #require(PublicKey.p256(x: key.x, y: key.y)).verify(.es256, signature: signature, input: Array(input.utf8)))
        #expect(!"\(key)".contains(key.serialized.prefix { $0 != "." }), "description never shows the private key")
        #expect(DPoPKey(serialized: "x.y.z") == nil)
        #expect(DPoPKey(serialized: String(key.serialized.dropLast())) == nil)
    }
}
