import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The broker as a client of a standard OpenID provider that this project did
/// not write (django-oauth-toolkit, Tests/Provider/README.md), end to end:
/// the real broker binary, the real keyring, the provider over HTTP
/// (docs/providers.md). Skipped only when the provider is not installed and
/// `BL_REQUIRE_PROVIDER` is unset (CI sets it).
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct ProviderSignInTests {
    @Test func aBrowserSignInOverTheLoopbackRedirect() throws {
        let world = try ProviderWorld()
        let (attempt, url) = try world.start()
        #expect(attempt["state"] == "waiting")
        // The authorize URL carries PKCE S256, state, nonce and the listener's port.
        #expect(url.hasPrefix(world.provider.issuer + "/authorize/?"))
        for part in ["response_type=code", "client_id=chat-desktop", "code_challenge_method=S256", "state=", "nonce="] {
            #expect(url.contains(part), "\(part) in the authorize URL")
        }
        #expect(url.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A"))
        let delivered = try world.provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "\(delivered)")
        #expect(delivered.redirect.contains("iss="))

        let session = try world.session()
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"] == "alice@example.com")
        #expect(session["account"]?["displayName"] == "Alice Example")
        #expect(session["authMethod"] == "oidc")
        let id = try #require(attempt["attemptId"]?.stringValue)
        let status = try world.h.rpc().call("login.status", params: ["attemptId": .string(id)])
        #expect(status["state"] == "completed")
    }
}
