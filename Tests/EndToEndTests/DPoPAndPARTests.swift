import BrokerJOSE
import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Issue 31 items 4 and 5 against the real Glewlwyd 2.7.5 (the one test
/// provider with DPoP and PAR; django-oauth-toolkit has neither and its
/// suites run with the defaults, `DPoP=auto` and `PAR=auto`, unchanged):
/// sender-constrained tokens (RFC 9449) and pushed authorization requests
/// (RFC 9126), with no DPoP key anywhere but the vault.
@Suite(.dedicatedThread, .enabled(if: TestProvider.Kind.glewlwyd.shouldRun))
struct DPoPAndPARTests {
    /// A DPoP sign-in: the tokens are bound to the session's key (the access
    /// token's `cnf.jkt`), the keyring's access token alone is refused as a
    /// Bearer, `http.request` works with `Authorization: DPoP` and a proof,
    /// the refresh carries a proof (the new token is bound to the same key),
    /// and the sign-out's revoke carries one too. Nothing of the key reaches
    /// the log, the SQLite files, an RPC answer or the CLI's output.
    @Test func aDPoPSignInBindsRefreshesAndRevokesWithProofs() throws {
        let world = try ProviderWorld(.glewlwyd, accessTokenTTL: 5, dpop: "yes")
        let attempt = try world.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let rpc = try world.h.rpc()
        #expect(try world.session()["status"] == "signedIn")

        let key = try #require(world.keyringDPoPKey(), "the session's DPoP key is in its keyring item")
        let first = try world.keyringTokens()
        let jkt = try #require(jwtClaims(first.access)?["cnf"]?["jkt"]?.stringValue, "the access token is DPoP-bound")
        // Stolen from the keyring, the token alone is useless.
        #expect(try world.provider.apiMe(accessToken: first.access).status == 401)
        let path = JSONValue.string(TestProvider.Kind.glewlwyd.apiPath)
        var views: [String] = []
        let answer = try rpc.call("http.request", params: ["client": "com.example.chat", "method": "GET", "path": path])
        views.append(answer.jsonText)
        #expect(answer["status"] == 200, "\(answer)")
        #expect(answer["body"]?.stringValue?.contains("alice@example.com") == true, "\(answer)")

        // The access token runs out (5 s): the next request refreshes with a proof.
        let expiry = try #require(jwtClaims(first.access)?["exp"]?.intValue)
        try waitUntil(30, "the access token to expire") { Int64(Date().timeIntervalSince1970) > expiry + 1 }
        let again = try rpc.call("http.request", params: ["client": "com.example.chat", "method": "GET", "path": path])
        views.append(again.jsonText)
        #expect(again["status"] == 200, "\(again)")
        let second = try world.keyringTokens()
        #expect(second.refresh != first.refresh, "the refresh rotated the refresh token")
        #expect(jwtClaims(second.access)?["cnf"]?["jkt"]?.stringValue == jkt, "the refreshed token is bound to the same key")
        #expect(world.keyringDPoPKey() == key, "one key per session")

        // The D-Bus API's views and a request through it (Authorization: DPoP there too).
        _ = try runProgram(
            "/usr/bin/gdbus", ["wait", "--session", "--timeout", "15", DBusAPITests.name],
            environment: world.h.environment())
        let busSession = try DBusAPITests.call(world.h, "GetSession", "com.example.chat")
        let busRequest = try DBusAPITests.call(
            world.h, "Request", "com.example.chat", "GET", TestProvider.Kind.glewlwyd.apiPath, "{}")
        #expect(busRequest.out.contains("alice@example.com"), "\(busRequest)")
        views += [busSession.out + busSession.err, busRequest.out + busRequest.err]

        // The revoke carries a proof; Glewlwyd 2.7.5 compares its htu with
        // `<issuer>revoke` (docs/providers.md) and refuses it: the revoke may
        // have reached the provider, so it is not owed and never sent again.
        let last = try world.keyringTokens()
        views.append(try rpc.call("session.get", params: ["client": "com.example.chat"]).jsonText)
        views.append(try rpc.call("login.status", params: ["attemptId": .string(id)]).jsonText)
        let signedOut = try rpc.call("session.signOut", params: ["client": "com.example.chat"])
        views.append(signedOut.jsonText)
        #expect(signedOut["status"] == "signedOut", "\(signedOut)")
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
        try waitUntil(20, "the revoke to be settled") {
            (world.h.broker?.output ?? "").contains("revoke")
                && world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) == nil
        }

        let log = world.h.broker?.output ?? ""
        // The quirk as Glewlwyd 2.7.5 has it: the correct proof is refused, the refresh token stays live.
        #expect(log.contains("invalid_dpop_proof"), "Glewlwyd 2.7.5 refuses a correct DPoP revoke")
        let live = try world.provider.tokenCounts()
        #expect(
            live.refresh == 1, "\(live) \(log.split(separator: "\n").filter { $0.contains("revoke") || $0.contains("refresh") })")
        // The keyring's refresh token alone is refused too: Glewlwyd binds it to the key.
        let stolen = try world.provider.post(
            world.provider.issuer + "/token",
            form: [("grant_type", "refresh_token"), ("refresh_token", last.refresh), ("client_id", "chat-desktop")])
        #expect(stolen.status != 200, "a refresh without a proof of the key: \(stolen.status) \(stolen.text)")

        let database = world.h.databaseBytes()
        let cli = try world.h.cli(["status", "--all", "--json"])
        views.append(cli.out + cli.err)
        let privatePart = String(key.prefix { $0 != "." })
        for (name, secret) in [
            ("DPoP key", key), ("DPoP private key", privatePart), ("access token", first.access),
            ("refresh token", first.refresh), ("refreshed access token", second.access),
            ("rotated refresh token", second.refresh), ("last access token", last.access),
            ("last refresh token", last.refresh),
        ] {
            #expect(!log.contains(secret), "the \(name) is in the broker's log")
            #expect(!database.contains(secret), "the \(name) is in the SQLite files")
            #expect(!views.joined().contains(secret), "the \(name) is in an RPC answer or the CLI's output")
        }
        // No proof either: every one starts with the base64url of `{"typ":"dpop+jwt"`.
        for (place, text) in [("broker's log", log), ("SQLite files", database), ("RPC and D-Bus answers", views.joined())] {
            #expect(!text.contains("eyJ0eXAiOiJkcG9wK2p3dC"), "a DPoP proof is in the \(place)")
        }
    }

    /// The test provider takes a proof whose `iat` is a second ahead of its
    /// clock. Glewlwyd reads its clock with `time()`, the kernel's coarse
    /// clock, a tick or more behind the broker's `clock_gettime`: in the first
    /// milliseconds of a second the broker's `iat` is already the new second
    /// while Glewlwyd's is still the old one, and 2.7.5 refuses any `iat` ahead
    /// of its clock (`invalid_dpop_proof`) unless `oauth-dpop-iat-gap-duration`
    /// allows it (scripts/glewlwyd) — which made aDPoPSignInBindsRefreshesAndRevokesWithProofs fail now and then.
    @Test func aProofMadeASecondAheadOfTheProvidersClockIsAccepted() throws {
        let world = try ProviderWorld(.glewlwyd, dpop: "yes")
        try world.signIn()
        let key = try #require(world.keyringDPoPKey().flatMap { DPoPKey(serialized: $0) })
        let access = try world.keyringTokens().access
        let url = world.provider.baseURL + TestProvider.Kind.glewlwyd.apiPath
        let ahead = Int64(Date().timeIntervalSince1970) + 1
        let proof = try key.proof(method: "GET", url: url, accessToken: access, nonce: nil, now: ahead)
        let answer = try world.provider.get(url, headers: [("Authorization", "DPoP " + access), ("DPoP", proof)])
        #expect(answer.status == 200, "\(answer.status) \(answer.header("WWW-Authenticate") ?? "") \(answer.text)")
    }

    /// A device sign-in (RFC 8628) with `DPoP=yes`: the device authorization
    /// request carries no proof, every token poll does (OAUTH.md §6), so the
    /// granted tokens are bound to the session's key and the key is kept in
    /// the session's keyring item; `http.request` then proves it.
    @Test func aDeviceSignInProvesItsPolls() throws {
        let world = try ProviderWorld(.glewlwyd, dpop: "yes")
        let rpc = try world.h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.chatdevice"])
        let device = try #require(attempt["device"], "\(attempt)")
        _ = try world.provider.approveDevice(
            verificationURI: try #require(device["verificationUri"]?.stringValue),
            userCode: try #require(device["userCode"]?.stringValue))
        let session = try rpc.call("session.wait", params: ["client": "com.example.chatdevice", "timeoutMs": 30_000])
        #expect(session["status"] == "signedIn", "\(session)")
        let key = world.keyringDPoPKey("com.example.chatdevice")
        #expect(key != nil, "the session keeps the key its polls proved")
        let tokens = try world.keyringTokens("com.example.chatdevice")
        #expect(jwtClaims(tokens.access)?["cnf"]?["jkt"]?.stringValue != nil, "the polled token is DPoP-bound")
        #expect(try world.provider.apiMe(accessToken: tokens.access).status == 401, "useless as a Bearer")
        let answer = try rpc.call(
            "http.request",
            params: [
                "client": "com.example.chatdevice", "method": "GET",
                "path": .string(TestProvider.Kind.glewlwyd.apiPath),
            ])
        #expect(answer["status"] == 200, "\(answer)")
        let log = world.h.broker?.output ?? ""
        if let key { #expect(!log.contains(key), "the key is not in the log") }
        #expect(!log.contains(tokens.access) && !log.contains(tokens.refresh), "no token in the log")
    }

    /// PAR (RFC 9126): Glewlwyd's metadata has a push endpoint, so
    /// `PAR=auto` (the default) pushes; the URL the browser gets holds only
    /// `client_id` and `request_uri`, and the sign-in completes through it.
    @Test func aPushedSignInOpensOnlyClientIdAndRequestURI() throws {
        let world = try ProviderWorld(.glewlwyd, par: "auto")
        let (attempt, url) = try world.start()
        let parts = try #require(URLComponents(string: url))
        #expect(Set(parts.queryItems?.map(\.name) ?? []) == ["client_id", "request_uri"], "\(url)")
        #expect(parts.queryItems?.first { $0.name == "client_id" }?.value == "chat-desktop")
        #expect(
            parts.queryItems?.first { $0.name == "request_uri" }?.value?.hasPrefix("urn:ietf:params:oauth:request_uri:") == true)
        #expect(!url.contains("state=") && !url.contains("code_challenge") && !url.contains("redirect_uri"), "\(url)")
        // The attempt's proofs were in the vault before the push.
        let id = try #require(attempt["attemptId"]?.stringValue)
        #expect(world.h.keyringLookup(["kind": "attempt", "client": "com.example.chat", "attempt": id]) != nil)
        let delivered = try world.provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        #expect(try world.session()["status"] == "signedIn")
    }

    /// A push the provider refuses (here: a redirect URI it does not know)
    /// ends the attempt `failed` with `PAR_FAILED`, and no browser opens.
    @Test func aRefusedPushEndsTheAttemptAndOpensNothing() throws {
        let marker = NSTemporaryDirectory() + "/par-browser-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let world = try ProviderWorld(.glewlwyd) { h, provider in
            _ = FileManager.default.createFile(
                atPath: h.dir + "/config/browser-login/clients.d/chat-unregistered.conf",
                contents: Data(("[Client]\n" + (try Self.unregisteredClient(provider, marker: marker))).utf8))
            return ""
        }
        let rpc = try world.h.rpc()
        let failure = try rpcFailure(rpc, "login.start", ["client": "com.example.chatpar"])
        #expect(failure.applicationCode == "PAR_FAILED", "\(failure)")
        let attemptId = try #require(failure.data?["attemptId"]?.stringValue, "\(failure)")
        let status = try rpc.call("login.status", params: ["attemptId": .string(attemptId)])
        #expect(status["state"] == "failed", "\(status)")
        #expect(status["error"]?["code"] == "PAR_FAILED", "\(status)")
        Thread.sleep(forTimeInterval: 1)
        #expect(!FileManager.default.fileExists(atPath: marker), "a browser was opened")
        try? FileManager.default.removeItem(atPath: marker)
    }

    /// Issue 31: a session whose DPoP key cannot be read (its keyring item
    /// damaged while the broker was stopped) is neither ended nor lost. Its
    /// refresh (started by `http.request` once the access token has run
    /// out) sends nothing and answers `DPOP_KEY_UNAVAILABLE` — not
    /// `PROVIDER_UNREACHABLE` — and the session stays `signedIn` with its
    /// item and its live refresh token; the sign-out's revoke, which cannot
    /// be proved either, stays owed. The log names the code, never the key.
    @Test func anUnreadableDPoPKeyAnswersItsCodeAndEndsNothing() throws {
        let world = try ProviderWorld(.glewlwyd, accessTokenTTL: 5, dpop: "yes")
        try world.signIn()
        let key = try #require(world.keyringDPoPKey(), "the session's DPoP key is in its keyring item")
        let tokens = try world.keyringTokens()
        let damaged = "AAAA.BBBB.CCCC"
        world.h.broker?.stop()
        try world.rewriteSessionItem { $0.replacingOccurrences(of: key, with: damaged) }
        #expect(world.keyringDPoPKey() == damaged)
        try world.h.startBroker()

        let expiry = try #require(jwtClaims(tokens.access)?["exp"]?.intValue)
        try waitUntil(30, "the access token to expire") { Int64(Date().timeIntervalSince1970) > expiry + 1 }
        let rpc = try world.h.rpc()
        let path = JSONValue.string(TestProvider.Kind.glewlwyd.apiPath)
        let failure = try rpcFailure(rpc, "http.request", ["client": "com.example.chat", "method": "GET", "path": path])
        #expect(failure.applicationCode == "DPOP_KEY_UNAVAILABLE", "\(failure)")
        #expect(try world.session()["status"] == "signedIn", "cannot read it now is not it is gone")
        #expect(world.keyringDPoPKey() == damaged, "the session item stays")
        #expect(try world.keyringTokens().refresh == tokens.refresh, "nothing was refreshed")
        #expect(try world.provider.tokenCounts().refresh == 1, "the refresh token is still live at the provider")

        let signedOut = try rpc.call("session.signOut", params: ["client": "com.example.chat"])
        #expect(signedOut["status"] == "signedOut", "\(signedOut)")
        try waitUntil(20, "the revoke to be owed") {
            (world.h.broker?.output ?? "").contains("sign-out revoke owed: DPOP_KEY_UNAVAILABLE")
        }
        #expect(world.h.keyringLookup(["kind": "revoke", "client": "com.example.chat"]) != nil, "the revoke stays owed")
        let log = world.h.broker?.output ?? ""
        #expect(log.contains("session refresh not sent: DPOP_KEY_UNAVAILABLE"), "\(log)")
        #expect(!log.contains("may not have reached the server"), "\(log)")
        for secret in [key, String(key.prefix { $0 != "." }), damaged, tokens.access, tokens.refresh] {
            #expect(!log.contains(secret), "a secret is in the broker's log")
        }
    }

    /// A client whose loopback redirect Glewlwyd does not know, with `PAR=yes`
    /// and a `Browser=` that leaves `marker` when it runs.
    static func unregisteredClient(_ provider: TestProvider, marker: String) throws -> String {
        """
        Id=com.example.chatpar
        AppName=Example Chat (PAR)
        Protocol=oidc
        Issuer=\(provider.issuer)
        ClientId=chat-desktop
        Scopes=openid email profile
        ReturnUrl=http://127.0.0.1:\(try freeLoopbackPort())/unregistered
        ApiOrigin=\(provider.baseURL)
        RevocationAuth=bearer
        PAR=yes
        Browser=/bin/sh -c 'touch \(marker)' %u
        """
    }
}

