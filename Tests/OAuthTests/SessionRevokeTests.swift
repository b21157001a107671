import BrokerCore
import BrokerOAuth
import BrowserLoginProtocol
import Testing

/// Issue 31 (OAUTH.md §4): how a refresh refusal is classified, and a
/// session's revoke with `RevocationAuth=bearer` when the access token has expired.
@Suite struct SessionRevokeTests {
    @Test func aBodilessRefusalOfARefreshIsInvalidGrant() async throws {
        for status in [400, 401] {
            let transport = Fixture.oidc()
            transport.set(Fixture.token, .raw(status, []))
            let provider = Fixture.provider(transport)
            await #expect(
                throws: ProviderError.refused(
                    status: status, error: "invalid_grant", description: "HTTP \(status) with no OAuth error body")
            ) { try await provider.refresh(refreshToken: "RT-secret") }
        }
        let transport = Fixture.oidc()
        let provider = Fixture.provider(transport)
        for (reply, ends) in [
            (Reply.json(400, #"{"error":"invalid_grant"}"#), true), (.json(401, #"{"error":"invalid_client"}"#), true),
            (.json(400, #"{"error":"unauthorized_client"}"#), true), (.json(400, #"{"error":"invalid_scope"}"#), false),
            (.raw(503, []), false), (.raw(429, []), false), (.fail(.noAnswer("timeout")), false),
        ] {
            transport.set(Fixture.token, reply)
            do {
                _ = try await provider.refresh(refreshToken: "RT-secret")
                Issue.record("\(reply) was taken as success")
            } catch {
                #expect(error.refusesRefresh == ends, "\(reply): \(error)")
            }
        }
    }

    @Test func aLiveBearerRevokesAtOnce() async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.revoke, .raw(200, []))
        let clock = TestClock()
        let provider = Fixture.provider(
            transport, settings: Fixture.settings(revocationAuth: .bearer), clock: clock)
        let outcome = try await provider.revokeSession(
            refreshToken: "RT-old", accessToken: "AT-old",
            accessTokenExpiresAt: clock.now().adding(milliseconds: 60_000))
        #expect(outcome == .revoked)
        #expect(transport.requests(to: Fixture.token).isEmpty)
        let revoke = try #require(transport.requests(to: Fixture.revoke).first)
        #expect(revoke.header("Authorization") == "Bearer AT-old")
        #expect(revoke.formValue("token") == "RT-old")
    }

    @Test func anExpiredBearerIsRenewedOnceAndTheNewRefreshTokenRevoked() async throws {
        let transport = Fixture.oidc()
        transport.set(
            Fixture.token,
            .json(200, #"{"access_token":"AT-new","token_type":"Bearer","expires_in":300,"refresh_token":"RT-new"}"#))
        transport.set(Fixture.revoke, .raw(200, []))
        let clock = TestClock()
        let provider = Fixture.provider(
            transport, settings: Fixture.settings(revocationAuth: .bearer), clock: clock)
        let outcome = try await provider.revokeSession(
            refreshToken: "RT-old", accessToken: "AT-old", accessTokenExpiresAt: clock.now().adding(milliseconds: -1))
        #expect(outcome == .revoked)
        #expect(transport.requests(to: Fixture.token).count == 1)
        #expect(transport.requests(to: Fixture.token).first?.formValue("refresh_token") == "RT-old")
        let revokes = transport.requests(to: Fixture.revoke)
        #expect(revokes.count == 1)
        #expect(revokes.first?.header("Authorization") == "Bearer AT-new")
        #expect(revokes.first?.formValue("token") == "RT-new")
    }

    @Test func aRefusedRenewalLeavesNothingToRevoke() async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.token, .raw(400, []))
        let clock = TestClock()
        let provider = Fixture.provider(
            transport, settings: Fixture.settings(revocationAuth: .bearer), clock: clock)
        let outcome = try await provider.revokeSession(
            refreshToken: "RT-old", accessToken: "AT-old", accessTokenExpiresAt: clock.now())
        #expect(outcome == .nothingLeft)
        #expect(transport.requests(to: Fixture.revoke).isEmpty)
        // A renewal that never left keeps the revoke owed.
        transport.set(Fixture.token, .fail(.notSent("connection refused")))
        await #expect(throws: ProviderError.notSent("connection refused")) {
            _ = try await provider.revokeSession(
                refreshToken: "RT-old", accessToken: "AT-old", accessTokenExpiresAt: clock.now())
        }
        #expect(transport.requests(to: Fixture.revoke).isEmpty)
    }

    @Test func aClientAuthenticatedRevokeNeverRefreshes() async throws {
        let transport = Fixture.oidc()
        transport.set(Fixture.revoke, .raw(200, []))
        let clock = TestClock()
        let provider = Fixture.provider(transport, clock: clock)
        let outcome = try await provider.revokeSession(
            refreshToken: "RT-old", accessToken: "AT-old", accessTokenExpiresAt: clock.now().adding(milliseconds: -1))
        #expect(outcome == .revoked)
        #expect(transport.requests(to: Fixture.token).isEmpty)
        #expect(transport.requests(to: Fixture.revoke).first?.formValue("token") == "RT-old")
    }
}
