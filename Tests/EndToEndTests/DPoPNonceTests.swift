import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Issue 31 item 4's nonces (RFC 9449 §8, §9) end to end: the real daemon
/// over its socket, the real keyring, the real Glewlwyd 2.7.5 — which sends
/// no `DPoP-Nonce` — behind `scripts/dpop-nonce-proxy`, a reverse proxy that
/// asks for nonces the way a provider may (`NonceProxy`). A `use_dpop_nonce`
/// answer is a refusal before processing: the broker sends the request once
/// more with the nonce given, never a third time, and keeps the latest nonce
/// of the origin (in memory only: never in a log, the SQLite files or an answer).
@Suite(.dedicatedThread, .enabled(if: TestProvider.Kind.glewlwyd.shouldRun))
struct DPoPNonceTests {
    static let client = NonceProxy.client

    /// The code exchange is refused for want of a nonce (the broker has none
    /// yet): it is sent once more with the nonce, the proxy forwards it, and
    /// the sign-in completes — the code reached Glewlwyd once. The nonce
    /// appears nowhere the broker writes or answers.
    @Test func aCodeExchangeRefusedForANonceIsSentOnceMoreWithIt() throws {
        let world = try NonceWorld()
        let proxy = world.proxy
        let attempt = try world.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let rpc = try world.h.rpc()
        let session = try world.session()
        #expect(session["status"] == "signedIn", "\(session)")

        let exchanges = proxy.tokenRequests("authorization_code")
        #expect(exchanges.count == 2, "\(exchanges)")
        if exchanges.count == 2 {
            #expect(exchanges[0]["refused"] == true && exchanges[0]["nonce"] == "none", "\(exchanges[0])")
            #expect(exchanges[0]["forwarded"] == false)
            #expect(exchanges[1]["refused"] == false && exchanges[1]["nonce"] == "current", "\(exchanges[1])")
            #expect(exchanges[1]["forwarded"] == true && exchanges[1]["status"] == 200, "\(exchanges[1])")
            #expect(exchanges[0]["code"] != nil && exchanges[0]["code"] == exchanges[1]["code"], "the same code, sent again")
        }
        #expect(exchanges.filter { $0["forwarded"] == true }.count == 1, "the code reached Glewlwyd once")
        #expect(exchanges.allSatisfy { $0["proof"] == true }, "every exchange carries a proof")

        let tokens = try world.keyringTokens()
        #expect(jwtClaims(tokens.access)?["cnf"]?["jkt"]?.stringValue != nil, "the access token is DPoP-bound")
        #expect(jwtClaims(tokens.access)?["iss"]?.stringValue == world.provider.issuer, "the issuer")
        #expect(world.provider.issuer.hasPrefix(proxy.origin + "/"), "Glewlwyd's issuer names the proxy")
        let answer = try world.request()
        #expect(answer["status"] == 200, "\(answer)")
        #expect(answer["body"]?.stringValue?.contains("alice@example.com") == true, "\(answer)")

        let views = [
            session.jsonText, Self.broker(answer),
            try rpc.call("login.status", params: ["attemptId": .string(id)]).jsonText,
            try rpc.call("session.get", params: ["client": .string(Self.client)]).jsonText,
        ]
        try Self.expectNoNonceLeaks(world, proxy, views: views)
        #expect(!proxy.log.contains(tokens.access) && !proxy.log.contains(tokens.refresh), "the proxy logs no token")
    }

