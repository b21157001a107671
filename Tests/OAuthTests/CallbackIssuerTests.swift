import BrokerCore
import BrokerOAuth
import BrowserLoginProtocol
import Testing

/// RFC 9207's `iss` on a provider's redirect, decided in one place for the
/// broker's callback and the reference server's upstream sign-in.
@Suite struct CallbackIssuerTests {
    static func metadata(promises: Bool) -> ProviderMetadata {
        ProviderMetadata(
            issuer: Fixture.issuer, issParameterSupported: promises, fetchedAt: Timestamp(millisecondsSince1970: 0))
    }

    @Test func theIssuerItselfIsAccepted() {
        for promises in [false, true] {
            #expect(Self.metadata(promises: promises).checkCallbackIssuer(Fixture.issuer, issuerIsTemplate: false) == .accepted)
        }
    }

    @Test func anotherIssuerIsAMismatchComparedByteForByte() {
        let metadata = Self.metadata(promises: false)
        for other in [Fixture.issuer + "/", "https://evil.example.com/realms/main", Fixture.issuer.uppercased()] {
            #expect(
                metadata.checkCallbackIssuer(other, issuerIsTemplate: false)
                    == .mismatch(got: other, expected: Fixture.issuer))
        }
        // "é" composed and decomposed are equal Swift strings, not equal issuers.
        let composed = ProviderMetadata(
            issuer: "https://id.example.com/caf\u{E9}", fetchedAt: Timestamp(millisecondsSince1970: 0))
        #expect(
            composed.checkCallbackIssuer("https://id.example.com/cafe\u{301}", issuerIsTemplate: false)
                == .mismatch(got: "https://id.example.com/cafe\u{301}", expected: "https://id.example.com/caf\u{E9}"))
    }

    @Test func aMissingIssuerIsRefusedOnlyWhenPromised() {
        #expect(Self.metadata(promises: false).checkCallbackIssuer(nil, issuerIsTemplate: false) == .accepted)
        #expect(Self.metadata(promises: true).checkCallbackIssuer(nil, issuerIsTemplate: false) == .missing)
    }

    @Test func aTemplateIssuerLeavesTheTenantToTheIDToken() {
        let metadata = Self.metadata(promises: true)
        #expect(metadata.checkCallbackIssuer("https://login.example.com/tenant/v2.0", issuerIsTemplate: true) == .accepted)
        #expect(metadata.checkCallbackIssuer(nil, issuerIsTemplate: true) == .missing)
    }
}

/// Userinfo's `email_verified`: a boolean or "true" / "false"; anything else
/// reads as false and never fails the answer.
@Suite struct UserinfoEmailVerifiedTests {
    @Test(arguments: [
        (#","email_verified":false"#, false as Bool?), (#","email_verified":"true""#, true), (#","email_verified":7"#, false),
        ("", nil),
    ])
    func theFlagIsRead(member: String, expected: Bool?) async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.userinfo, .json(200, #"{"sub":"u1","email":"ada@example.com"\#(member)}"#))
        let info = try await Fixture.provider(transport).userinfo(accessToken: "AT-secret")
        #expect(info.emailVerified == expected)
        #expect(info.email == "ada@example.com")
    }
}
