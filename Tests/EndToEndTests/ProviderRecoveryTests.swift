import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// A standard provider's sign-ins across crashes and without a browser
/// (docs/providers.md): the exchange is never sent twice, a device sign-in
/// polls again after a restart, and a machine where no browser can be opened
/// signs in with a device code.
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct ProviderRecoveryTests {
    /// The broker stopped after the provider answered the exchange and before
    /// the session was kept: the code is spent and there is no status to ask,
    /// so the attempt ends `failed` with EXCHANGE_UNCERTAIN; the callback
    /// delivered again sends nothing.
    @Test func aCrashAfterTheExchangeEndsTheAttemptFailedAndNothingIsSentAgain() throws {
        let world = try ProviderWorld()
        let h = world.h
        h.broker?.stop()
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "after-provider-exchange"
        try h.startBroker()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let callback = try world.provider.authorize(url)
        _ = try? h.cli(["finish", callback])
        try waitUntil(10, "the broker to die at the fault point") { h.broker?.isRunning == false }
        #expect(try world.provider.tokenCounts().access == 1)

        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = nil
        try h.startBroker()
        let rpc = try h.rpc()
        let status = try rpc.call("login.status", params: ["attemptId": .string(id)])
        #expect(status["state"] == "failed")
        #expect(status["error"]?["code"] == "EXCHANGE_UNCERTAIN")
        #expect(status["error"]?["message"]?.stringValue?.contains("sign in again") == true)
        #expect(try rpc.call("session.get", params: ["client": "com.example.chat"])["status"] == "signedOut")

        // The same callback again: refused, and the provider issued nothing more.
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "ATTEMPT_NOT_WAITING")
        #expect(try world.provider.tokenCounts().access == 1)
        // The attempt's proofs are gone from the keyring once it ended.
        try waitUntil(10, "the attempt's keyring item to go") {
            h.keyringLookup(["kind": "attempt", "client": "com.example.chat", "attempt": id]) == nil
        }
    }

    /// A device sign-in outlives a restart of the broker: it polls again and
    /// completes when the user approves afterwards.
    @Test func aDeviceSignInPollsAgainAfterARestart() throws {
        let world = try ProviderWorld()
        let h = world.h
        let attempt = try h.rpc().call("login.start", params: ["client": "com.example.chatdevice"])
        let device = try #require(attempt["device"])
        #expect(attempt["authorizeUrl"] == nil)
        let code = try #require(device["userCode"]?.stringValue)
        let uri = try #require(device["verificationUri"]?.stringValue)
        try h.restartBroker()
        try world.provider.approveDevice(verificationURI: uri, userCode: code)
        let session = try h.rpc().call("session.wait", params: ["client": "com.example.chatdevice", "timeoutMs": 30000])
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"] == "alice@example.com")
    }

    /// No browser can be opened (its command fails) and the provider has a
    /// device endpoint: `login.start` answers a device sign-in instead, and
    /// the browser attempt ends `failed` with BROWSER_FAILED.
    @Test func withoutABrowserTheSignInFallsBackToADeviceCode() throws {
        let world = try ProviderWorld()
        let h = world.h
        world.writeClient(
            "kiosk.conf",
            """
            Id=com.example.kiosk
            AppName=Example Kiosk
            Protocol=oidc
            Issuer=\(world.provider.issuer)
            ClientId=chat-device
            Scopes=openid email profile
            ReturnUrl=http://127.0.0.1/callback
            ApiOrigin=\(world.provider.baseURL)
            DeviceAuthorizationEndpoint=\(world.provider.issuer)/device-authorization/
            Browser=/bin/false %u
            """)
        try h.restartBroker()
        let rpc = try h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.kiosk"])
        let device = try #require(attempt["device"], "a device sign-in: \(attempt)")
        #expect(attempt["state"] == "waiting")
        let attempts = try rpc.call("login.list", params: ["client": "com.example.kiosk"])
        let states = (attempts["attempts"]?.arrayValue ?? attempts.arrayValue ?? []).compactMap {
            $0["error"]?["code"]?.stringValue
        }
        #expect(states.contains("BROWSER_FAILED"), "\(attempts)")
        try world.provider.approveDevice(
            verificationURI: try #require(device["verificationUri"]?.stringValue),
            userCode: try #require(device["userCode"]?.stringValue))
        let session = try rpc.call("session.wait", params: ["client": "com.example.kiosk", "timeoutMs": 30000])
        #expect(session["status"] == "signedIn")
    }
}
