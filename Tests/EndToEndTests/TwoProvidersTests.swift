import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The standard-provider paths against both real providers of the tests —
/// django-oauth-toolkit and Glewlwyd 2.7.5 (Tests/Provider/README.md) — and
/// the rules issue 31 added to OAUTH.md §4: a refresh refused with an empty
/// body ends the session, an owed Bearer revoke refreshes first, a sign-out
/// racing a refresh leaves no live token. Each test runs once per provider
/// that is installed (every one when `BL_REQUIRE_PROVIDER` is set).
@Suite(.dedicatedThread) struct TwoProvidersTests {
    /// Sign-in over the loopback redirect (a fixed, registered port at
    /// Glewlwyd), the API with the Bearer, a refresh with rotation when the
    /// access token ran out, and a sign-out that leaves no refresh token
    /// live at the provider.
    @Test(arguments: TestProvider.Kind.runnable)
    func aBrowserSignInRefreshesAndSignsOut(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, accessTokenTTL: 5)
        let attempt = try world.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let rpc = try world.h.rpc()
        #expect(try rpc.call("login.status", params: ["attemptId": .string(id)])["state"] == "completed")
        let session = try world.session()
        #expect(session["status"] == "signedIn", "\(session)")
        #expect(session["account"]?["email"] == "alice@example.com", "\(session)")
        // Glewlwyd's ID token says `auth_time: 0`: no time at all, not 1970.
        #expect(session["authenticatedAt"]?.stringValue?.hasPrefix("1970") == false, "\(session)")

        let first = try world.keyringTokens()
        try waitUntil(30, "the access token to run out at the provider", interval: 0.25) {
            try world.provider.apiMe(accessToken: first.access).status == 401
        }
        let answer = try rpc.call(
            "http.request", params: ["client": "com.example.chat", "method": "GET", "path": .string(kind.apiPath)])
        #expect(answer["status"] == 200, "\(answer)")
        #expect(answer["body"]?.stringValue?.contains("alice@example.com") == true, "\(answer)")
        let second = try world.keyringTokens()
        #expect(second.refresh != first.refresh, "both providers rotate refresh tokens")
        #expect(try world.provider.tokenCounts().refresh == 1)

        #expect(try rpc.call("session.signOut", params: ["client": "com.example.chat"])["status"] == "signedOut")
        try waitUntil(20, "the revoke to reach the provider") { try world.provider.tokenCounts().refresh == 0 }
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
        #expect(world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) == nil)

