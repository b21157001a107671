import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Dispatch
import Foundation
import LoginServer
import PostgresSupport
import SQLiteSupport
import ScriptedBrowser
import Synchronization
import Testing

/// PostgreSQL can be used here, or the test must fail anyway (`BL_REQUIRE_POSTGRES`).
let postgresTestsRun = PostgresCluster.unavailableReason == nil || PostgresCluster.required
let postgresSkipReason: Comment =
    "PostgreSQL is not installed (\(PostgresCluster.unavailableReason ?? "")); run scripts/install-deps"

/// Several in-process servers (instances) on one PostgreSQL database, with one
/// shared secret file, each with its own connection pool, listener and clock.
final class PostgresInstances: Sendable {
    let directory: TemporaryDirectory
    let url: String
    let servers: [LoginServer]

    init(count: Int, cluster: PostgresCluster, _ adjust: (inout ServerConfiguration) -> Void = { _ in }) throws {
        _ = CapturedLogs.installed
        directory = try TemporaryDirectory("login-server-pg")
        url = try cluster.createDatabase()
        var c = baseConfiguration(directory: directory.path)
        c.databasePath = url
        c.secretKeyPath = directory.path + "/server.key"
        adjust(&c)
        var servers: [LoginServer] = []
        for _ in 0..<count { servers.append(try LoginServer(configuration: c)) }
        self.servers = servers
    }

    deinit { servers.forEach { $0.stop() } }

    func base(_ i: Int) -> String { servers[i % servers.count].origin + servers[0].configuration.basePath }

    /// A native request to instance `i`.
    func native(_ i: Int, _ path: String, _ json: String, headers: [(String, String)] = []) throws -> HTTPAnswer {
        try RawHTTP.postJSON(base(i) + "/native" + path, json, headers: headers)
    }

    /// A whole login on instance `i` (create and sign-in there): the attempt and the code, not yet exchanged.
    func authorized(on i: Int) throws -> (attempt: NativeAttempt, code: String, origin: String) {
        let verifier = try ProofSecret.generate()
        let recovery = try ProofSecret.generate()
        let body = try JSONEncoder().encode(
            CreateAttemptRequest(
                clientId: confirmClient, returnUrl: confirmReturn, codeChallenge: verifier.challenge,
                recoveryChallenge: recovery.challenge))
        let answer = try native(i, "/attempts", String(decoding: body, as: UTF8.self))
        #expect(answer.status == 201, "\(answer.text)")
        let attempt = NativeAttempt(
            verifier: verifier, recovery: recovery, created: try answer.decode(CreateAttemptResponse.self))
        let origin = servers[i % servers.count].origin
        let browser = try ScriptedBrowser(serverOrigin: origin)
        let callback = try browser.signInAndAuthorize(
            authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
        return (attempt, try code(of: callback, attempt: attempt, issuer: origin), origin)
    }
}

/// Runs `count` calls of `body` at once on threads of their own; answers their results in order.
func inParallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) throws -> T) -> [Result<T, any Error>] {
    let results = Mutex<[Int: Result<T, any Error>]>([:])
    DispatchQueue.concurrentPerform(iterations: count) { i in
        let result = Result { try body(i) }
        results.withLock { $0[i] = result }
    }
    return results.withLock { all in (0..<count).map { all[$0]! } }
}

@Suite(.dedicatedThread, .enabled(if: postgresTestsRun, postgresSkipReason))
struct PostgresStoreTests {
    /// Lifts the rate limits: the parallel runs come from one address.
    static func unlimited(_ c: inout ServerConfiguration) {
        c.rateLimits.exchange = RateLimit(burst: 1_000_000, perMinute: 1_000_000)
        c.rateLimits.create = RateLimit(burst: 1_000_000, perMinute: 1_000_000)
    }

