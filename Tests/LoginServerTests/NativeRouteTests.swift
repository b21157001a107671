import BrowserLoginProtocol
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

@Suite(.dedicatedThread) struct CreateTests {
    @Test func createAnswersTheAttempt() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        #expect(attempt.created.issuer == server.origin)
        #expect(attempt.created.authorizeUrl == server.base + "/browser/login?attempt=" + attempt.id)
        #expect(attempt.id.utf8.count >= 22)
        #expect(attempt.created.expiresAt.millisecondsSince1970 > Timestamp.now().millisecondsSince1970)
    }

    @Test func createRefusesBadRequestsInOrder() throws {
        let server = try TestServer()
        let v = try ProofSecret.generate().challenge
        func body(_ client: String = confirmClient, _ url: String = confirmReturn, challenge: String? = nil) -> String {
            #"{"clientId":"\#(client)","returnUrl":"\#(url)","codeChallenge":"\#(challenge ?? v)","codeChallengeMethod":"S256","recoveryChallenge":"\#(v)","ephemeral":false}"#
        }
        for bad in [
            "not json", "[]", #"{"clientId":"a","clientId":"b"}"#, "{}",
            body(challenge: "short"), body().replacingOccurrences(of: "S256", with: "plain"),
            body().replacingOccurrences(of: "false", with: "\"no\""),
        ] {
            expectError(try server.native("/attempts", bad), .invalidRequest)
        }
        // Invalid request before an unknown client.
        expectError(try server.native("/attempts", body("nobody", challenge: "short")), .invalidRequest)
        expectError(try server.native("/attempts", body("nobody")), .clientUnknown)
        for url in [
            "com.example.notes:/callback/", "com.example.notes:/callback?x=1", "com.example.notes:/callback#f",
            "com.example.notes:/Callback", "com.example.notes:/./callback", "com.example.other:/callback",
        ] {
            expectError(try server.native("/attempts", body(confirmClient, url)), .returnURLNotRegistered)
        }
        // An unknown member is ignored.
        let extra = body().replacingOccurrences(of: "{\"clientId\"", with: "{\"future\":1,\"clientId\"")
        #expect(try server.native("/attempts", extra).status == 201)
    }

    /// §1: a return URL matches exactly, as written; only the scheme and the
    /// host compare case-insensitively. The attempt keeps the URL as registered.
    @Test func returnURLsMatchAsWrittenExceptSchemeAndHostCase() throws {
        let web = "https://example.com/cb"
        let custom = "myapp://auth/callback"
        let server = try TestServer {
            $0.clients.append(
                ClientRegistration(
                    clientId: "variants", appName: "Variants", returnUrls: [try! ReturnURL(web), try! ReturnURL(custom)],
                    policy: .automatic))
        }
        let matching = [
            (web, web), ("HTTPS://Example.COM/cb", web), ("https://EXAMPLE.com/cb", web), ("Https://example.com/cb", web),
            (custom, custom), ("myapp://AUTH/callback", custom), ("MYAPP://auth/callback", custom),
            ("MyApp://Auth/callback", custom),
        ]
        for (sent, registered) in matching {
            let attempt = try NativeAttempt.create(server, client: "variants", returnUrl: sent)
            let callback = try server.browser().signInAndAuthorize(
                authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
            // The callback is built on the URL as registered; an https one keeps its automatic policy.
            #expect(callback.hasPrefix(registered + "?code="), "\(sent) → \(callback)")
        }
        let refused = [
            "https://example.com/CB", "https://example.com/Cb", "https://example.com/cb/", "https://example.com:443/cb",
            "HTTPS://EXAMPLE.COM:443/cb", "https://example.com/%63b", "https://example.com/c%62", "https://example.com/./cb",
            "https://example.com/x/../cb", "https://example.com//cb", "https://example.com/cb?", "https://example.com/cb#",
            "https://user@example.com/cb", "https://example.com./cb", "https://example.com", "https://example.com/c",
            "http://example.com/cb", "https://example.com/cbx", " https://example.com/cb", "https://example.com/cb ",
            "myapp://auth/Callback", "myapp://auth/callback/", "myapp:/auth/callback", "myapp://auth//callback",
            "myapp://auth/%63allback", "myapp://auth:443/callback", "myapp://auth/./callback", "myapp://auth.example/callback",
            "myapp:auth/callback", "myapp:///callback", "",
        ]
        for url in refused {
            let body = try JSONEncoder().encode(
                CreateAttemptRequest(
                    clientId: "variants", returnUrl: url, codeChallenge: try ProofSecret.generate().challenge,
                    recoveryChallenge: try ProofSecret.generate().challenge))
            let answer = try server.native("/attempts", String(decoding: body, as: UTF8.self))
            expectError(answer, .returnURLNotRegistered)
        }
    }

    @Test func nativeRoutesRefuseBrowsers() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        for header in [("Cookie", "a=b"), ("Origin", server.origin), ("Sec-Fetch-Site", "none")] {
            for path in ["/attempts", "/attempts/\(attempt.id)/status", "/sessions/refresh", "/sessions/revoke"] {
                expectError(try server.native(path, attempt.recoveryJSON, headers: [header]), .nativeOnly)
            }
            expectError(try server.get(server.base + "/native/session", headers: [header]), .nativeOnly)
        }
    }

    @Test func commonRules() throws {
        let server = try TestServer()
        let big = "{\"x\":\"" + String(repeating: "a", count: 70_000) + "\"}"
        expectError(try server.native("/attempts", big), .payloadTooLarge)
        expectError(
            try RawHTTP.send(
                "POST", server.base + "/native/attempts", headers: [("Content-Type", "text/plain")], body: Array("{}".utf8)),
            .invalidRequest)
        let get = try server.get(server.base + "/native/attempts")
        expectError(get, .methodNotAllowed)
        #expect(get.header("allow") == "POST")
        expectError(try server.native("/nothing", "{}"), .notFound)
        expectError(try server.get(server.origin + "/elsewhere"), .notFound)
        expectError(try RawHTTP.postJSON(server.base + "/native/session", "{}"), .methodNotAllowed)
        #expect(try server.get(server.base + "/health").status == 200)
    }
}