    /// After the nonce rotates, the refresh's proof carries a stale one: it
    /// is refused and sent once more with the new nonce (rotating the refresh
    /// token, the key kept). A nonce announced in a successful answer (RFC
    /// 9449 §8.2) is the one the next refresh proves, with no refusal.
    @Test func aRefreshAfterANonceRotationFollowsTheLatestNonce() throws {
        // 16 s tokens: an `http.request` refreshes once the token has less
        // than 15 s left; the broker's own timer waits for 75–90 % of its life.
        let world = try NonceWorld(accessTokenTTL: 16)
        let proxy = world.proxy
        try world.signIn()
        let key = try #require(world.keyringDPoPKey())
        let first = try world.keyringTokens()
        let jkt = jwtClaims(first.access)?["cnf"]?["jkt"]?.stringValue
        #expect(jkt != nil)

        try proxy.rotate()
        let before = proxy.requests().count
        try Self.waitUntilRefreshIsDue(first.access)
        let answer = try world.request()
        #expect(answer["status"] == 200, "\(answer)")
        let refreshes = proxy.tokenRequests("refresh_token", after: before)
        #expect(refreshes.count == 2, "\(refreshes)")
        if refreshes.count == 2 {
            #expect(refreshes[0]["refused"] == true && refreshes[0]["nonce"] == "stale", "\(refreshes[0])")
            #expect(refreshes[1]["refused"] == false && refreshes[1]["nonce"] == "current", "\(refreshes[1])")
            #expect(refreshes[1]["forwarded"] == true && refreshes[1]["status"] == 200, "\(refreshes[1])")
        }
        let second = try world.keyringTokens()
        #expect(second.refresh != first.refresh, "the refresh rotated the refresh token")
        #expect(jwtClaims(second.access)?["cnf"]?["jkt"]?.stringValue == jkt, "bound to the same key")
        #expect(world.keyringDPoPKey() == key, "one key per session")

        // Every accepted proof now rotates the nonce, and the answer says which is next.
        try proxy.set(NonceProxy.Mode(token: "nonce", rotateAfter: 1, announce: true))
        let announcedFrom = proxy.requests().count
        try Self.waitUntilRefreshIsDue(second.access)
        let again = try world.request()
        #expect(again["status"] == 200, "\(again)")
        let announced = proxy.tokenRequests("refresh_token", after: announcedFrom)
        #expect(announced.count == 1 && announced.first?["nonce"] == "current", "\(announced)")
        #expect(announced.first?["issued"]?.stringValue != nil, "the answer announced the next nonce")
        let third = try world.keyringTokens()
        #expect(third.refresh != second.refresh)

        try proxy.rotate()  // the announced nonce is stale now: refused once, then accepted
        let rotatedFrom = proxy.requests().count
        try Self.waitUntilRefreshIsDue(third.access)
        _ = try world.request()
        let last = proxy.tokenRequests("refresh_token", after: rotatedFrom)
        #expect(last.map { $0["nonce"]?.stringValue ?? "" } == ["stale", "current"], "\(last)")
        try Self.expectNoNonceLeaks(world, proxy, views: [Self.broker(answer), Self.broker(again)])
    }

    /// The API (RFC 9449 §9) refuses with `401` and `WWW-Authenticate: DPoP
    /// error="use_dpop_nonce"`: `http.request` sends once more with the
    /// nonce and answers the second answer; no refresh, no third send. An API
    /// that asks again is answered to the app as it is (`401`).
    @Test func anAPIRequestRefusedForANonceIsSentOnceMore() throws {
        let world = try NonceWorld()
        let proxy = world.proxy
        try world.signIn()
        try proxy.set(NonceProxy.Mode(token: "nonce", resource: "nonce"))
        try proxy.rotate()
        let before = proxy.requests().count
        let answer = try world.request()
        #expect(answer["status"] == 200, "\(answer)")
        #expect(answer["body"]?.stringValue?.contains("alice@example.com") == true, "\(answer)")
        let sent = proxy.resourceRequests(after: before)
        #expect(sent.map { $0["nonce"]?.stringValue ?? "" } == ["stale", "current"], "\(sent)")
        #expect(sent.first?["refused"] == true && sent.first?["status"] == 401, "\(sent)")
        #expect(sent.last?["forwarded"] == true && sent.last?["status"] == 200, "\(sent)")
        #expect(proxy.requests().dropFirst(before).filter { $0["kind"] == "token" }.isEmpty, "no refresh")

        // The nonce is kept: the next request proves it at once.
        let keptFrom = proxy.requests().count
        let kept = try world.request()
        #expect(kept["status"] == 200, "\(kept)")
        let once = proxy.resourceRequests(after: keptFrom)
        #expect(once.count == 1 && once.first?["nonce"] == "current", "\(once)")

        // An API that never accepts: two sends, and its 401 goes to the app.
        try proxy.set(NonceProxy.Mode(token: "nonce", resource: "always"))
        let refusingFrom = proxy.requests().count
        let refused = try world.request()
        #expect(refused["status"] == 401, "\(refused)")
        // The API's own headers come back to the app as they are (docs/rpc.md),
        // its `DPoP-Nonce` too: no secret, and nothing the app can prove without the key.
        Thread.sleep(forTimeInterval: 1)
        let twice = proxy.resourceRequests(after: refusingFrom)
        #expect(twice.count == 2 && twice.allSatisfy { $0["refused"] == true }, "sent once more only: \(twice)")
        #expect(proxy.requests().dropFirst(refusingFrom).filter { $0["kind"] == "token" }.isEmpty, "no refresh")
        #expect(try world.session()["status"] == "signedIn")
        try Self.expectNoNonceLeaks(world, proxy, views: [Self.broker(answer), Self.broker(kept), Self.broker(refused)])
    }