extension ProviderWorld {
    /// Rewrites the client's session item in the real keyring (with the
    /// broker stopped, whose memory would keep the old one): the same
    /// attributes (the broker's schema, `client`, `attempt`, `kind`), the
    /// secret changed by `change`.
    func rewriteSessionItem(_ client: String = "com.example.chat", _ change: (String) -> String) throws {
        let item = try #require(h.keyringLookup(["kind": "session", "client": client]))
        var environment = h.environment()
        let found = try runProgram(
            "/usr/bin/secret-tool", ["search", "kind", "session", "client", client], environment: environment)
        // "schema = NAME" and "attribute.NAME = VALUE" lines, on standard output or error by libsecret's version.
        var attributes: [String] = []
        for line in (found.out + "\n" + found.err).split(separator: "\n") {
            if line.hasPrefix("schema = ") {
                attributes += ["xdg:schema", String(line.dropFirst("schema = ".count))]
                continue
            }
            guard line.hasPrefix("attribute.") else { continue }
            let pair = line.dropFirst("attribute.".count).split(separator: "=", maxSplits: 1)
            guard pair.count >= 1 else { continue }
            let value = pair.count == 2 ? String(pair[1].dropFirst()) : ""
            attributes += [String(pair[0].dropLast()), value]
        }
        #expect(attributes.contains("xdg:schema"), "\(found)")
        environment["BL_TEST_ITEM"] = change(item)
        let cleared = try runProgram(
            "/usr/bin/secret-tool", ["clear", "kind", "session", "client", client], environment: environment)
        #expect(cleared.status == 0, "\(cleared)")
        let stored = try runProgram(
            "/bin/sh",
            ["-c", "printf %s \"$BL_TEST_ITEM\" | /usr/bin/secret-tool store --label=\"$0\" \"$@\"", "session"] + attributes,
            environment: environment)
        #expect(stored.status == 0, "\(stored)")
    }

    /// The serialized DPoP key of the client's session, from the real keyring.
    func keyringDPoPKey(_ client: String = "com.example.chat") -> String? {
        guard let item = h.keyringLookup(["kind": "session", "client": client]) else { return nil }
        return (try? JSONValue.parse(Array(item.utf8)))?["session"]?["dpopKey"]?.stringValue
    }
}

/// The claims of a JWT (Glewlwyd's access tokens), unverified: what the test reads of them.
func jwtClaims(_ token: String) -> JSONValue? {
    let parts = token.split(separator: ".")
    guard parts.count == 3, let bytes = Base64URL.decode(String(parts[1])) else { return nil }
    return try? JSONValue.parse(bytes)
}