        // No token reached the log, the SQLite files or an RPC answer
        // (Glewlwyd's access tokens are JWTs: no JWT may appear at all).
        let log = world.h.broker?.output ?? ""
        let database = world.h.databaseBytes()
        let views =
            try rpc.call("session.get", params: ["client": "com.example.chat"]).jsonText
            + (try rpc.call("login.status", params: ["attemptId": .string(id)]).jsonText)
        for (name, secret) in [
            ("access token", first.access), ("refresh token", first.refresh), ("refreshed access token", second.access),
            ("rotated refresh token", second.refresh),
        ] {
            #expect(!log.contains(secret), "the \(name) is in the broker's log")
            #expect(!database.contains(secret), "the \(name) is in the SQLite files")
            #expect(!views.contains(secret), "the \(name) is in an RPC answer")
        }
        for (place, text) in [("broker's log", log), ("SQLite files", database), ("RPC answers", views)] {
            #expect(
                text.range(of: #"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"#, options: .regularExpression)
                    == nil, "a JWT is in the \(place)")
        }
    }

    /// The device authorization grant (RFC 8628) end to end.
    @Test(arguments: TestProvider.Kind.runnable)
    func aDeviceSignIn(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind)
        let rpc = try world.h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.chatdevice"])
        let device = try #require(attempt["device"], "\(attempt)")
        let heading = try world.provider.approveDevice(
            verificationURI: try #require(device["verificationUri"]?.stringValue),
            userCode: try #require(device["userCode"]?.stringValue))
        #expect(heading.contains("Authorized"), "\(heading)")
        let session = try rpc.call("session.wait", params: ["client": "com.example.chatdevice", "timeoutMs": 30_000])
        #expect(session["status"] == "signedIn", "\(session)")
        #expect(session["account"]?["email"] == "alice@example.com", "\(session)")
    }

    /// Issue 31 item 2: a refresh token revoked at the provider behind the
    /// broker's back. DOT refuses its refresh with `invalid_grant`, Glewlwyd
    /// with a bare 400 and no body; either way the session ends `expired`
    /// with `REFRESH_REJECTED` (it used to stay `signedIn` at Glewlwyd, every
    /// call failing `SERVER_PROTOCOL_ERROR`), and its keyring item goes.
    @Test(arguments: TestProvider.Kind.runnable)
    func aRevokedRefreshTokenEndsTheSessionExpired(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, accessTokenTTL: 5)
        try world.signIn()
        // Revoked at the provider, as its administrator or another sign-out
        // would. (The broker may rotate the pair meanwhile — 5 s tokens —:
        // then the current refresh token is revoked in turn.)
        var tokens = try world.keyringTokens()
        try waitUntil(30, "no refresh token live at the provider", interval: 0.25) {
            tokens = try world.keyringTokens()
            let status = try world.provider.revokeDirectly(refreshToken: tokens.refresh, accessToken: tokens.access)
            let live = try world.provider.tokenCounts().refresh
            return status == 200 && live == 0
        }
        try waitUntil(30, "the access token to run out at the provider", interval: 0.25) {
            try world.provider.apiMe(accessToken: tokens.access).status == 401
        }

        let failure = try rpcFailure(
            world.h.rpc(), "http.request",
            ["client": "com.example.chat", "method": "GET", "path": .string(kind.apiPath)])
        #expect(failure.applicationCode == "NOT_SIGNED_IN", "\(failure)")
        let session = try world.session()
        #expect(session["status"] == "expired", "\(session)")
        #expect(session["reason"] == "REFRESH_REJECTED", "\(session)")
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
        // Told once: the next call does not ask the provider again.
        let again = try rpcFailure(
            world.h.rpc(), "http.request",
            ["client": "com.example.chat", "method": "GET", "path": .string(kind.apiPath)])
        #expect(again.applicationCode == "NOT_SIGNED_IN", "\(again)")
    }

    /// Issue 31 item 1: signed out while the provider is unreachable, the
    /// revoke is owed; when the provider is back the access token has
    /// expired. With `RevocationAuth=bearer` (Glewlwyd) the broker refreshes
    /// once and revokes the refresh token that refresh returned, with the
    /// new access token: no refresh token of the user stays live. (Before,
    /// Glewlwyd's 401 to the expired Bearer left the refresh token live for
    /// its whole life.) DOT revokes with the client id, no Bearer needed.
    @Test(arguments: TestProvider.Kind.runnable)
    func anOwedRevokeWithAnExpiredAccessTokenStillRevokes(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, accessTokenTTL: 5)
        try world.signIn()
        let tokens = try world.keyringTokens()
        #expect(try world.provider.tokenCounts().refresh == 1)
        let port = world.provider.port
        world.provider.stop()

        let view = try world.h.rpc().call("session.signOut", params: ["client": "com.example.chat"])
        #expect(view["status"] == "signedOut")
        try waitUntil(10, "the revoke to be owed") {
            world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) != nil
        }
        // The access token runs out while the provider is away.
        Thread.sleep(forTimeInterval: 6.5)
        let back = try TestProvider.start(kind, in: world.provider.directory, accessTokenTTL: 5, port: port)
        defer { back.stop() }
        #expect(try back.apiMe(accessToken: tokens.access).status == 401, "the Bearer has expired")
        try waitUntil(30, "the owed revoke to be sent") {
            world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) == nil
        }
        #expect(try back.tokenCounts().refresh == 0, "a refresh token of the signed-out session is still live")
        let log = world.h.broker?.output ?? ""
        #expect(!log.contains("may not have reached the server"), "\(log)")
        #expect(try world.session()["status"] == "signedOut")
    }

    /// Issue 31 item 3 (the cause fixed by issue 29's serialised session
    /// changes): a sign-out while a refresh's answer is held back. The late
    /// answer is not stored; its rotated refresh token is revoked like the
    /// old one, at both providers.
    @Test(arguments: TestProvider.Kind.runnable)
    func aSignOutRacingARefreshLeavesNoLiveRefreshToken(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, accessTokenTTL: 5, paused: "answer:refresh")
        try world.signIn()
        let marker = world.h.dir + "/answer:refresh.paused"
        try waitUntil(20, "the refresh's answer to be held back") { FileManager.default.fileExists(atPath: marker) }
        let rpc = try world.h.rpc()
        #expect(try rpc.call("session.signOut", params: ["client": "com.example.chat"])["status"] == "signedOut")
        unlink(marker)
        try waitUntil(15, "the late answer to be dealt with") {
            (world.h.broker?.output ?? "").contains("a refresh was answered after its session ended")
                || world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) != nil
        }
        try waitUntil(15, "nothing owed") {
            world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) == nil
        }
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
        try waitUntil(15, "no refresh token live at the provider") { try world.provider.tokenCounts().refresh == 0 }
        #expect(try world.session()["status"] == "signedOut")
    }
}

extension ProviderWorld {
    /// The access and refresh tokens of the client's session, from the real keyring.
    func keyringTokens(_ client: String = "com.example.chat") throws -> (access: String, refresh: String) {
        let item = try #require(h.keyringLookup(["kind": "session", "client": client]), "no session item")
        let session = try JSONValue.parse(Array(item.utf8))["session"]
        return (
            try #require(session?["accessToken"]?.stringValue), try #require(session?["refreshToken"]?.stringValue)
        )
    }
}

extension TestProvider {
    /// Revokes a refresh token at the provider itself (RFC 7009), as the
    /// provider wants it: DOT with the client id, Glewlwyd with the live
    /// access token as Bearer. Answers the status.
    func revokeDirectly(refreshToken: String, accessToken: String) throws -> Int {
        switch kind {
        case .djangoOAuthToolkit:
            try post(
                issuer + "/revoke_token/",
                form: [("token", refreshToken), ("token_type_hint", "refresh_token"), ("client_id", "chat-desktop")]
            ).status
        case .glewlwyd:
            try post(
                issuer + "/revoke", form: [("token", refreshToken), ("token_type_hint", "refresh_token")],
                headers: [("Authorization", "Bearer " + accessToken)]
            ).status
        }
    }
}