    /// A token endpoint that asks for a fresh nonce again after the first
    /// resend does not make the broker loop: the code exchange is sent twice,
    /// never forwarded, and the attempt ends `failed` with the provider's
    /// error named; a refresh is sent twice too, `http.request` fails with
    /// `PROVIDER_ERROR` naming `use_dpop_nonce`, and the session stays.
    @Test func aNonceAskedForTwiceInARowIsNotChasedForever() throws {
        let world = try NonceWorld(accessTokenTTL: 16)
        let proxy = world.proxy
        let rpc = try world.h.rpc()
        try proxy.set(NonceProxy.Mode(token: "always"))
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        _ = try world.provider.authorizeDelivering(url, deliver: true)
        var status = JSONValue.null
        try waitUntil(30, "the attempt to end") {
            status = try rpc.call("login.status", params: ["attemptId": .string(id)])
            return status["state"] == "failed" || status["state"] == "succeeded"
        }
        #expect(status["state"] == "failed", "\(status)")
        #expect(status["error"]?["code"] == "PROVIDER_ERROR", "\(status)")
        #expect(status["error"]?["serverCode"] == "use_dpop_nonce", "\(status)")
        let message = status["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("use_dpop_nonce"), "\(status)")
        Thread.sleep(forTimeInterval: 1)
        let exchanges = proxy.tokenRequests("authorization_code")
        #expect(exchanges.count == 2, "sent once more only: \(exchanges)")
        #expect(exchanges.allSatisfy { $0["refused"] == true && $0["forwarded"] == false }, "\(exchanges)")
        #expect(exchanges.count == 2 && exchanges[1]["nonce"] == "current", "the second send proved the nonce given")

        // A signed-in session whose refresh meets the same.
        try proxy.set(NonceProxy.Mode(token: "nonce"))
        try world.signIn()
        #expect(try world.session()["status"] == "signedIn")
        let tokens = try world.keyringTokens()
        try proxy.set(NonceProxy.Mode(token: "always"))
        let before = proxy.requests().count
        try Self.waitUntilRefreshIsDue(tokens.access)
        var outcome = ""
        do {
            let answer = try world.request()
            outcome = answer.jsonText
            Issue.record("the request succeeded without a refresh: \(answer)")
        } catch let error as RPCError {
            outcome = "\(error.message) \(error.data?.jsonText ?? "")"
            #expect(error.data?["code"] == "PROVIDER_ERROR", "\(error)")
            #expect(error.data?["providerError"] == "use_dpop_nonce", "\(error)")
            #expect(error.message.contains("use_dpop_nonce"), "\(error)")
        }
        let refreshes = proxy.tokenRequests("refresh_token", after: before)
        #expect(refreshes.count == 2, "sent once more only: \(refreshes)")
        #expect(refreshes.allSatisfy { $0["refused"] == true && $0["forwarded"] == false }, "\(refreshes)")
        #expect(refreshes.count == 2 && refreshes[1]["nonce"] == "current", "the second send proved the nonce given")
        // Not `invalid_grant`: the session stays, and the next call tries again.
        #expect(try world.session()["status"] == "signedIn")
        try Self.expectNoNonceLeaks(world, proxy, views: [status.jsonText, outcome])
    }

    // MARK: Helpers

    /// What the broker itself says in an `http.request` answer: all but the
    /// API's own headers, which come back to the app as they are.
    static func broker(_ answer: JSONValue) -> String {
        var fields = answer.objectValue ?? [:]
        fields["headers"] = nil
        return JSONValue.object(fields).jsonText
    }

    /// Waits until `accessToken` has less than 15 s left (`http.request` then refreshes first).
    static func waitUntilRefreshIsDue(_ accessToken: String) throws {
        let expiry = try #require(jwtClaims(accessToken)?["exp"]?.intValue)
        try waitUntil(30, "the access token to be due for a refresh", interval: 0.1) {
            Int64(Date().timeIntervalSince1970) >= expiry - 13
        }
    }

    /// The nonces are not secrets (RFC 9449), but the broker keeps them in
    /// memory only: none is in its log, the SQLite files, the views given,
    /// or the CLI's output.
    static func expectNoNonceLeaks(_ world: NonceWorld, _ proxy: NonceProxy, views: [String]) throws {
        let nonces = proxy.issuedNonces()
        #expect(!nonces.isEmpty, "the proxy gave out nonces")
        let log = world.h.broker?.output ?? ""
        let database = world.h.databaseBytes()
        let cli = try world.h.cli(["status", "--all", "--json"])
        let seen = views.joined() + cli.out + cli.err
        for nonce in nonces {
            #expect(!log.contains(nonce), "a DPoP nonce is in the broker's log")
            #expect(!database.contains(nonce), "a DPoP nonce is in the SQLite files")
            #expect(!seen.contains(nonce), "a DPoP nonce is in an RPC answer or the CLI's output")
        }
        #expect(!log.contains("eyJ0eXAiOiJkcG9wK2p3dC"), "a DPoP proof is in the broker's log")
    }
}