    @Test func twoInstancesExchangeEachCodeExactlyOnce() throws {
        let pair = try PostgresInstances(count: 2, cluster: try PostgresCluster.shared(), Self.unlimited)
        let logins = try (0..<20).map { try pair.authorized(on: $0) }
        // 200 exchanges: each code 10 times, alternately on the two instances, all at once.
        let answers = inParallel(200) { i -> HTTPAnswer in
            let login = logins[i % logins.count]
            return try pair.native(
                i, "/attempts/\(login.attempt.id)/exchange", login.attempt.exchangeJSON(code: login.code))
        }
        for (index, login) in logins.enumerated() {
            let mine = answers.enumerated().filter { $0.offset % logins.count == index }.map { try? $0.element.get() }
            let issued = mine.compactMap { $0 }.filter { $0.status == 200 }
            let replayed = mine.compactMap { $0 }.filter { $0.errorCode == ServerErrorCode.attemptAlreadyExchanged.rawValue }
            #expect(issued.count == 1, "attempt \(index): \(mine.map { $0?.status ?? -1 })")
            #expect(replayed.count == 9, "attempt \(index): \(mine.map { $0?.text ?? "transport error" })")
            // §5.2: a replay revokes the session the first exchange issued, on either instance.
            if let first = issued.first {
                let session = try first.decode(ExchangeResponse.self).session
                for i in 0..<2 {
                    let me = try RawHTTP.send("GET", pair.base(i) + "/native/session", headers: bearer(session.accessToken))
                    expectError(me, .sessionRevoked)
                }
                let status = try pair.native(1, "/attempts/\(login.attempt.id)/status", login.attempt.recoveryJSON)
                #expect(try status.decode(StatusResponse.self).sessionRevoked == true)
            }
        }
        let sessions = try PostgresCluster.shared().psql(pair.url, "SELECT COUNT(*) FROM sessions")
        #expect(sessions.trimmingCharacters(in: .whitespacesAndNewlines) == "20")
        // Contention (retried transactions) logs no secret.
        let logs = CapturedLogs.all
        for login in logins {
            #expect(!logs.contains(login.code) && !logs.contains(login.attempt.id))
        }
        for answer in answers.compactMap({ try? $0.get() }) where answer.status == 200 {
            let session = try answer.decode(ExchangeResponse.self).session
            #expect(!logs.contains(session.accessToken) && !logs.contains(session.refreshToken ?? "-"))
        }
    }

