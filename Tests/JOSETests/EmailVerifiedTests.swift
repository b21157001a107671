import BrokerJOSE
import BrowserLoginProtocol
import Testing

/// `email_verified` (OIDC Core §5.1), which the reference server's upstream
/// sign-in requires to be true when a provider sends it: a boolean, or the
/// string "true" / "false" some providers send; anything else never vouches.
@Suite struct EmailVerifiedTests {
    @Test(arguments: [
        ("true", true as Bool?), ("false", false), (#""true""#, true), (#""false""#, false), (#""yes""#, false),
        ("1", false), ("null", nil),
    ])
    func theClaimIsReadStrictly(json: String, expected: Bool?) throws {
        let token = Keys.rsa.token(claims: claims(["email_verified": json]), algorithm: "RS256")
        #expect(try IDToken.verify(token, keys: Keys.set, expect: expectations()).emailVerified == expected)
    }

    @Test func absentIsNil() throws {
        let token = Keys.rsa.token(claims: claims(), algorithm: "RS256")
        #expect(try IDToken.verify(token, keys: Keys.set, expect: expectations()).emailVerified == nil)
    }
}
