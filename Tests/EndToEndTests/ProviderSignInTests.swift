import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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

    /// The daemon does not link libmicrohttpd or libcrypto: neither they nor GnuTLS are mapped until the
    /// first loopback listener opens, which loads libmicrohttpd (dlopen) and then receives the redirect, and
    /// the first ID token's signature is checked, which loads libcrypto (LibCrypto).
    @Test func theLoopbackListenerAndTheIDTokenCheckLoadTheirLibrariesOnFirstUse() throws {
        let world = try ProviderWorld()
        let broker = try #require(world.h.broker?.pid)
        let idle = try #require(ProcFS.read("maps", pid: broker))
        #expect(!idle.contains("libmicrohttpd"))
        #expect(!idle.contains("libgnutls"))
        #expect(!idle.contains("libcrypto"))

        try world.signIn()
        #expect(try world.session()["status"] == "signedIn")
        let after = try #require(ProcFS.read("maps", pid: broker))
        #expect(after.contains("libmicrohttpd.so.12"))
        #expect(after.contains("libcrypto.so.3"))
    }

    /// A private-use scheme redirect (RFC 8252 §7.1) delivered as the URL
    /// handler does, through `browser-login finish URL` (at both real providers).
    @Test(arguments: TestProvider.Kind.runnable)
    func aBrowserSignInOverAPrivateUseSchemeDeliveredByTheCLI(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind)
        let (attempt, url) = try world.start("com.example.chatscheme")
        #expect(url.contains("redirect_uri=com.example.chat%3A%2Fcallback"))
        let callback = try world.provider.authorize(url)
        #expect(callback.hasPrefix("com.example.chat:/callback?"), "\(callback)")
        for part in ["code=", "state=", "iss="] { #expect(callback.contains(part), "\(part) in the callback") }
        // Not yet: nothing but the callback signs in.
        #expect(try world.session("com.example.chatscheme")["status"] != "signedIn")

        let finished = try world.h.cli(["finish", callback])
        #expect(finished.status == 0, "\(finished.out)\(finished.err)")
        let session = try world.session("com.example.chatscheme")
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"] == "alice@example.com")
        let id = try #require(attempt["attemptId"]?.stringValue)
        #expect(try attemptState(world.h.rpc(), id) == "completed")
        // The same callback again changes nothing and sends nothing, also
        // once the attempt's proofs have left the keyring.
        try waitUntil(30, "the attempt's proofs to leave the keyring") {
            world.h.keyringLookup(["kind": "attempt", "client": "com.example.chatscheme", "attempt": id]) == nil
        }
        let again = try world.h.cli(["finish", callback])
        #expect(again.status == 0, "\(again.out)\(again.err)")
        #expect(try world.provider.tokenCounts().refresh == 1)
    }

    // MARK: The device authorization grant (RFC 8628)

    @Test func aDeviceSignInOverRPC() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc(timeout: .seconds(90))
        let attempt = try rpc.call("login.start", params: ["client": "com.example.chatdevice", "openBrowser": false])
        #expect(attempt["state"] == "waiting")
        #expect(attempt["authorizeUrl"] == nil)
        let device = try #require(attempt["device"])
        let userCode = try #require(device["userCode"]?.stringValue)
        let verificationURI = try #require(device["verificationUri"]?.stringValue)
        #expect(verificationURI.hasPrefix(world.provider.issuer + "/device"))
        #expect((device["interval"]?.intValue ?? 0) >= 1)
        // The device code itself never leaves the broker.
        #expect(device["deviceCode"] == nil)

        // Pending until the user approves: no session yet.
        #expect(try world.session("com.example.chatdevice")["status"] != "signedIn")
        let heading = try world.provider.approveDevice(verificationURI: verificationURI, userCode: userCode)
        #expect(heading.contains("Authorized"), "\(heading)")
        let session = try rpc.call("session.wait", params: ["client": "com.example.chatdevice", "timeoutMs": 60_000])
        #expect(session["status"] == "signedIn")
        // No ID token for the device grant at this provider: the account comes from userinfo.
        #expect(session["account"]?["email"] == "alice@example.com")
        #expect(session["account"]?["displayName"] == "Alice Example")
        let id = try #require(attempt["attemptId"]?.stringValue)
        #expect(try attemptState(rpc, id) == "completed")
        #expect(try world.provider.tokenCounts().access >= 1)

        // The loopback client's provider publishes no device endpoint and its file sets none.
        let refused = try rpcFailure(
            rpc, "login.start", ["client": "com.example.chat", "flow": "device", "openBrowser": false])
        #expect(refused.applicationCode == "DEVICE_FLOW_UNSUPPORTED", "\(refused)")
        #expect(try world.session()["status"] == "signedOut")
    }

    @Test func aDeviceSignInTheUserDeclines() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc()
        let attempt = try rpc.call("login.start", params: ["client": "com.example.chatdevice", "flow": "device"])
        let device = try #require(attempt["device"])
        let id = try #require(attempt["attemptId"]?.stringValue)
        let heading = try world.provider.approveDevice(
            verificationURI: try #require(device["verificationUri"]?.stringValue),
            userCode: try #require(device["userCode"]?.stringValue), deny: true)
        #expect(heading.contains("Denied"), "\(heading)")
        try waitUntil(30, "the device attempt to be denied") { try attemptState(rpc, id) == "denied" }
        #expect(try world.session("com.example.chatdevice")["status"] != "signedIn")
        #expect(try world.provider.tokenCounts().access == 0)
    }

    /// `browser-login start CLIENT --device` prints the address and the code,
    /// waits, and exits 0 once the user approved on another device.
    @Test func aDeviceSignInThroughTheCLI() throws {
        let world = try ProviderWorld()
        let h = world.h
        let process = try SpawnedProcess(
            [binDirectory + "/browser-login", "--socket", h.socketPath, "start", "com.example.chatdevice", "--device"],
            environment: h.environment(), log: h.dir + "/cli-device.log", name: "browser-login")
        var reaped = false
        defer { if !reaped { process.stop() } }

        var instructions: (uri: String, code: String)?
        try waitUntil(60, "the CLI to print the device code") {
            if process.hasExited {
                reaped = true
                throw HarnessError("the CLI exited early:\n\(process.output)", fatal: true)
            }
            instructions = Self.deviceInstructions(process.output)
            return instructions != nil
        }
        let (uri, code) = try #require(instructions)
        #expect(uri.hasPrefix(world.provider.issuer + "/device"))
        #expect(process.output.contains("waiting for the sign-in to finish"))
        // It waits: not ended before the user approves.
        #expect(!process.hasExited)
        try world.provider.approveDevice(verificationURI: uri, userCode: code)

        var status: Int32?
        try waitUntil(60, "the CLI to end") {
            var wait: Int32 = 0
            if waitpid(process.pid, &wait, WNOHANG) == process.pid {
                reaped = true
                status = exitStatus(wait)
            }
            return status != nil
        }
        #expect(status == 0, "\(process.output)")
        #expect(process.output.contains("signed in: "), "\(process.output)")
        #expect(try world.session("com.example.chatdevice")["status"] == "signedIn")
    }

    /// "To sign in to APP, open URI and enter the code CODE" (docs/providers.md).
    static func deviceInstructions(_ output: String) -> (uri: String, code: String)? {
        for line in output.split(separator: "\n") {
            guard let open = line.range(of: ", open "), let enter = line.range(of: " and enter the code ") else {
                continue
            }
            let uri = String(line[open.upperBound..<enter.lowerBound])
            let code = String(line[enter.upperBound...]).trimmingCharacters(in: .whitespaces)
            if !uri.isEmpty && !code.isEmpty { return (uri, code) }
        }
        return nil
    }

    // MARK: Sessions

    /// An access token that ran out is refreshed; the provider rotates the
    /// refresh token, and the keyring holds the new pair (docs/providers.md "Sessions").
    @Test func httpRequestRefreshesAnExpiredAccessTokenWithRotation() throws {
        let world = try ProviderWorld(accessTokenTTL: 5)
        try world.signIn()
        let rpc = try world.h.rpc()
        let before = try world.sessionTokens()
        #expect(try world.provider.apiMe(accessToken: before.access).status == 200)
        try waitUntil(30, "the access token to run out at the provider", interval: 0.25) {
            try world.provider.apiMe(accessToken: before.access).status == 401
        }

        let answer = try rpc.call("http.request", params: ["client": "com.example.chat", "method": "GET", "path": "/api/me"])
        #expect(answer["status"] == 200, "\(answer)")
        let body = try JSONValue.parse(Array((answer["body"]?.stringValue ?? "").utf8))
        #expect(body["user"] == "alice")
        #expect(body["email"] == "alice@example.com")

        let after = try world.sessionTokens()
        #expect(after.access != before.access)
        #expect(after.refresh != before.refresh, "the provider rotates refresh tokens")
        #expect(try world.provider.apiMe(accessToken: after.access).status == 200)
        // Rotation revoked the old refresh token: exactly one is live.
        #expect(try world.provider.tokenCounts().refresh == 1)
        #expect(try world.session()["status"] == "signedIn")

        // Again with the rotated refresh token (the superseded one would be
        // refused, and its reuse would revoke the whole family).
        try waitUntil(30, "the refreshed access token to run out at the provider", interval: 0.25) {
            try world.provider.apiMe(accessToken: after.access).status == 401
        }
        let again = try rpc.call("http.request", params: ["client": "com.example.chat", "method": "GET", "path": "/api/me"])
        #expect(again["status"] == 200, "\(again)")
        let third = try world.sessionTokens()
        #expect(third.refresh != after.refresh && third.refresh != before.refresh)
        #expect(try world.provider.tokenCounts().refresh == 1)
        #expect(try world.session()["status"] == "signedIn")
    }

    /// A `401` with `error="invalid_token"` (RFC 6750 §3.1) long before the
    /// access token's expiry makes the broker refresh (nothing else would).
    /// Here the provider forgot the access token, and django-oauth-toolkit
    /// then refuses its refresh token too (an orphan, Tests/Provider/README.md):
    /// the refusal ends the session `expired`, `REFRESH_REJECTED`
    /// (docs/providers.md "Sessions").
    @Test func a401InvalidTokenRefreshesAndARefusedRefreshEndsTheSession() throws {
        let world = try ProviderWorld()
        try world.signIn()
        let before = try world.sessionTokens()
        let revoked = try world.provider.post(
            world.provider.issuer + "/revoke_token/",
            form: [("token", before.access), ("token_type_hint", "access_token"), ("client_id", "chat-desktop")])
        #expect(revoked.status == 200, "\(revoked.text)")
        let refused = try world.provider.apiMe(accessToken: before.access)
        #expect(refused.status == 401)
        #expect(refused.wwwAuthenticate?.contains("invalid_token") == true)

        let failure = try rpcFailure(
            world.h.rpc(), "http.request", ["client": "com.example.chat", "method": "GET", "path": "/api/me"])
        #expect(failure.message.contains("invalid_grant"), "\(failure)")
        let session = try world.session()
        #expect(session["status"] == "expired", "\(session)")
        #expect(session["reason"] == "REFRESH_REJECTED", "\(session)")
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
    }

    /// `http.request` sends the access token as a Bearer to ApiOrigin only,
    /// with the rules of docs/rpc.md.
    @Test func httpRequestSendsTheBearerToTheApiOriginByTheRules() throws {
        let world = try ProviderWorld()
        let rpc = try world.h.rpc()
        // Signed out: nothing is sent.
        let signedOut = try rpcFailure(
            rpc, "http.request", ["client": "com.example.chat", "method": "GET", "path": "/api/me"])
        #expect(signedOut.applicationCode != nil, "\(signedOut)")

        try world.signIn()
        let me = try rpc.call(
            "http.request",
            params: ["client": "com.example.chat", "method": "GET", "path": "/api/me", "headers": ["Accept": "application/json"]])
        #expect(me["status"] == 200, "\(me)")
        #expect(me["body"]?.stringValue?.contains("alice@example.com") == true)
        #expect(me["headers"]?["content-type"]?.stringValue?.contains("application/json") == true)

        for (path, why) in [("/api/../test/tokens", "a dot segment"), ("//evil.example/api/me", "another authority")] {
            let refused = try rpcFailure(
                rpc, "http.request", ["client": "com.example.chat", "method": "GET", "path": .string(path)])
            #expect(refused.code == .invalidParams, "\(why): \(refused)")
        }
        let authorization = try rpcFailure(
            rpc, "http.request",
            ["client": "com.example.chat", "method": "GET", "path": "/api/me", "headers": ["Authorization": "Bearer x"]])
        #expect(authorization.code == .invalidParams, "\(authorization)")
    }

    /// The provider confirms the sign-out: after `session.signOut` it holds no
    /// live token of the user (RFC 7009, docs/providers.md "Signing out").
    @Test func signOutRevokesAtTheProvider() throws {
        let world = try ProviderWorld()
        try world.signIn()
        let live = try world.provider.tokenCounts()
        #expect(live.access == 1 && live.refresh == 1, "\(live)")
        let tokens = try world.sessionTokens()

        let view = try world.h.rpc().call("session.signOut", params: ["client": "com.example.chat"])
        #expect(view["status"] == "signedOut")
        let after = try world.provider.tokenCounts()
        #expect(after.access == 0 && after.refresh == 0, "\(after)")
        #expect(try world.provider.apiMe(accessToken: tokens.access).status == 401)
        #expect(world.h.keyringLookup(["kind": "session", "client": "com.example.chat"]) == nil)
        #expect(try world.session()["status"] == "signedOut")
    }

    /// Issue 29: a sign-out while a refresh's answer is held back (sent,
    /// rotated at the provider, not yet used) signs out at once; the answer,
    /// when it comes, is revoked and kept nowhere: the provider holds no live
    /// token of the user, the keyring no session item.
    @Test func aSignOutWhileARefreshAnswerIsHeldBackLeavesNoLiveTokenBehind() throws {
        let world = try ProviderWorld(accessTokenTTL: 5, paused: "answer:refresh")
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
        let live = try world.provider.tokenCounts()
        #expect(live.access == 0 && live.refresh == 0, "\(live)")
        #expect(try world.session()["status"] == "signedOut")
    }

    // MARK: Restart

    /// A waiting loopback sign-in listens on its port again after a restart.
    @Test func aLoopbackSignInSurvivesARestart() throws {
        let world = try ProviderWorld()
        let (attempt, url) = try world.start()
        let port = try #require(Self.redirectPort(url))
        try world.h.restartBroker()
        try waitUntil(15, "the listener on port \(port) again") { Self.canConnect(port: port) }
        let delivered = try world.provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "\(delivered)")
        #expect(delivered.redirect.hasPrefix("http://127.0.0.1:\(port)/callback?"))
        #expect(try world.session()["status"] == "signedIn")
        let id = try #require(attempt["attemptId"]?.stringValue)
        #expect(try attemptState(world.h.rpc(), id) == "completed")
    }

    /// … and ends `failed`, saying to sign in again, when another program took its port meanwhile.
    @Test func aLoopbackSignInWhosePortWasTakenFailsAfterARestart() throws {
        let world = try ProviderWorld()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let port = try #require(Self.redirectPort(url))
        world.h.broker?.stop()
        let occupant = try Self.listen(port: port)
        defer { close(occupant) }
        try world.h.startBroker()
        let rpc = try world.h.rpc()
        var status: JSONValue = .null
        try waitUntil(15, "the attempt to fail") {
            status = try rpc.call("login.status", params: ["attemptId": .string(id)])
            return status["state"] != "waiting"
        }
        #expect(status["state"] == "failed", "\(status)")
        let message = status["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("sign in again"), "\(message)")
        #expect(message.contains("\(port)"), "\(message)")
        #expect(try world.session()["status"] == "signedOut")
    }

    // MARK: Secrets

    /// No token, ID token, code, state, nonce, verifier or callback URL
    /// reaches the broker's log, its SQLite files, an RPC answer, an error or
    /// a notification, through a sign-in, a refresh, an API call and a
    /// sign-out — at both real providers (Glewlwyd's tokens are JWTs too).
    @Test(arguments: TestProvider.Kind.runnable)
    func noSecretOfAProviderSignInLeaks(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, accessTokenTTL: 5)
        let h = world.h
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: [:])
        var seen: [String] = []
        let rpc = try h.rpc()
        func record(_ method: String, _ params: JSONValue) {
            do { seen.append(try rpc.call(method, params: params).jsonText) } catch let error as RPCError {
                seen.append(error.json.jsonText)
            } catch { seen.append("\(error)") }
        }
        let client: JSONValue = "com.example.chat"

        // The answer of login.start carries the authorize URL (state, nonce, challenge) by design: not recorded.
        let (attempt, authorizeURL) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let proofs = try JSONValue.parse(
            try #require(h.keyringLookup(["kind": "attempt", "client": "com.example.chat", "attempt": id])))
        let verifier = try #require(proofs["codeVerifier"]?.stringValue)
        let nonce = try #require(proofs["nonce"]?.stringValue)
        let state = try #require(proofs["state"]?.stringValue)
        record("login.status", ["attemptId": .string(id)])
        record("login.list", [:])

        // The provider's redirect, delivered by hand: refused variants first, then the real one.
        let callback = try world.provider.authorize(authorizeURL)
        let parsed = try ProviderCallback(parsing: callback)
        #expect(parsed.state == state)
        guard case .code(let code) = parsed.outcome else { throw HarnessError("no code in \(callback)") }
        record("login.finish", ["url": .string(callback + "#x")])
        record("login.finish", ["url": .string(callback.replacingOccurrences(of: "/callback", with: "/other"))])
        record("login.finish", ["url": .string(callback.replacingOccurrences(of: "state=", with: "state=x"))])
        record("login.finish", ["url": .string(callback)])
        record("login.finish", ["url": .string(callback)])
        record("login.status", ["attemptId": .string(id)])
        record("session.get", ["client": client])
        #expect(try world.session()["status"] == "signedIn")
        let first = try world.sessionTokens()

        // A refresh (the access token ran out), and the API.
        try waitUntil(30, "the access token to run out at the provider", interval: 0.25) {
            try world.provider.apiMe(accessToken: first.access).status == 401
        }
        record("http.request", ["client": client, "method": "GET", "path": .string(kind.apiPath)])
        record("http.request", ["client": client, "method": "GET", "path": "/api/../x"])
        let second = try world.sessionTokens()
        #expect(second.refresh != first.refresh)
        record("broker.info", [:])
        record("session.signOut", ["client": client])
        for args in [["status", "--all"], ["status", "--all", "--json"], ["session", "com.example.chat"], ["clients"]] {
            let out = try h.cli(args)
            seen.append(out.out + out.err)
        }
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification(let method, let params) = message { seen.append(method + (params?.jsonText ?? "")) }
        }
        #expect(seen.count > 15)
        #expect(seen.contains { $0.contains("alice@example.com") }, "the API answer was recorded")

        // A device sign-in too: its device code stays in the broker.
        let deviceAttempt = try rpc.call("login.start", params: ["client": "com.example.chatdevice"])
        let deviceId = try #require(deviceAttempt["attemptId"]?.stringValue)
        let deviceItem = try JSONValue.parse(
            try #require(h.keyringLookup(["kind": "attempt", "client": "com.example.chatdevice", "attempt": deviceId])))
        let deviceCode = try #require(deviceItem["deviceCode"]?.stringValue)
        try world.provider.approveDevice(
            verificationURI: try #require(deviceAttempt["device"]?["verificationUri"]?.stringValue),
            userCode: try #require(deviceAttempt["device"]?["userCode"]?.stringValue))
        record("session.wait", ["client": "com.example.chatdevice", "timeoutMs": 30_000])
        record("login.status", ["attemptId": .string(deviceId)])
        let deviceTokens = try world.sessionTokens("com.example.chatdevice")
        record("session.signOut", ["client": "com.example.chatdevice"])
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification(let method, let params) = message { seen.append(method + (params?.jsonText ?? "")) }
        }

        let secrets: [(String, String)] = [
            ("device code", deviceCode), ("device access token", deviceTokens.access),
            ("device refresh token", deviceTokens.refresh),
            ("access token", first.access), ("refresh token", first.refresh), ("refreshed access token", second.access),
            ("rotated refresh token", second.refresh), ("code", code), ("state", state), ("nonce", nonce),
            ("code verifier", verifier), ("callback URL", callback), ("authorize URL", authorizeURL),
        ]
        let log = h.broker?.output ?? ""
        #expect(log.contains("signed in"))
        let database = h.databaseBytes()
        #expect(database.contains(id))
        let rpcText = seen.joined(separator: "\n")
        for (name, secret) in secrets {
            #expect(secret.count >= 16, "the \(name) is long enough to look for")
            #expect(!log.contains(secret), "the \(name) is in the broker's log")
            #expect(!database.contains(secret), "the \(name) is in the SQLite files")
            #expect(!rpcText.contains(secret), "the \(name) is in an RPC answer, error or notification")
        }
        // The ID token is not kept anywhere the test can read it: no JWT at all may appear.
        for (place, text) in [("broker's log", log), ("SQLite files", database), ("RPC answers", rpcText)] {
            #expect(!Self.containsJWT(text), "a JWT (the ID token?) is in the \(place)")
        }
    }

    /// A compact JWS: two base64url JSON objects (`eyJ…`) and a signature, dot-separated.
    static func containsJWT(_ text: String) -> Bool {
        text.range(of: #"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"#, options: .regularExpression) != nil
    }

    // MARK: Helpers

    /// The port of the `redirect_uri` in an authorize URL.
    static func redirectPort(_ authorizeURL: String) -> UInt16? {
        guard let range = authorizeURL.range(of: "redirect_uri=http%3A%2F%2F127.0.0.1%3A") else { return nil }
        return UInt16(String(authorizeURL[range.upperBound...].prefix { $0.isNumber }))
    }

    static func ipv4Loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }

    /// Whether something accepts connections on 127.0.0.1:`port`.
    static func canConnect(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = ipv4Loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A listening socket of the test's own on 127.0.0.1:`port` (close it).
    static func listen(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var address = ipv4Loopback(port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 4) == 0 else {
            let error = errno
            close(fd)
            throw HarnessError("cannot listen on 127.0.0.1:\(port): errno \(error)")
        }
        return fd
    }
}

extension ProviderWorld {
    /// The access and refresh tokens of the client's session, from the real keyring.
    fileprivate func sessionTokens(_ client: String = "com.example.chat") throws -> (access: String, refresh: String) {
        let item = try #require(h.keyringLookup(["kind": "session", "client": client]), "no session item")
        let session = try JSONValue.parse(Array(item.utf8))["session"]
        return (
            try #require(session?["accessToken"]?.stringValue), try #require(session?["refreshToken"]?.stringValue)
        )
    }
}