    @Test func twoInstancesRefreshEachTokenToOneSuccessor() throws {
        let pair = try PostgresInstances(count: 2, cluster: try PostgresCluster.shared(), Self.unlimited)
        var sessions: [IssuedSession] = []
        for i in 0..<20 {
            let login = try pair.authorized(on: i)
            let answer = try pair.native(
                i, "/attempts/\(login.attempt.id)/exchange", login.attempt.exchangeJSON(code: login.code))
            #expect(answer.status == 200, "\(answer.text)")
            sessions.append(try answer.decode(ExchangeResponse.self).session)
        }
        let current = sessions
        // 200 refreshes: each refresh token 10 times, alternately on the two instances, all at once.
        let answers = inParallel(200) { i -> HTTPAnswer in
            try pair.native(i, "/sessions/refresh", #"{"refreshToken":"\#(current[i % current.count].refreshToken!)"}"#)
        }
        for (index, session) in sessions.enumerated() {
            let mine = answers.enumerated().filter { $0.offset % sessions.count == index }.map { try? $0.element.get() }
            #expect(mine.allSatisfy { $0?.status == 200 }, "session \(index): \(mine.map { $0?.text ?? "transport error" })")
            let successors = Set(mine.compactMap { try? $0?.decode(RefreshResponse.self).refreshToken })
            #expect(successors.count == 1, "session \(index): \(successors.count) different successors")
            #expect(!successors.contains(session.refreshToken!))
        }
        // Zero double issues: every session rotated exactly once.
        let generations = try PostgresCluster.shared().psql(pair.url, "SELECT DISTINCT generation FROM sessions")
        #expect(generations.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
        let revoked = try PostgresCluster.shared().psql(
            pair.url, "SELECT COUNT(*) FROM sessions WHERE revoked_at IS NOT NULL")
        #expect(revoked.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    @Test func cancelAndExchangeAtOnceOnTwoInstancesNeverBothWin() throws {
        let pair = try PostgresInstances(count: 2, cluster: try PostgresCluster.shared(), Self.unlimited)
        let logins = try (0..<20).map { try pair.authorized(on: $0) }
        // For each attempt, an exchange on one instance and a cancel on the other, at the same moment.
        let answers = inParallel(40) { i -> HTTPAnswer in
            let login = logins[i / 2]
            return i % 2 == 0
                ? try pair.native(0, "/attempts/\(login.attempt.id)/exchange", login.attempt.exchangeJSON(code: login.code))
                : try pair.native(1, "/attempts/\(login.attempt.id)/cancel", login.attempt.recoveryJSON)
        }.map { try? $0.get() }
        for index in 0..<logins.count {
            guard let exchange = answers[2 * index], let cancel = answers[2 * index + 1] else {
                Issue.record("a transport error")
                continue
            }
            if exchange.status == 200 {
                expectError(cancel, .attemptAlreadyExchanged)
            } else {
                expectError(exchange, .attemptCancelled)
                #expect(cancel.status == 200 && cancel.text.contains("cancelled"), "\(cancel.text)")
            }
            let state = try pair.native(0, "/attempts/\(logins[index].attempt.id)/status", logins[index].attempt.recoveryJSON)
                .decode(StatusResponse.self).state
            #expect(state == (exchange.status == 200 ? .completed : .cancelled))
        }
    }

    @Test func aRateLimitHoldsAcrossInstances() throws {
        let pair = try PostgresInstances(count: 2, cluster: try PostgresCluster.shared()) {
            $0.rateLimits.create = RateLimit(burst: 6, perMinute: 1)
        }
        let v = try ProofSecret.generate().challenge
        let body =
            #"{"clientId":"\#(confirmClient)","returnUrl":"\#(confirmReturn)","codeChallenge":"\#(v)","codeChallengeMethod":"S256","recoveryChallenge":"\#(v)","ephemeral":false}"#
        let answers = inParallel(20) { i in try pair.native(i, "/attempts", body) }.compactMap { try? $0.get() }
        #expect(answers.count == 20)
        #expect(answers.filter { $0.status == 201 }.count == 6, "\(answers.map(\.status))")
        #expect(answers.filter { $0.errorCode == ServerErrorCode.rateLimited.rawValue }.count == 14)
    }

    @Test func wrongSignInCodesAreCountedOnceAcrossInstances() throws {
        let pair = try PostgresInstances(count: 2, cluster: try PostgresCluster.shared()) {
            $0.rateLimits.codeEntry = RateLimit(burst: 1_000_000, perMinute: 1_000_000)
        }
        let email = "someone@example.org"
        try ScriptedBrowser(serverOrigin: pair.servers[0].origin).startSignIn(email: email)
        let outbox = pair.servers[0].configuration.resolvedOutboxPath
        let right = try #require(OutboxMailSender.latestCode(in: outbox, to: email))
        let wrong = right == "123456" ? "654321" : "123456"
        // 20 wrong codes at once on the two instances: 4 answer OTP_INVALID, then the code is used up.
        let answers = inParallel(20) { i -> HTTPAnswer in
            try ScriptedBrowser(serverOrigin: pair.servers[i % 2].origin).request(
                "POST", pair.base(i) + "/browser/signin/verify", headers: [("Content-Type", "application/json")],
                body: Array(#"{"email":"\#(email)","code":"\#(wrong)"}"#.utf8))
        }.compactMap { try? $0.get() }
        #expect(answers.count == 20)
        let invalid = answers.filter { $0.errorCode == ServerErrorCode.otpInvalid.rawValue }.count
        let exhausted = answers.filter { $0.errorCode == ServerErrorCode.otpMaxAttempts.rawValue }.count
        #expect(invalid == 4 && exhausted == 16, "\(answers.map { $0.errorCode ?? "\($0.status)" })")
        // The right code no longer works, on either instance.
        for i in 0..<2 {
            let answer = try ScriptedBrowser(serverOrigin: pair.servers[i].origin).request(
                "POST", pair.base(i) + "/browser/signin/verify", headers: [("Content-Type", "application/json")],
                body: Array(#"{"email":"\#(email)","code":"\#(right)"}"#.utf8))
            expectError(answer, .otpMaxAttempts)
        }
    }

    @Test func theSweeperCleansUpOnPostgres() throws {
        let cluster = try PostgresCluster.shared()
        let directory = try TemporaryDirectory("login-server-pg")
        var c = baseConfiguration(directory: directory.path)
        c.databasePath = try cluster.createDatabase()
        c.secretKeyPath = directory.path + "/server.key"
        let migrate = try ServerBinary.run(["migrate", "--database", c.databasePath])
        #expect(migrate.status == 0, "\(migrate.err)")
        // A used-up sign-in code, expired long ago: the sweep at start-up deletes it.
        try cluster.psql(
            c.databasePath,
            "INSERT INTO sign_in_codes (email, code_hash, created_at, expires_at, wrong_count) VALUES ('old@example.org', 'x', 1, 2, 0)"
        )
        let servers = try (0..<2).map { _ in try LoginServer(configuration: c) }
        defer { servers.forEach { $0.stop() } }
        try waitUntil(20, "the sweep") {
            try cluster.psql(c.databasePath, "SELECT COUNT(*) FROM sign_in_codes").trimmingCharacters(in: .whitespacesAndNewlines)
                == "0"
        }
    }

    @Test func instancesStartingTogetherMigrateOnce() throws {
        let cluster = try PostgresCluster.shared()
        let url = try cluster.createDatabase()
        let directory = try TemporaryDirectory("login-server-pg")
        let secret = Base64URL.encode(try Crypto.randomBytes(32))
        let results = inParallel(4) { _ in
            try runProgram(
                ServerBinary.path, ["migrate", "--database", url],
                environment: ProcessInfo.processInfo.environment.merging(["BROWSER_LOGIN_SERVER_SECRET": secret]) { $1 },
                directory: directory.path, timeout: 60)
        }
        for result in results {
            let run = try result.get()
            #expect(run.status == 0, "\(run.err)")
            #expect(run.out.contains("up to date"))
        }
        let names = try cluster.psql(url, "SELECT name FROM schema_migrations ORDER BY name")
        let list = names.split(separator: "\n")
        #expect(list.count == Set(list).count && !list.isEmpty)
        #expect(list.contains("0001-users"))
        // Times are 64-bit on PostgreSQL.
        let type = try cluster.psql(
            url, "SELECT data_type FROM information_schema.columns WHERE table_name = 'attempts' AND column_name = 'expires_at'")
        #expect(type.trimmingCharacters(in: .whitespacesAndNewlines) == "bigint")
    }

    @Test func theAdminCommandsUsePostgres() throws {
        let one = try PostgresInstances(count: 1, cluster: try PostgresCluster.shared())
        let login = try one.authorized(on: 0)
        let exchanged = try one.native(0, "/attempts/\(login.attempt.id)/exchange", login.attempt.exchangeJSON(code: login.code))
        let issued = try exchanged.decode(ExchangeResponse.self)
        let db = one.url
        let list = try ServerBinary.run(["users", "list", "--database", db])
        #expect(list.status == 0, "\(list.err)")
        #expect(list.out.contains(testBase))
        #expect(try ServerBinary.run(["users", "disable", testBase, "--database", db]).status == 0)
        expectError(
            try RawHTTP.send("GET", one.base(0) + "/native/session", headers: bearer(issued.session.accessToken)),
            .authUserDisabled)
        #expect(try ServerBinary.run(["users", "enable", testBase, "--database", db]).status == 0)
        let attempts = try ServerBinary.run(["attempts", "list", "--database", db])
        #expect(attempts.status == 0 && attempts.out.contains("completed"), "\(attempts.err)")
    }

    @Test func aRestartOfPostgresGives503ThenRecovers() throws {
        // A cluster of its own: the shared one serves the other tests meanwhile.
        let cluster = try PostgresCluster()
        defer { cluster.stop() }
        let one = try PostgresInstances(count: 1, cluster: cluster)
        let v = try ProofSecret.generate().challenge
        let body =
            #"{"clientId":"\#(confirmClient)","returnUrl":"\#(confirmReturn)","codeChallenge":"\#(v)","codeChallengeMethod":"S256","recoveryChallenge":"\#(v)","ephemeral":false}"#
        #expect(try one.native(0, "/attempts", body).status == 201)
        // An authorized attempt not yet exchanged, and a session not yet refreshed.
        let pending = try one.authorized(on: 0)
        let issued = try one.authorized(on: 0)
        let session = try one.native(
            0, "/attempts/\(issued.attempt.id)/exchange", issued.attempt.exchangeJSON(code: issued.code)
        ).decode(ExchangeResponse.self).session
        let exchange = {
            try one.native(0, "/attempts/\(pending.attempt.id)/exchange", pending.attempt.exchangeJSON(code: pending.code))
        }
        let refresh = { try one.native(0, "/sessions/refresh", #"{"refreshToken":"\#(session.refreshToken!)"}"#) }

        try cluster.halt()
        // Down: every answer that needs the database is 503 with Retry-After, and nothing is decided.
        for answer in [try one.native(0, "/attempts", body), try exchange(), try refresh(), try exchange()] {
            expectError(answer, .serviceUnavailable)
            #expect(Int(answer.header("retry-after") ?? "") ?? 0 >= 1, "\(answer.headers("retry-after"))")
        }
        try cluster.startAgain()
        // Back: the first requests are answered (the dead pooled connections are replaced at once),
        // and the exchange and the refresh the outage refused still work, once.
        #expect(try one.native(0, "/attempts", body).status == 201)
        #expect(try exchange().status == 200)
        expectError(try exchange(), .attemptAlreadyExchanged)
        let refreshed = try refresh()
        #expect(refreshed.status == 200, "\(refreshed.text)")
    }

    @Test func anUnreachableDatabaseAtStartUpExits78() throws {
        let directory = try TemporaryDirectory("login-server-pg")
        let secret = Base64URL.encode(try Crypto.randomBytes(32))
        let url = "postgresql://nobody@/nothing?host=" + directory.path
        let config = directory.path + "/server.json"
        let clients = #"{"clients":[{"clientId":"a.b","appName":"A","returnUrls":["a.b:/cb"],"policy":"confirm"}]}"#
        #expect(FileManager.default.createFile(atPath: config, contents: Data(clients.utf8)))
        let run = try runProgram(
            ServerBinary.path, ["--database", url, "--port", "0", "--config", config, "--outbox", directory.path + "/outbox"],
            environment: ProcessInfo.processInfo.environment.merging(["BROWSER_LOGIN_SERVER_SECRET": secret]) { $1 },
            timeout: 60)
        #expect(run.status == 78, "\(run.err)")
        #expect(run.err.contains("cannot use the PostgreSQL database"), "\(run.err)")
        #expect(!run.err.contains(secret))

        // No shared secret: refused before connecting. A malformed one: refused, and not repeated.
        var environment = ProcessInfo.processInfo.environment
        environment["BROWSER_LOGIN_SERVER_SECRET"] = nil
        let arguments = ["--database", url, "--port", "0", "--config", config, "--outbox", directory.path + "/outbox"]
        let noSecret = try runProgram(ServerBinary.path, arguments, environment: environment, timeout: 60)
        #expect(noSecret.status == 78 && noSecret.err.contains("BROWSER_LOGIN_SERVER_SECRET"), "\(noSecret.err)")
        environment["BROWSER_LOGIN_SERVER_SECRET"] = "c2hvcnQtc2VjcmV0"
        let short = try runProgram(ServerBinary.path, arguments, environment: environment, timeout: 60)
        #expect(short.status == 78 && short.err.contains("exactly 32 bytes"), "\(short.err)")
        #expect(!short.err.contains("c2hvcnQtc2VjcmV0"))
        // No outbox: the default (next to the database file) means nothing for a URL.
        environment["BROWSER_LOGIN_SERVER_SECRET"] = secret
        let noOutbox = try runProgram(
            ServerBinary.path, Array(arguments.dropLast(2)), environment: environment, timeout: 60)
        #expect(noOutbox.status == 78 && noOutbox.err.contains("outbox"), "\(noOutbox.err)")
    }
}

/// The whole server suite runs on either store: `BL_TEST_STORE=postgres` puts every `TestServer` on PostgreSQL.
@Suite(.dedicatedThread) struct TestStoreSelectionTests {
    @Test func theServersRunOnTheSelectedStore() throws {
        let server = try TestServer()
        let path = server.server.configuration.databasePath
        #expect(PostgresCluster.selectedForTests ? path.hasPrefix("postgresql://") : path.hasSuffix(".sqlite"), "\(path)")
        _ = try login(server)
    }
}

/// The two mechanical translations of the PostgreSQL store (PostgresSupport), without a server.
@Suite struct PostgresTranslationTests {
    @Test func placeholdersAreNumberedOutsideLiteralsAndComments() {
        #expect(numberedPlaceholders("SELECT * FROM t WHERE a = ? AND b = ?") == "SELECT * FROM t WHERE a = $1 AND b = $2")
        #expect(
            numberedPlaceholders("SELECT '?', \"c?\" FROM t -- why?\nWHERE a = ? AND b = 'it''s ?' AND c = ?")
                == "SELECT '?', \"c?\" FROM t -- why?\nWHERE a = $1 AND b = 'it''s ?' AND c = $2")
        #expect(numberedPlaceholders("VALUES (?, ?, 0, ?)") == "VALUES ($1, $2, 0, $3)")
    }

    @Test func migrationsMapIntegerToBigint() {
        let migration = Migration("x", "CREATE TABLE t (a INTEGER NOT NULL, b_INTEGER TEXT, c INTEGERS, d INTEGER);")
        #expect(migration.postgresSQL == "CREATE TABLE t (a BIGINT NOT NULL, b_INTEGER TEXT, c INTEGERS, d BIGINT);")
        let own = Migration("y", "CREATE TABLE t (a INTEGER);", postgres: "CREATE TABLE t (a SMALLINT);")
        #expect(own.postgresSQL == "CREATE TABLE t (a SMALLINT);")
        #expect(own.sql == "CREATE TABLE t (a INTEGER);")
    }
}

/// `"database"` in the configuration file: a path is relative to the file, a URL is kept as it is.
@Suite struct DatabaseLocationConfigTests {
    @Test func aURLIsNotMadeAPath() throws {
        func database(_ value: String) throws -> String {
            let json = #"""
                {"database": "\#(value)", "clients": [{"clientId": "a.b", "appName": "A", "returnUrls": ["a.b:/cb"], "policy": "confirm"}]}
                """#
            return try ServerConfiguration.load(json: Data(json.utf8), relativeTo: "/etc/browser-login").databasePath
        }
        #expect(try database("postgresql://login@db.internal/login") == "postgresql://login@db.internal/login")
        #expect(try database("postgres://login@/login?host=/run/postgresql") == "postgres://login@/login?host=/run/postgresql")
        #expect(try database("state/server.sqlite") == "/etc/browser-login/state/server.sqlite")
    }
}