@Suite(.dedicatedThread) struct ExchangeTests {
    @Test func fullLoginIssuesASessionAndAReceipt() throws {
        let server = try TestServer()
        let (attempt, answer) = try login(server, email: "dev+bltest.full@example.com")
        let s = answer.session
        #expect(s.account.email == "dev+bltest.full@example.com")
        #expect(s.authMethod == "test")
        #expect(answer.receipt.attemptId == attempt.id)
        #expect(answer.receipt.sessionId == s.sessionId)
        #expect(answer.receipt.tokenDigest == Crypto.digest(s.accessToken))
        #expect(s.accessToken.utf8.count >= 43 && (s.refreshToken ?? "").utf8.count >= 43)
        #expect(s.accessTokenExpiresAt?.millisecondsSince1970 == server.time.clock() + 600_000)
        let info = try server.get(server.base + "/native/session", headers: bearer(s.accessToken))
        #expect(info.status == 200)
        let decoded = try info.decode(SessionInfoResponse.self)
        #expect(decoded.sessionId == s.sessionId && decoded.account == s.account && decoded.expiresAt == s.expiresAt)
    }

    @Test func checksAttemptThenVerifierThenStateThenCode() throws {
        let server = try TestServer()
        expectError(
            try server.native("/attempts/unknown-attempt/exchange", #"{"code":"c","codeVerifier":"v"}"#), .attemptUnknown)
        let attempt = try NativeAttempt.create(server)
        expectError(try attempt.exchange(server, code: "x"), .attemptNotAuthorized)
        expectError(try server.native("/attempts/\(attempt.id)/exchange", #"{"code":"x"}"#), .invalidRequest)
        let browser = try server.browser()
        let callback = try browser.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        // A wrong verifier does not count, however often.
        let other = try ProofSecret.generate().value
        for _ in 0..<7 { expectError(try attempt.exchange(server, code: code, verifier: other), .invalidGrant) }
        // Four wrong codes count; the fifth cancels the attempt.
        for _ in 0..<4 { expectError(try attempt.exchange(server, code: "wrong"), .invalidGrant) }
        #expect(try attempt.exchange(server, code: code).status == 200)
    }

    @Test func fiveWrongCodesCancelTheAttempt() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        for _ in 0..<5 { expectError(try attempt.exchange(server, code: "wrong"), .invalidGrant) }
        expectError(try attempt.exchange(server, code: code), .attemptCancelled)
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .cancelled)
    }

    @Test func aSecondExchangeRevokesTheFirstSession() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        let first = try attempt.exchange(server, code: code).decode(ExchangeResponse.self)
        let replay = try attempt.exchange(server, code: code)
        expectError(replay, .attemptAlreadyExchanged)
        #expect(!replay.text.contains("accessToken"))
        expectError(try server.get(server.base + "/native/session", headers: bearer(first.session.accessToken)), .sessionRevoked)
        let status = try attempt.status(server).decode(StatusResponse.self)
        #expect(status.state == .completed && status.sessionRevoked == true && status.isWellFormed)
    }

    @Test func anExpiredAttemptAnswersGone() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        server.time.advance(120_000)  // now == expiresAt counts as past it
        expectError(
            try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin)), .attemptExpired)
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .expired)
    }

    @Test func aDisabledUserCannotExchange() throws {
        let server = try TestServer()
        let email = "dev+bltestdisabled@example.com"
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: email, code: "000000")
        let admin = try ServerBinary.run(["users", "disable", email, "--database", server.server.configuration.databasePath])
        #expect(admin.status == 0, "\(admin.err)")
        expectError(
            try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin)), .authUserDisabled
        )
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .cancelled)
    }
}

