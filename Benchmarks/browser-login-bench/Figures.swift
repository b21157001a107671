import BrokerBrowserLogin
import BrokerCore
import BrokerCurl
import BrokerHTTP
import BrokerRPC
import BrokerStore
import BrokerVault
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import SQLiteSupport
import ScriptedBrowser
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

enum Figures {
    // MARK: Cold start

    static func coldStart(world: World, reps: Int) throws {
        let state = world.dir + "/cold/state"
        let socket = world.dir + "/cold/broker.sock"
        var toReady: [Double] = []
        for rep in 0...reps {
            let (child, ns) = try world.spawnBroker(
                arguments: ["--socket", socket, "--state-dir", state], log: world.dir + "/cold.log")
            child.stop()
            if rep > 0 { toReady.append(Double(ns)) }  // the first run creates the database
        }
        let ready = median(toReady)
        record(Row(figure: "cold start: exec → READY=1", value: ms(ready), target: "≤ 50 ms", met: ready <= 50e6))

        // Socket activation: the listening socket is passed as fd 3 (LISTEN_FDS=1,
        // LISTEN_PID set by the shell that execs the broker); the client connects
        // at once and times spawn → first answer.
        let listenPath = world.dir + "/cold/activated.sock"
        let listening = try listenUnix(listenPath)
        let high = fcntl(listening, F_DUPFD_CLOEXEC, 50)
        close(listening)
        defer { close(high) }
        var env = world.environment()
        env["LISTEN_FDS"] = "1"
        env["LISTEN_FDNAMES"] = "rpc"
        let request = Array(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.get\",\"params\":{\"client\":\"\(world.clientIds[0])\"}}\n"
                .utf8)
        var toAnswer: [Double] = []
        for _ in 0..<reps {
            let start = nowNanos()
            let child = try SpawnedProcess(
                [
                    "/bin/sh", "-c", "LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" \"$@\"", world.brokerExecutable,
                    "--state-dir", state,
                ], environment: env, log: world.dir + "/cold.log", dup2: [(high, 3)])
            let c = try LineConnection(path: listenPath)
            try c.call(request, keepReply: true)
            toAnswer.append(Double(nowNanos() - start))
            guard String(decoding: c.lastReply, as: UTF8.self).contains("\"result\"") else {
                throw BenchError("socket-activated broker answered \(String(decoding: c.lastReply, as: UTF8.self))")
            }
            child.stop()
        }
        let answer = median(toAnswer)
        record(
            Row(
                figure: "socket activation: spawn → first session.get answer", value: ms(answer), target: "≤ 50 ms",
                met: answer <= 50e6))
    }

    // MARK: Server attempt creation

