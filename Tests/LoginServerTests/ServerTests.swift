import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

@Suite(.dedicatedThread) struct DemoAPITests {
    @Test func theDemoAPIAcceptsTheAccessToken() throws {
        let server = try TestServer()
        let (_, issued) = try login(server)
        let token = bearer(issued.session.accessToken)
        let me = try server.get(server.origin + "/api/me", headers: token)
        #expect(try me.decode(Account.self) == issued.session.account)
        #expect(me.header("cache-control") == "no-store")
        #expect(try server.get(server.origin + "/api/notes", headers: token).decode(NotesResponse.self).notes.isEmpty)
        let created = try RawHTTP.postJSON(server.origin + "/api/notes", #"{"text":"hello"}"#, headers: token)
        #expect(created.status == 201)
        let note = try created.decode(Note.self)
        #expect(note.text == "hello")
        #expect(try server.get(server.origin + "/api/notes", headers: token).decode(NotesResponse.self).notes == [note])
        expectError(try RawHTTP.postJSON(server.origin + "/api/notes", #"{"text":""}"#, headers: token), .invalidRequest)
        expectError(try RawHTTP.postJSON(server.origin + "/api/notes", #"{"txt":"a"}"#, headers: token), .invalidRequest)
        expectError(try server.get(server.origin + "/api/me"), .unauthenticated)
        expectError(try server.get(server.origin + "/api/nothing", headers: token), .notFound)
        expectError(try RawHTTP.send("DELETE", server.origin + "/api/notes", headers: token), .methodNotAllowed)
    }

    @Test func anExpiredAccessTokenIsRefusedWithoutProcessing() throws {
        let server = try TestServer { $0.sessionLifetimeMillis = 3_600_000 }
        let (_, issued) = try login(server)
        server.time.advance(600_000)
        let token = bearer(issued.session.accessToken)
        expectError(try RawHTTP.postJSON(server.origin + "/api/notes", #"{"text":"lost"}"#, headers: token), .tokenExpired)
        let fresh = try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#)
            .decode(RefreshResponse.self)
        #expect(
            try server.get(server.origin + "/api/notes", headers: bearer(fresh.accessToken)).decode(NotesResponse.self).notes
                .isEmpty)
        server.time.advance(3_000_000)
        expectError(try server.get(server.origin + "/api/me", headers: bearer(fresh.accessToken)), .sessionExpired)
        _ = try server.native("/sessions/revoke", "{}", headers: bearer(fresh.accessToken))
        expectError(try server.get(server.origin + "/api/me", headers: bearer(fresh.accessToken)), .sessionRevoked)
    }
}

@Suite(.dedicatedThread) struct RateLimitTests {
    func expectLimited(_ answer: HTTPAnswer, sourceLocation: SourceLocation = #_sourceLocation) {
        expectError(answer, .rateLimited, sourceLocation: sourceLocation)
        let retry = Int(answer.header("retry-after") ?? "") ?? 0
        #expect(retry >= 1 && retry <= 60, sourceLocation: sourceLocation)
    }

    @Test func attemptCreationIsLimited() throws {
        let server = try TestServer { $0.rateLimits.create = RateLimit(burst: 3, perMinute: 6) }
        for _ in 0..<3 { _ = try NativeAttempt.create(server) }
        let v = try ProofSecret.generate().challenge
        let body =
            #"{"clientId":"\#(confirmClient)","returnUrl":"\#(confirmReturn)","codeChallenge":"\#(v)","codeChallengeMethod":"S256","recoveryChallenge":"\#(v)","ephemeral":false}"#
        let limited = try server.native("/attempts", body)
        expectLimited(limited)
        #expect(limited.header("retry-after") == "10")
        server.time.advance(10_000)
        #expect(try server.native("/attempts", body).status == 201)
    }

    @Test func exchangeIsLimited() throws {
        let server = try TestServer { $0.rateLimits.exchange = RateLimit(burst: 2, perMinute: 1) }
        let attempt = try NativeAttempt.create(server)
        for _ in 0..<2 { expectError(try attempt.exchange(server, code: "x"), .attemptNotAuthorized) }
        expectLimited(try attempt.exchange(server, code: "x"))
    }

    @Test func codeEntryIsLimited() throws {
        let server = try TestServer { $0.rateLimits.codeEntry = RateLimit(burst: 2, perMinute: 1) }
        let browser = try server.browser()
        for _ in 0..<2 { #expect(throws: ScriptedBrowserError.self) { try browser.verifySignIn(email: testBase, code: "1") } }
        let answer = try browser.request(
            "POST", server.base + "/browser/signin/verify", headers: [("Content-Type", "application/json")],
            body: Array(#"{"email":"dev@example.com","code":"000000"}"#.utf8))
        expectLimited(answer)
    }
}

@Suite(.dedicatedThread) struct ConcurrencyAndLogTests {
    @Test func theTestExchangeDelayHoldsTheAnswerAfterCommitting() async throws {
        let server = try TestServer { $0.testExchangeDelayMillis = 3000 }
        let attempt = try NativeAttempt.create(server)
        let callback = try server.browser().signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        let json = attempt.exchangeJSON(code: code)
        let url = server.base + "/native/attempts/\(attempt.id)/exchange"
        let sent = Date()
        let exchange = Task.detached { try RawHTTP.postJSON(url, json) }
        try await Task.sleep(for: .milliseconds(500))
        // Other requests are answered meanwhile, and the exchange is already committed.
        let started = Date()
        let status = try attempt.status(server).decode(StatusResponse.self)
        #expect(Date().timeIntervalSince(started) < 2.0)
        #expect(status.state == .completed)
        let answer = try await exchange.value
        #expect(Date().timeIntervalSince(sent) >= 3.0)
        #expect(answer.status == 200)
        #expect(try answer.decode(ExchangeResponse.self).receipt == status.receipt)
    }

    @Test func logsNeverCarrySecrets() throws {
        let server = try TestServer()
        let email = "carol@example.org"
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        let callback = try browser.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: email) {
            try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        }
        let otp = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        let issued = try attempt.exchange(server, code: code).decode(ExchangeResponse.self)
        let refreshed = try server.native("/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#)
            .decode(RefreshResponse.self)
        _ = try attempt.status(server)
        let logs = CapturedLogs.all
        #expect(logs.contains("http.route=native.exchange"))
        for secret in [
            attempt.id, attempt.verifier.value, attempt.recovery.value, code, callback, attempt.created.authorizeUrl,
            issued.session.accessToken, issued.session.refreshToken!, refreshed.accessToken, refreshed.refreshToken,
            "code is \(otp)", email,
        ] {
            #expect(!logs.contains(secret))
        }
        #expect(logs.split(separator: "\n").allSatisfy { $0.hasPrefix("<") })
    }
}

@Suite(.dedicatedThread) struct ConfigurationTests {
    static let client =
        #"{"clientId":"com.example.notes","appName":"Notes","returnUrls":["com.example.notes:/callback"],"policy":"confirm"}"#

    static let cases: [(String, String, String)] = [
        (#""lifetimeMillis": 999"#, "lifetimeMillis", "range"),
        (#""lifetimeMillis": 300001"#, "lifetimeMillis", "range"),
        (#""basePath": "/""#, "basePath", "pattern"),
        (#""basePath": "/a/""#, "basePath", "pattern"),
        (#""basePath": "no-slash""#, "basePath", "pattern"),
        (#""publicOrigin": "http://login.example.com""#, "publicOrigin", "origin"),
        (#""publicOrigin": "https://login.example.com/path""#, "publicOrigin", "origin"),
        (#""listen": "localhost""#, "listen", "ip-literal"),
        (#""port": 70000"#, "port", "range"),
        (#""port": "80""#, "port", "type"),
        (#""sessionLifetimeMillis": 10"#, "sessionLifetimeMillis", "range"),
        (#""accessTokenLifetimeMillis": 0"#, "accessTokenLifetimeMillis", "range"),
        (#""tls": {"certificate": "c.pem"}"#, "tls.key", "pair"),
        (#""tls": {"certificate": "c.pem", "key": "k.pem", "extra": 1}"#, "tls.extra", "known-member"),
        (#""testAccounts": ["a+b@example.com"]"#, "testAccounts[0]", "email"),
        (#""rateLimits": {"create": {"burst": 0}}"#, "rateLimits.create.burst", "range"),
        (#""unknown": true"#, "unknown", "known-member"),
        (#""clients": []"#, "clients", "at-least-one"),
        (
            #""clients": [{"clientId":"bad id","appName":"N","returnUrls":["x.y:/c"],"policy":"confirm"}]"#,
            "clients[0].clientId", "pattern"
        ),
        (#""clients": [\#(client), \#(client)]"#, "clients[1].clientId", "unique"),
        (
            #""clients": [{"clientId":"a","appName":"","returnUrls":["x.y:/c"],"policy":"confirm"}]"#, "clients[0].appName",
            "length"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":[],"policy":"confirm"}]"#, "clients[0].returnUrls",
            "at-least-one"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["x.y:/c"],"policy":"sometimes"}]"#, "clients[0].policy",
            "one-of"
        ),
        (#""clients": [{"clientId":"a","appName":"N","returnUrls":["x.y:/c"]}]"#, "clients[0].policy", "required"),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["x.y:/c?q=1"],"policy":"confirm"}]"#,
            "clients[0].returnUrls[0]", "no-query"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["X.y:/c"],"policy":"confirm"}]"#,
            "clients[0].returnUrls[0]", "lower-case-scheme"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["https://localhost/c"],"policy":"confirm"}]"#,
            "clients[0].returnUrls[0]", "no-localhost"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["javascript:/c"],"policy":"confirm"}]"#,
            "clients[0].returnUrls[0]", "forbidden-scheme"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["x.y:/c"],"policy":"confirm","extra":1}]"#,
            "clients[0].extra", "known-member"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["https://a.example.com/c","https://A.Example.com/c"],"policy":"confirm"}]"#,
            "clients[0].returnUrls", "unique"
        ),
        (
            #""clients": [{"clientId":"a","appName":"N","returnUrls":["x.y://Host/c","x.y://host/c"],"policy":"confirm"}]"#,
            "clients[0].returnUrls", "unique"
        ),
        (#""port": 1, "port": 2"#, "(file)", "no-duplicates"),
    ]

    @Test func invalidConfigurationsStopStartUpNamingTheFieldAndTheRule() throws {
        let directory = try TemporaryDirectory()
        for (i, (member, field, rule)) in Self.cases.enumerated() {
            var json = "{" + member
            if !member.contains("\"clients\"") { json += #", "clients": [\#(Self.client)]"# }
            if !member.contains("\"database\"") { json += #", "database": "db.sqlite""# }
            if !member.contains("\"port\"") { json += #", "port": 0"# }
            json += "}"
            let path = directory.path + "/config-\(i).json"
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            let run = try ServerBinary.run(["--config", path])
            #expect(run.status == 78, "\(member): \(run.err)")
            #expect(run.err.contains("invalid configuration: \(field): \(rule):"), "\(member): \(run.err)")
            #expect(run.out.isEmpty)
        }
        // Flags are checked too.
        let flag = try ServerBinary.run(["--config", directory.path + "/config-0.json", "--lifetime-ms", "5000000"])
        #expect(flag.status == 78 && flag.err.contains("lifetimeMillis: range:"))
        let missing = try ServerBinary.run(["--port", "0"])
        #expect(missing.status == 78 && missing.err.contains("database: required:"))
        #expect(try ServerBinary.run(["--no-such-flag", "1"]).status == 64)
    }

    @Test func theExampleConfigurationIsValid() throws {
        var directory = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { directory = directory.deletingLastPathComponent() }
        let example = directory.appendingPathComponent("examples/server.json")
        let data = try Data(contentsOf: example)
        var c = try ServerConfiguration.load(json: data, relativeTo: "/var/lib/browser-login-server")
        try c.validate()
        #expect(c.lifetimeMillis == 120_000 && c.basePath == "/browser-login" && !c.clients.isEmpty)
        c.port = 70000
        #expect(throws: ConfigurationError.self) { try c.validate() }
    }
}

@Suite(.dedicatedThread) struct ProcessTests {
    @Test func aRestartLosesNothing() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/server.json"
        // BL_TEST_STORE=postgres: a PostgreSQL database and an explicit secret file (required there).
        let postgres = PostgresCluster.selectedForTests ? try PostgresCluster.shared().createDatabase() : nil
        let database =
            postgres.map { #""database": "\#($0)", "secretKey": "state/server.key""# }
            ?? #""database": "state/server.sqlite""#
        let keyFile = directory.path + (postgres == nil ? "/state/server.sqlite.key" : "/state/server.key")
        let json = #"""
            {\#(database), "outbox": "outbox", "testAccounts": ["dev@example.com"],
             "clients": [{"clientId": "com.example.notes", "appName": "Notes",
                          "returnUrls": ["com.example.notes:/callback"], "policy": "confirm"}]}
            """#
        try FileManager.default.createDirectory(atPath: directory.path + "/state", withIntermediateDirectories: true)
        try Data(json.utf8).write(to: URL(fileURLWithPath: config))
        let readyFile = directory.path + "/ready"
        var process: ServerProcess? = try ServerProcess(["--config", config, "--port", "0", "--ready-file", readyFile])
        let first = process!.listenURL
        #expect(first.hasPrefix("http://127.0.0.1:"))
        #expect(try String(contentsOfFile: readyFile, encoding: .utf8) == first + "\n")
        let base = first + "/browser-login"

        func create() throws -> NativeAttempt {
            let verifier = try ProofSecret.generate()
            let recovery = try ProofSecret.generate()
            let body =
                #"{"clientId":"com.example.notes","returnUrl":"com.example.notes:/callback","codeChallenge":"\#(verifier.challenge)","codeChallengeMethod":"S256","recoveryChallenge":"\#(recovery.challenge)","ephemeral":false}"#
            let answer = try RawHTTP.postJSON(base + "/native/attempts", body)
            return NativeAttempt(verifier: verifier, recovery: recovery, created: try answer.decode(CreateAttemptResponse.self))
        }
        let done = try create()
        let browser = try ScriptedBrowser(serverOrigin: first)
        let callback = try browser.signInAndAuthorize(authorizeURL: done.created.authorizeUrl, email: "alice@example.org") {
            try #require(OutboxMailSender.latestCode(in: directory.path + "/outbox", to: "alice@example.org"))
        }
        let code = try Callback(parsing: callback)
        guard case .code(let c) = code.outcome else { throw ScriptedBrowserError.transport("no code") }
        let issued = try RawHTTP.postJSON(base + "/native/attempts/\(done.id)/exchange", done.exchangeJSON(code: c))
            .decode(ExchangeResponse.self)
        _ = try RawHTTP.postJSON(first + "/api/notes", #"{"text":"kept"}"#, headers: bearer(issued.session.accessToken))
        let pending = try create()
        let refreshed = try RawHTTP.postJSON(
            base + "/native/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#
        )
        .decode(RefreshResponse.self)
        #expect(process!.stop() == 0)
        process = nil

        let second = try ServerProcess(["--config", config, "--port", "0"])
        let base2 = second.listenURL + "/browser-login"
        let status = try RawHTTP.postJSON(base2 + "/native/attempts/\(done.id)/status", done.recoveryJSON).decode(
            StatusResponse.self)
        #expect(status.state == .completed && status.receipt == issued.receipt && status.sessionRevoked == false)
        #expect(
            try RawHTTP.postJSON(base2 + "/native/attempts/\(pending.id)/status", pending.recoveryJSON)
                .decode(StatusResponse.self).state == .pending)
        let me = try RawHTTP.send("GET", base2 + "/native/session", headers: bearer(refreshed.accessToken))
        #expect(try me.decode(SessionInfoResponse.self).account.email == "alice@example.org")
        let notes = try RawHTTP.send("GET", second.listenURL + "/api/notes", headers: bearer(issued.session.accessToken))
        #expect(try notes.decode(NotesResponse.self).notes.map(\.text) == ["kept"])
        // The grace window and the derived successor survive the restart too.
        let again = try RawHTTP.postJSON(
            base2 + "/native/sessions/refresh", #"{"refreshToken":"\#(issued.session.refreshToken!)"}"#
        )
        .decode(RefreshResponse.self)
        #expect(again == refreshed)
        expectError(
            try RawHTTP.postJSON(base2 + "/native/attempts/\(done.id)/exchange", done.exchangeJSON(code: c)),
            .attemptAlreadyExchanged)
        #expect(second.stop() == 0)
        let mode =
            try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions]
            as? Int
        #expect(mode == 0o600)
    }
}

@Suite(.dedicatedThread) struct TLSTests {
    static let openssl = "/usr/bin/openssl"

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: openssl)))
    func theServerSpeaksHTTPSWithGnuTLS() throws {
        let directory = try TemporaryDirectory()
        let key = directory.path + "/key.pem"
        let certificate = directory.path + "/cert.pem"
        let openssl = try spawnAndWait([
            Self.openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", certificate, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ])
        #expect(openssl.status == 0)
        let server = try TestServer {
            $0.tlsCertificatePath = certificate
            $0.tlsKeyPath = key
        }
        #expect(server.origin.hasPrefix("https://127.0.0.1:"))
        let attempt = try NativeAttempt.create(server, client: confirmClient, returnUrl: confirmReturn)
        let browser = try ScriptedBrowser(serverOrigin: server.origin, caFile: certificate)
        let callback = try browser.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        #expect(try Callback(parsing: callback).issuer == server.origin)
        // Without trusting the certificate, curl refuses the connection.
        #expect(throws: ScriptedBrowserError.self) { try RawHTTP.send("GET", server.base + "/health") }
        #expect(try RawHTTP.send("GET", server.base + "/health", caFile: certificate).status == 200)
    }
}

@Suite struct FreePortTests {
    /// Another process binds the chosen port before the server does (what
    /// made tests fail with "address in use" under load): the server starts
    /// on another port instead, and a failure of another kind is not retried.
    @Test func aServerWhosePortWasTakenStartsOnAnother() throws {
        var occupier: TestServer?
        var ports: [Int] = []
        let server = try TestServer.onAFreePort { c, port in
            ports.append(port)
            if occupier == nil { occupier = try? TestServer { $0.port = port } }
        }
        #expect(occupier != nil)
        #expect(ports.count == 2 && ports.first != ports.last)
        #expect(server.origin == "http://127.0.0.1:\(ports.last ?? 0)")
        #expect(try server.get(server.base + "/health").status == 200)
        var starts = 0
        #expect(throws: HarnessError.self) {
            try onAFreeLoopbackPort { _ in
                starts += 1
                throw HarnessError("no database")
            }
        }
        #expect(starts == 1)
    }
}