@Suite(.dedicatedThread) struct RecoveryTests {
    @Test func statusReportsEachState() throws {
        let server = try TestServer()
        expectError(try server.native("/attempts/nope/status", #"{"recoveryKey":"x"}"#), .attemptUnknown)
        let attempt = try NativeAttempt.create(server)
        expectError(
            try server.native("/attempts/\(attempt.id)/status", #"{"recoveryKey":"\#(attempt.verifier.value)"}"#), .proofInvalid)
        expectError(try server.native("/attempts/\(attempt.id)/status", "{}"), .invalidRequest)
        var status = try attempt.status(server).decode(StatusResponse.self)
        #expect(status.state == .pending && status.isWellFormed && status.expiresAt == attempt.created.expiresAt)
        let browser = try server.browser()
        let callback = try browser.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        status = try attempt.status(server).decode(StatusResponse.self)
        #expect(status.state == .authorized && status.isWellFormed)
        let issued = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
            .decode(ExchangeResponse.self)
        status = try attempt.status(server).decode(StatusResponse.self)
        #expect(status.state == .completed && status.isWellFormed)
        #expect(status.receipt == issued.receipt)
        #expect(status.sessionExpiresAt == issued.session.expiresAt)
        #expect(status.sessionRevoked == false)
    }

    @Test func aCompletedAttemptOutlivesItsLifetimeButNotItsSession() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let (attempt, issued) = try login(server)
        server.time.advance(300_000)  // far past the attempt's expiresAt
        let status = try attempt.status(server).decode(StatusResponse.self)
        #expect(status.state == .completed && status.receipt == issued.receipt)
        // Expiring the attempt did not expire the session.
        #expect(try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)).status == 200)
        let refreshed = try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#)
        #expect(refreshed.status == 200)
        server.time.advance(3_600_000)
        expectError(try attempt.status(server), .attemptUnknown)
    }

    @Test func cancelAndItsIdempotence() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        expectError(try server.native("/attempts/\(attempt.id)/cancel", #"{"recoveryKey":"bad"}"#), .proofInvalid)
        expectError(try server.native("/attempts/nope/cancel", attempt.recoveryJSON), .attemptUnknown)
        for _ in 0..<2 {
            let answer = try server.native("/attempts/\(attempt.id)/cancel", attempt.recoveryJSON)
            #expect(try answer.status == 200 && answer.decode(StateResponse.self).state == "cancelled")
        }
        let expiring = try NativeAttempt.create(server)
        server.time.advance(121_000)
        #expect(
            try server.native("/attempts/\(expiring.id)/cancel", expiring.recoveryJSON).decode(StateResponse.self).state
                == "expired")

        let server2 = try TestServer()
        let (done, _) = try login(server2)
        expectError(try server2.native("/attempts/\(done.id)/cancel", done.recoveryJSON), .attemptAlreadyExchanged)
    }

    @Test func acknowledgeRetiresTheAttempt() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        expectError(try server.native("/attempts/\(attempt.id)/acknowledge", attempt.recoveryJSON), .attemptActive)
        expectError(try server.native("/attempts/\(attempt.id)/acknowledge", #"{"recoveryKey":"x"}"#), .proofInvalid)
        let (done, issued) = try login(server)
        let ack = try server.native("/attempts/\(done.id)/acknowledge", done.recoveryJSON)
        #expect(try ack.status == 200 && ack.decode(StateResponse.self).state == "acknowledged")
        expectError(try done.status(server), .attemptUnknown)
        expectError(try server.native("/attempts/\(done.id)/acknowledge", done.recoveryJSON), .attemptUnknown)
        // Acknowledging never revokes the session.
        #expect(try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)).status == 200)
        _ = try server.native("/attempts/\(attempt.id)/cancel", attempt.recoveryJSON)
        #expect(try server.native("/attempts/\(attempt.id)/acknowledge", attempt.recoveryJSON).status == 200)
    }
}

@Suite(.dedicatedThread) struct SessionTests {
    @Test func sessionErrorsInOrder() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let url = server.base + "/native/session"
        expectError(try server.get(url), .unauthenticated)
        expectError(try server.get(url, headers: [("Authorization", "Basic abc")]), .unauthenticated)
        expectError(try server.get(url, headers: [("Authorization", "Bearer")]), .unauthenticated)
        expectError(try server.get(url, headers: bearer("unknown-token")), .sessionRevoked)
        let (_, issued) = try login(server)
        server.time.advance(600_000)
        expectError(try server.get(url, headers: bearer(issued.session.accessToken)), .tokenExpired)
        server.time.advance(3_000_000)
        expectError(try server.get(url, headers: bearer(issued.session.accessToken)), .sessionExpired)
        expectError(
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#), .sessionExpired)
    }

    @Test func refreshRotatesWithAGraceWindow() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let (_, issued) = try login(server)
        let r0 = try #require(issued.session.refreshToken)
        func refresh(_ token: String) throws -> HTTPAnswer {
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(token)"}"#)
        }
        expectError(try server.native("/sessions/refresh", "{}"), .invalidRequest)
        expectError(try refresh("unknown"), .sessionRevoked)
        server.time.advance(1000)
        let first = try refresh(r0).decode(RefreshResponse.self)
        #expect(first.refreshToken != r0 && first.accessToken != issued.session.accessToken)
        #expect(first.expiresAt == issued.session.expiresAt)
        #expect(first.accessTokenExpiresAt.millisecondsSince1970 == server.time.clock() + 600_000)
        server.time.advance(59_000)
        let again = try refresh(r0).decode(RefreshResponse.self)
        #expect(again == first)  // the same successor inside the grace window
        // Access tokens issued before the rotation stay valid until their expiry.
        #expect(try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)).status == 200)
        let second = try refresh(first.refreshToken).decode(RefreshResponse.self)
        // r0 is now older than the immediate predecessor: reuse revokes the session.
        expectError(try refresh(r0), .sessionRevoked)
        expectError(try server.get(server.base + "/native/session", headers: bearer(second.accessToken)), .sessionRevoked)
        expectError(try refresh(second.refreshToken), .sessionRevoked)
    }

    @Test func thePredecessorAfterTheWindowRevokes() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let (_, issued) = try login(server)
        let first = try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#)
            .decode(RefreshResponse.self)
        server.time.advance(60_000)
        expectError(
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#), .sessionRevoked)
        expectError(try server.native("/sessions/refresh", #"{"refreshToken":"\#(first.refreshToken)"}"#), .sessionRevoked)
    }

    @Test func accessTokensNeverOutliveTheSession() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 900_000 }
        let (_, issued) = try login(server)
        server.time.advance(600_000)
        let r = try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#)
            .decode(RefreshResponse.self)
        #expect(r.accessTokenExpiresAt == issued.session.expiresAt)
    }

    @Test func revokeByBearerAndByProof() throws {
        let server = try TestServer()
        let (attempt, issued) = try login(server)
        // Both forms at once, or neither, is invalid.
        expectError(
            try server.native("/sessions/revoke", attempt.recoveryJSON, headers: bearer(issued.session.accessToken)),
            .invalidRequest)
        expectError(try server.native("/sessions/revoke", "{}"), .invalidRequest)
        expectError(try server.native("/sessions/revoke", "[]", headers: bearer("x")), .invalidRequest)
        // Sign-out: 200 also for unknown tokens.
        #expect(try server.native("/sessions/revoke", "{}", headers: bearer("unknown")).decode(RevokeResponse.self).revoked)
        #expect(try server.native("/sessions/revoke", "{}", headers: bearer(issued.session.accessToken)).status == 200)
        expectError(try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken)), .sessionRevoked)
        #expect(try server.native("/sessions/revoke", "{}", headers: bearer(issued.session.accessToken)).status == 200)
        #expect(try attempt.status(server).decode(StatusResponse.self).sessionRevoked == true)

        // By proof.
        let (second, issued2) = try login(server)
        func proof(_ a: NativeAttempt, key: String? = nil) -> String {
            #"{"attemptId":"\#(a.id)","recoveryKey":"\#(key ?? a.recovery.value)"}"#
        }
        expectError(try server.native("/sessions/revoke", proof(second, key: second.verifier.value)), .proofInvalid)
        expectError(try server.native("/sessions/revoke", #"{"attemptId":"nope","recoveryKey":"x"}"#), .attemptUnknown)
        #expect(try server.native("/sessions/revoke", proof(second)).status == 200)
        expectError(
            try server.get(server.base + "/native/session", headers: bearer(issued2.session.accessToken)), .sessionRevoked)
        let pending = try NativeAttempt.create(server)
        expectError(try server.native("/sessions/revoke", proof(pending)), .attemptActive)
        _ = try server.native("/attempts/\(pending.id)/cancel", pending.recoveryJSON)
        #expect(try server.native("/sessions/revoke", proof(pending)).status == 200)
    }

    @Test func aDisabledUserIsRefusedEverywhereAtOnce() throws {
        let server = try TestServer()
        let email = "dev+bltestoff@example.com"
        let browser = try server.browser()
        let (_, issued) = try login(server, email: email, browser: browser)
        let db = server.server.configuration.databasePath
        #expect(try ServerBinary.run(["users", "disable", email, "--database", db]).status == 0)
        let token = bearer(issued.session.accessToken)
        expectError(try server.get(server.base + "/native/session", headers: token), .authUserDisabled)
        expectError(try server.get(server.origin + "/api/me", headers: token), .authUserDisabled)
        expectError(
            try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#), .authUserDisabled)
        #expect(throws: ScriptedBrowserError.self) { try browser.currentSession() }
        let fresh = try server.browser()
        #expect((try? fresh.verifySignIn(email: email, code: "000000")) == nil)
        let list = try ServerBinary.run(["users", "list", "--database", db])
        #expect(list.out.contains(email) && list.out.contains("disabled"))
        // Re-enabled: the old sessions stay revoked; signing in again works.
        #expect(try ServerBinary.run(["users", "enable", email, "--database", db]).status == 0)
        expectError(try server.get(server.base + "/native/session", headers: token), .sessionRevoked)
        #expect(try login(server, email: email).1.session.account.email == email)
        #expect(try ServerBinary.run(["users", "disable", "nobody@example.com", "--database", db]).status == 1)
        let attempts = try ServerBinary.run(["attempts", "list", "--database", db])
        #expect(attempts.status == 0 && attempts.out.contains(confirmClient))
    }
}