    static func attemptCreation(world: World, seconds: Double, reps: Int) async throws {
        let origin = try Origin(world.serverOrigin)
        guard let configuration = LoginServerConfiguration(origin: origin) else { throw BenchError("configuration") }
        let concurrency = 8
        let transport = CurlTransport(configuration: .init(maximumConcurrentTransfers: concurrency))
        let client = LoginServerClient(configuration: configuration, transport: transport)
        let challenge = try ProofSecret.generate().challenge
        let body = CreateAttemptRequest(
            clientId: world.clientIds[1], returnUrl: world.returnURL(world.clientIds[1]), codeChallenge: challenge,
            recoveryChallenge: challenge)
        func run(_ seconds: Double) async throws -> Double {
            let start = nowNanos()
            let end = start + UInt64(seconds * 1e9)
            let count = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        var n = 0
                        while nowNanos() < end {
                            _ = try await client.create(body)
                            n += 1
                        }
                        return n
                    }
                }
                return try await group.reduce(0, +)
            }
            return Double(count) / (Double(nowNanos() - start) / 1e9)
        }
        _ = try await run(0.5)
        var rates: [Double] = []
        for _ in 0..<reps { rates.append(try await run(seconds)) }
        let rate = median(rates)
        record(
            Row(
                figure: "server attempt creation (loopback, \(concurrency) in flight)", value: perSecond(rate),
                target: "≥ 2000/s", met: rate >= 2000))
    }

    // MARK: status with many attempts

    static func populate(path: String, attempts: Int, clients: [String], issuer: String) throws {
        // In the mode the broker makes its files (incremental auto-vacuum).
        let db = try Database(path: path, incrementalVacuum: true)
        _ = try db.migrate(BrokerStore.migrations)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let clientList = clients.map { "'\($0)'" }.joined(separator: ", ")
        // Newest first by n: a few live ones at the top, then a long history.
        // Mix: 3 waiting, 2 uncertain, then ~88% acknowledged, 9% completed
        // (not yet acknowledged), 2% expired, 1% denied.
        try db.execute(
            """
            CREATE TEMP TABLE bench_clients (i INTEGER PRIMARY KEY, id TEXT);
            INSERT INTO bench_clients (i, id) SELECT key, value FROM json_each('[\(clients.map { "\"\($0)\"" }.joined(separator: ","))]');
            BEGIN;
            WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < \(attempts))
            INSERT INTO attempts (id, client, state, server_attempt_id, return_url, issuer, created_at, updated_at,
                expires_at, error_code, error_message, receipt_issued_at, receipt_session_expires_at, resolution, follow_up)
            SELECT 'at_bench' || k,
                (SELECT id FROM bench_clients WHERE i = (k % \(clients.count))),
                CASE WHEN k <= 3 THEN 'waiting' WHEN k <= 5 THEN 'uncertain' WHEN k % 100 = 0 THEN 'denied'
                     WHEN k % 50 = 0 THEN 'expired' WHEN k % 11 = 0 THEN 'completed' ELSE 'acknowledged' END,
                'srv_bench' || k,
                (SELECT id FROM bench_clients WHERE i = (k % \(clients.count))) || ':/callback', '\(issuer)',
                \(now) - k * 60000, \(now) - k * 60000 + 20000,
                CASE WHEN k <= 3 THEN \(now) + 600000 ELSE \(now) - k * 60000 + 600000 END,
                CASE WHEN k % 100 = 0 THEN 'ACCESS_DENIED' WHEN k % 50 = 0 THEN 'ATTEMPT_EXPIRED'
                     WHEN k > 3 AND k <= 5 THEN 'EXCHANGE_UNCERTAIN' END,
                CASE WHEN k % 50 = 0 OR (k > 3 AND k <= 5) THEN 'bench' END,
                CASE WHEN k > 5 AND k % 50 != 0 THEN \(now) - k * 60000 + 20000 END,
                CASE WHEN k > 5 AND k % 50 != 0 THEN \(now) - k * 60000 + 86400000 END,
                'none', 'none'
            FROM n;
            INSERT INTO attempt_history (attempt_id, at, from_state, to_state)
                SELECT id, created_at, NULL, 'starting' FROM attempts;
            INSERT INTO attempt_history (attempt_id, at, from_state, to_state)
                SELECT id, updated_at, 'waiting', state FROM attempts WHERE state != 'waiting';
            COMMIT;
            """)
        _ = clientList
        try db.close()
    }

    static func status(world: World, attempts: Int, reps: Int) throws {
        let stateDir = world.dir + "/status/state"
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
        let t0 = nowNanos()
        try populate(
            path: stateDir + "/state.sqlite", attempts: attempts, clients: world.clientIds, issuer: world.serverOrigin)
        log("populated \(attempts) attempts in \(ms(Double(nowNanos() - t0)))")
        let path = stateDir + "/state.sqlite"
        let size = try fileSize(path)
        record(
            Row(
                figure: "state database size per 100k attempts (with history)",
                value: String(format: "%.1f MiB", Double(size) / Double(attempts) * 100_000 / 1_048_576),
                target: "(info)", met: nil))
        let socket = world.dir + "/status/broker.sock"
        // Pruning off: status is measured over every stored attempt.
        let (broker, _) = try world.spawnBroker(
            arguments: ["--socket", socket, "--state-dir", stateDir, "--retain-ended", "never"],
            log: world.dir + "/status.log")
        var brokerStopped = false
        defer { if !brokerStopped { broker.stop() } }
        func cli(_ args: [String]) throws -> Double {
            let start = nowNanos()
            let child = try SpawnedProcess(
                [world.binDirectory + "/browser-login", "--socket", socket] + args, environment: world.environment(),
                log: world.dir + "/status-cli.log")
            var status: Int32 = 0
            while waitpid(child.pid, &status, 0) < 0 && errno == EINTR {}
            let elapsed = Double(nowNanos() - start)
            // `session` of a client not signed in answers with exit status 1.
            guard status == 0 || (args.first == "session" && status == 1 << 8) else {
                throw BenchError("browser-login \(args) failed (\(status)); see status-cli.log")
            }
            return elapsed
        }
        var base: [Double] = []
        var plain: [Double] = []
        var all: [Double] = []
        for _ in 0..<2 {
            _ = try cli(["status"])
            _ = try cli(["session", world.clientIds[0], "--json"])
        }
        for _ in 0..<reps {
            base.append(try cli(["session", world.clientIds[0], "--json"]))
            plain.append(try cli(["status"]))
            all.append(try cli(["status", "--all"]))
        }
        let b = median(base)
        let p = median(plain)
        let a = median(all)
        record(
            Row(
                figure: "browser-login status, \(attempts) attempts", value: ms(p), baseline: ms(b) + " (CLI session --json)",
                ratio: String(format: "%.2f×", p / b), target: "≤ 100 ms", met: p <= 100e6))
        record(
            Row(
                figure: "browser-login status --all (newest 1000), \(attempts) attempts", value: ms(a),
                baseline: ms(b) + " (CLI session --json)", ratio: String(format: "%.2f×", a / b), target: "(info)", met: nil))
        broker.stop()
        brokerStopped = true
        try pruneFigure(path: path, attempts: attempts, before: size)
    }

    /// The broker's own pruning (`BrokerStore.prune`, in its batches, then
    /// `compact`) of everything older than the default 30 days, on the
    /// attempts just measured; the baseline is one batch's share of a plain
    /// SQLite `DELETE` of the same rows in one statement, on a copy.
    static func pruneFigure(path: String, attempts: Int, before: Int) throws {
        let copy = path + ".copy"
        try? FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let cutoff = Timestamp(millisecondsSince1970: Int64(Date().timeIntervalSince1970 * 1000) - 30 * 86_400_000)
        let plain = try Database(path: copy)
        let p0 = nowNanos()
        let plainDeleted = try plain.run(
            """
            DELETE FROM attempts WHERE state IN ('completed', 'cancelled', 'expired', 'denied', 'failed', 'acknowledged')
                AND created_at < ? AND updated_at < ? AND follow_up = 'none'
            """, cutoff.millisecondsSince1970, cutoff.millisecondsSince1970)
        let plainNanos = Double(nowNanos() - p0)
        try plain.close()
        try? FileManager.default.removeItem(atPath: copy)

        let store = try BrokerStore(path: path)
        var deleted = 0
        var batches = 0
        let t0 = nowNanos()
        while true {
            let n = try store.prune(endedBefore: cutoff, limit: BrokerStore.pruneBatch)
            deleted += n
            batches += 1
            if n > 0 { try store.compact(pages: 4 * BrokerStore.pruneBatch) }
            if n < BrokerStore.pruneBatch { break }
        }
        let nanos = Double(nowNanos() - t0)
        try store.checkpoint()
        try store.close()
        let after = try fileSize(path)
        guard deleted == plainDeleted else { throw BenchError("pruned \(deleted) attempts, a plain DELETE \(plainDeleted)") }
        let perBatch = nanos / Double(batches)
        record(
            Row(
                figure: "pruning \(deleted) attempts past 30 days (\(batches) batches of \(BrokerStore.pruneBatch))",
                value: ms(perBatch) + " per batch",
                baseline: ms(plainNanos * Double(BrokerStore.pruneBatch) / Double(max(1, deleted))) + " (plain DELETE)",
                ratio: String(format: "%.2f×", nanos / plainNanos), target: "(info: the engine pauses one batch)",
                met: nil))
        record(
            Row(
                figure: "state database after pruning (\(attempts - deleted) attempts kept)",
                value: String(format: "%.1f MiB", Double(after) / 1_048_576),
                baseline: String(format: "%.1f MiB before", Double(before) / 1_048_576), target: "(info)", met: nil))
    }

    static func fileSize(_ path: String) throws -> Int {
        guard let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int else {
            throw BenchError("cannot stat \(path)")
        }
        return size
    }

    // MARK: login.finish overhead

    /// login.finish round trips against a replica of what the broker cannot
    /// avoid: the same vault operations (look up the attempt's secrets, store
    /// the attempt with its session, store the session) and the server's
    /// exchange, done directly in this process with the broker's own vault and
    /// HTTP client. Interleaved, one at a time.
    static func finishOverhead(world: World, reps: Int) async throws {
        let client = world.clientIds[1]
        let rpc = try world.rpc()
        let origin = try Origin(world.serverOrigin)
        guard let configuration = LoginServerConfiguration(origin: origin) else { throw BenchError("configuration") }
        let server = LoginServerClient(configuration: configuration, transport: CurlTransport())
        let vault = SecretServiceVault()
        var finish: [Double] = []
        var replica: [Double] = []
        for rep in 0..<(reps + 3) {
            // The broker.
            let ns = try world.signIn(rpc, client: client, emailTag: 1)
            _ = try rpc.call("session.signOut", params: ["client": .string(client)])

            // The replica.
            let verifier = try ProofSecret.generate()
            let recovery = try ProofSecret.generate()
            let created = try await server.create(
                CreateAttemptRequest(
                    clientId: client, returnUrl: world.returnURL(client), codeChallenge: verifier.challenge,
                    recoveryChallenge: recovery.challenge))
            let attemptKeys = ["kind": "bench-attempt", "client": client, "attempt": created.attemptId]
            let sessionKeys = ["kind": "bench-session", "client": client]
            let secrets: [String: String] = [
                "codeVerifier": verifier.value, "recoveryKey": recovery.value, "authorizeUrl": created.authorizeUrl,
            ]
            try await vault.store(
                try JSONEncoder().encode(secrets).map { $0 }, label: "bench attempt", attributes: attemptKeys)
            let callbackURL = try ScriptedBrowser(serverOrigin: world.serverOrigin).signInAndAuthorize(
                authorizeURL: created.authorizeUrl, email: world.email(2), code: "000000")
            let callback = try Callback(parsing: callbackURL)
            guard case .code(let code) = callback.outcome else { throw BenchError("no code in the callback") }
            let start = nowNanos()
            guard let stored = try await vault.lookup(attributes: attemptKeys),
                let kept = try JSONDecoder().decode([String: String].self, from: Data(stored))["codeVerifier"]
            else { throw BenchError("vault lookup failed") }
            let answer = try await server.exchange(
                attemptId: created.attemptId, ExchangeRequest(code: code, codeVerifier: kept))
            let withSession = try JSONEncoder().encode(AttemptWithSession(secrets: secrets, session: answer.session))
            try await vault.store(withSession.map { $0 }, label: "bench attempt", attributes: attemptKeys)
            let session = try JSONEncoder().encode(answer.session)
            try await vault.store(session.map { $0 }, label: "bench session", attributes: sessionKeys)
            let replicaNs = nowNanos() - start
            try await vault.remove(attributes: attemptKeys)
            try await vault.remove(attributes: sessionKeys)
            _ = try? await server.revokeByToken(accessToken: answer.session.accessToken)
            if rep >= 3 {
                finish.append(Double(ns))
                replica.append(Double(replicaNs))
            }
        }
        let f = median(finish)
        let r = median(replica)
        record(
            Row(
                figure: "login.finish overhead beyond server + keyring", value: ms(f - r),
                baseline: ms(r) + " (server+keyring)", ratio: "finish " + ms(f), target: "≤ 5 ms", met: f - r <= 5e6))
    }

    struct AttemptWithSession: Encodable {
        var secrets: [String: String]
        var session: IssuedSession
    }

    // MARK: Memory

    static func memory(world: World, signIns: Int) throws {
        guard let broker = world.broker else { return }
        let before = broker.residentKiB ?? 0
        let clients = Array(world.clientIds.dropFirst())
        let done = Counter()
        let failures = Counter()
        let start = nowNanos()
        let finishTimes = Samples()
        onThreads(clients.count) { t in
            guard let rpc = try? world.rpc() else {
                failures.add(1)
                return
            }
            var mine = t
            while mine < signIns {
                do {
                    let ns = try world.signIn(rpc, client: clients[t], emailTag: 10 + t)
                    finishTimes.append(Double(ns))
                    _ = try rpc.call("session.signOut", params: ["client": .string(clients[t])])
                    done.add(1)
                } catch {
                    failures.add(1)
                    log("sign-in failed: \(error)")
                }
                mine += clients.count
            }
        }
        let seconds = Double(nowNanos() - start) / 1e9
        log(
            "\(done.current) sign-ins (\(failures.current) failed) in \(String(format: "%.1f", seconds)) s, \(clients.count) at once; login.finish p50 \(ms(percentile(finishTimes.all, 0.5)))"
        )
        if failures.current > 0 { throw BenchError("\(failures.current) sign-ins failed") }
        // The HTTP helper ran the sign-ins' requests: its size while alive, then idle means it has exited
        // (--http-idle, 10 s by default).
        let helpers = childProcesses(of: broker.pid).filter {
            ProcFS.executable(pid: $0)?.hasSuffix("/browser-login-http") == true
        }
        let helperKiB = helpers.compactMap { residentKiB($0) }.reduce(0, +)
        let helperDeadline = nowNanos() + 30_000_000_000
        while nowNanos() < helperDeadline, helpers.contains(where: { kill($0, 0) == 0 }) { usleep(100_000) }
        sleep(3)
        let idle = broker.residentKiB ?? 0
        let idleAnonymous = broker.anonymousKiB ?? 0
        let mappings = residentByMapping(broker.pid)
        log(
            "idle RSS by mapping (KiB): "
                + mappings.prefix(16).map { "\($0.name) \($0.kib)" }.joined(separator: ", ")
                + ", \(max(0, mappings.count - 16)) more \(mappings.dropFirst(16).reduce(0) { $0 + $1.kib })")
        // 10,000 more calls, mixed, twice: the first batch is also the first use of
        // login.list and clients.list (SQLite's page cache fills with the attempts
        // read); the second shows whether the same calls keep growing the broker.
        let rpc = try world.rpc()
        let hot = world.clientIds[0]
        func mixedCalls() throws {
            for i in 0..<10_000 {
                switch i % 10 {
                case 0: _ = try rpc.call("broker.info")
                case 1: _ = try rpc.call("login.list", params: ["client": .string(clients[i % clients.count])])
                case 2: _ = try rpc.call("clients.list")
                default: _ = try rpc.call("session.get", params: ["client": .string(hot)])
                }
            }
            sleep(3)
        }
        try mixedCalls()
        let first = broker.residentKiB ?? 0
        let firstAnonymous = broker.anonymousKiB ?? 0
        try mixedCalls()
        let after = broker.residentKiB ?? 0
        let afterAnonymous = broker.anonymousKiB ?? 0
        record(
            Row(
                figure: "idle RSS after \(done.current) sign-ins", value: mib(idle), baseline: mib(before) + " (before)",
                ratio: String(format: "%.2f×", Double(idle) / Double(max(1, before))), target: "≤ 16 MiB",
                met: idle <= 16 * 1024))
        record(
            Row(
                figure: "  of which anonymous (heap, stacks)", value: mib(idleAnonymous),
                baseline: mib(idle - idleAnonymous) + " mapped files", target: "(info)", met: nil))
        record(
            Row(
                figure: "  HTTP helper while it ran (exits when idle)", value: mib(helperKiB),
                baseline: "\(helpers.count) process", target: "(info)", met: nil))
        record(
            Row(
                figure: "RSS growth over 10000 more calls", value: String(format: "%+.0f KiB", Double(first - idle)),
                baseline: mib(idle), ratio: String(format: "anon %+d KiB", firstAnonymous - idleAnonymous),
                target: "(info: first use)", met: nil))
        record(
            Row(
                figure: "RSS growth over the next 10000", value: String(format: "%+.0f KiB", Double(after - first)),
                baseline: mib(first), ratio: String(format: "anon %+d KiB", afterAnonymous - firstAnonymous),
                target: "no growth (≤ 256 KiB)", met: after - first <= 256))
    }
}
