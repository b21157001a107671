// The reference server under load (issue 19): attempt creates and exchanges
// per second with 64 clients at once, and their p99, next to a minimal
// libmicrohttpd handler measured in the same run with the same client. The
// handler answers a fixed body with the threading the server had when issue
// 33 set the target (one internal polling thread, one thread per connection,
// `bl_mhd_start`): what the HTTP layer costs, without routes, JSON, HMAC or
// SQLite. It stays so, to keep the ratio comparable across rounds; the server
// itself has used libmicrohttpd's epoll thread pool and handler threads since
// round 15 (`bl_mhd_start_pool`, docs/performance.md).
import BrowserLoginProtocol
import BrowserLoginTestSupport
import CMicroHTTPD
import Dispatch
import Foundation
import ScriptedBrowser
import Synchronization

/// The fixed answers of the minimal handler, reached through its `cls`.
private final class FixedAnswers: Sendable {
    let created = Array(
        #"{"attemptId":"at_baseline","authorizeUrl":"http://127.0.0.1/x","expiresAt":"2026-01-01T00:00:00.000Z"}"#.utf8)
    let exchanged = Array(#"{"accessToken":"baseline","refreshToken":"baseline","expiresIn":900}"#.utf8)
}

/// A libmicrohttpd daemon whose handler reads the body and answers a fixed
/// JSON: 200 for a path ending in `/exchange`, else 201.
final class MinimalHTTPServer: Sendable {
    private let daemon: Int
    let port: Int
    private let answers: Unmanaged<FixedAnswers>

    init() throws {
        let answers = Unmanaged.passRetained(FixedAnswers())
        var error: Int32 = 0
        let handler: bl_mhd_access_handler = { cls, connection, url, _, _, _, uploadDataSize, requestContext in
            guard let cls, let connection, let requestContext, let uploadDataSize else { return .NO }
            if requestContext.pointee == nil {
                requestContext.pointee = UnsafeMutableRawPointer(bitPattern: 1)
                return .YES
            }
            if uploadDataSize.pointee > 0 {
                uploadDataSize.pointee = 0
                return .YES
            }
            let answers = Unmanaged<FixedAnswers>.fromOpaque(cls).takeUnretainedValue()
            let exchange = url.map { String(cString: $0).hasSuffix("/exchange") } ?? false
            let body = exchange ? answers.exchanged : answers.created
            return body.withUnsafeBytes { bytes in
                let response = MHD_create_response_from_buffer(
                    bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
                defer { MHD_destroy_response(response) }
                MHD_add_response_header(response, "Content-Type", "application/json")
                return MHD_queue_response(connection, exchange ? 200 : 201, response)
            }
        }
        guard
            let started = bl_mhd_start(
                "127.0.0.1", 0, nil, nil, 256, 30, handler, answers.toOpaque(), nil, nil, &error)
        else {
            answers.release()
            throw BenchError("the minimal libmicrohttpd server did not start (\(error))")
        }
        daemon = Int(bitPattern: started)
        port = Int(bl_mhd_bound_port(started))
        self.answers = answers
    }

    func stop() {
        MHD_stop_daemon(OpaquePointer(bitPattern: daemon))
        answers.release()
    }
}

enum ServerLoad {
    static let clients = 64

    /// Requests per second and the 99th percentile of their latency (ns).
    struct Load {
        var rate: Double
        var p99: Double
        var failed: Int
        /// The requests answered (or failed).
        var requests = 0
        /// The server's CPU time (user + system) per request, when it is a process of its own.
        var cpuPerRequest: Double? = nil
    }

    /// `request(thread, k)` from `clients` threads at once, each as fast as it
    /// gets answers, for `seconds` (or until `limit` requests in all).
    static func load(
        seconds: Double, limit: Int = .max, _ request: @escaping @Sendable (Int, Int) -> Bool
    ) -> Load {
        let latencies = Mutex<[Double]>([])
        let failed = Atomic<Int>(0)
        let next = Atomic<Int>(0)
        let start = nowNanos()
        let end = start + UInt64(seconds * 1e9)
        onThreads(clients) { t in
            var mine: [Double] = []
            while nowNanos() < end {
                let k = next.add(1, ordering: .relaxed).oldValue
                if k >= limit { break }
                let t0 = nowNanos()
                if !request(t, k) { failed.add(1, ordering: .relaxed) }
                mine.append(Double(nowNanos() - t0))
            }
            latencies.withLock { $0.append(contentsOf: mine) }
        }
        let elapsed = Double(nowNanos() - start) / 1e9
        let all = latencies.withLock { $0 }.sorted()
        let p99 = all.isEmpty ? 0 : all[min(all.count - 1, Int(Double(all.count) * 0.99))]
        return Load(
            rate: Double(all.count) / elapsed, p99: p99, failed: failed.load(ordering: .relaxed), requests: all.count)
    }

    /// The exchanges of one load, each of an attempt of its own. 2,000 (640
    /// until round 17): at 5,000–9,000 exchanges a second, 640 lasted about a
    /// tenth of a second, no longer than the servers' threads take to start,
    /// so the figure was mostly the first burst's.
    static func exchangeCount(quick: Bool) -> Int { quick ? 256 : 2000 }

    /// Loads of each kind per server (and per run of the minimal handler); the
    /// figure is their median. One load of 2,000 exchanges lasts under half a
    /// second, and its rate moved by ±15 % between runs of the same binaries
    /// (round 20): three, each on attempts of its own, and three creates loads
    /// of a third of the time each.
    static func repetitions(quick: Bool) -> Int { quick ? 1 : 3 }

    /// The median rate, p99 and server CPU per request of `loads`.
    static func median(_ loads: [Load]) -> Load {
        func middle(_ values: [Double]) -> Double? { values.isEmpty ? nil : values.sorted()[values.count / 2] }
        return Load(
            rate: middle(loads.map(\.rate)) ?? 0, p99: middle(loads.map(\.p99)) ?? 0,
            failed: loads.reduce(0) { $0 + $1.failed }, requests: loads.reduce(0) { $0 + $1.requests },
            cpuPerRequest: middle(loads.compactMap(\.cpuPerRequest)))
    }

    /// `run`'s load, with `server`'s CPU time per request over it (`/proc/PID/stat`, 10 ms ticks).
    static func measuringCPU(of server: SpawnedProcess, _ run: () throws -> Load) rethrows -> Load {
        let before = server.cpuSeconds
        var load = try run()
        load.cpuPerRequest = (server.cpuSeconds - before) / Double(max(1, load.requests))
        return load
    }

    /// Creates and exchanges against one server (`origin`), 64 clients at once.
    static func serverLoads(world: World, server: SpawnedProcess, origin: String, quick: Bool) throws -> (
        creates: Load, exchanges: Load
    ) {
        let seconds = quick ? 1.0 : 3.0
        let base = origin + "/browser-login"
        let client = world.clientIds[0]
        let verifier = try ProofSecret.generate()
        let createJSON = String(
            decoding: try JSONEncoder().encode(
                CreateAttemptRequest(
                    clientId: client, returnUrl: world.returnURL(client), codeChallenge: verifier.challenge,
                    recoveryChallenge: verifier.challenge)), as: UTF8.self)
        _ = load(seconds: seconds / 3) { _, _ in
            (try? RawHTTP.postJSON(base + "/native/attempts", createJSON))?.status == 201
        }
        let repetitions = repetitions(quick: quick)
        let creates = median(
            (0..<repetitions).map { _ in
                measuringCPU(of: server) {
                    load(seconds: seconds / Double(repetitions)) { _, _ in
                        (try? RawHTTP.postJSON(base + "/native/attempts", createJSON))?.status == 201
                    }
                }
            })
        guard creates.failed == 0 else { throw BenchError("\(creates.failed) creates failed under load") }
        var exchanges: [Load] = []
        for _ in 0..<repetitions {
            let work = try authorized(world: world, origin: origin, count: exchangeCount(quick: quick))
            let run = measuringCPU(of: server) {
                load(seconds: 120, limit: work.count) { _, k in
                    let item = work[k]
                    let json = #"{"code":"\#(item.code)","codeVerifier":"\#(item.verifier)"}"#
                    return (try? RawHTTP.postJSON(base + "/native/attempts/\(item.attempt)/exchange", json))?.status
                        == 200
                }
            }
            guard run.failed == 0 else { throw BenchError("\(run.failed) exchanges failed under load") }
            exchanges.append(run)
        }
        return (creates, median(exchanges))
    }

    /// `count` attempts created and authorized on `origin` (not timed), ready to be exchanged once each.
    static func authorized(world: World, origin: String, count: Int) throws -> [(
        attempt: String, code: String, verifier: String
    )] {
        let prepared = Mutex<[(attempt: String, code: String, verifier: String)]>([])
        let base = origin + "/browser-login"
        let client = world.clientIds[0]
        let returnURL = world.returnURL(client)
        onThreads(8) { t in
            let email = world.email(900 + t)
            guard var browser = try? ScriptedBrowser(serverOrigin: origin) else { return }
            for (n, _) in stride(from: t, to: count, by: 8).enumerated() {
                // A fresh browser every 50 sign-ins: each attempt leaves a cookie binding it to the
                // browser, and a jar of about a hundred of them no longer fits the page's request.
                if n % 50 == 49, let fresh = try? ScriptedBrowser(serverOrigin: origin) { browser = fresh }
                guard let proof = try? ProofSecret.generate(),
                    let body = try? JSONEncoder().encode(
                        CreateAttemptRequest(
                            clientId: client, returnUrl: returnURL, codeChallenge: proof.challenge,
                            recoveryChallenge: proof.challenge)),
                    let answer = try? RawHTTP.postJSON(base + "/native/attempts", String(decoding: body, as: UTF8.self)),
                    let created = try? answer.decode(CreateAttemptResponse.self),
                    let callback = try? browser.signInAndAuthorize(
                        authorizeURL: created.authorizeUrl, email: email, code: "000000"),
                    case .code(let code) = (try? Callback(parsing: callback))?.outcome
                else { continue }
                prepared.withLock { $0.append((created.attemptId, code, proof.value)) }
            }
        }
        let work = prepared.withLock { $0 }
        guard work.count == count else { throw BenchError("only \(work.count) of \(count) attempts could be authorized") }
        return work
    }

    /// The same figures from the minimal handler: creates for `seconds` (in `repetitions` loads), then
    /// `repetitions` loads of `count` exchanges; the medians.
    static func minimalLoads(seconds: Double, count: Int, repetitions: Int) throws -> (creates: Load, exchanges: Load) {
        let minimal = try MinimalHTTPServer()
        defer { minimal.stop() }
        let base = "http://127.0.0.1:\(minimal.port)/browser-login"
        let createJSON = #"{"clientId":"com.example.bench"}"#
        _ = load(seconds: seconds / 3) { _, _ in
            (try? RawHTTP.postJSON(base + "/native/attempts", createJSON))?.status == 201
        }
        let creates = median(
            (0..<repetitions).map { _ in
                load(seconds: seconds / Double(repetitions)) { _, _ in
                    (try? RawHTTP.postJSON(base + "/native/attempts", createJSON))?.status == 201
                }
            })
        let json = #"{"code":"cd_0123456789abcdef0123456789abcdef","codeVerifier":"0123456789abcdef0123456789abcdef0123456789a"}"#
        let exchanges = median(
            (0..<repetitions).map { _ in
                load(seconds: 120, limit: count) { _, k in
                    (try? RawHTTP.postJSON(base + "/native/attempts/at_\(k)/exchange", json))?.status == 200
                }
            })
        return (creates, exchanges)
    }

    /// A second reference server with the world's configuration on a throw-away
    /// PostgreSQL database (scripts/postgres); nil, saying why, where PostgreSQL is not installed.
    static func postgresServer(world: World) throws -> (server: SpawnedProcess, origin: String, cluster: PostgresCluster)? {
        if let reason = PostgresCluster.unavailableReason {
            log("server on PostgreSQL skipped: \(reason)")
            return nil
        }
        let cluster = try PostgresCluster()
        let url = try cluster.createDatabase()
        var environment = ProcessInfo.processInfo.environment
        environment["BROWSER_LOGIN_SERVER_SECRET"] = Base64URL.encode(try Crypto.randomBytes(32))
        let ready = world.dir + "/server/ready-pg"
        let server = try SpawnedProcess(
            [
                world.binDirectory + "/browser-login-server", "serve", "--config", world.dir + "/server/server.json",
                "--listen", "127.0.0.1", "--port", "0", "--database", url, "--outbox", world.dir + "/server/outbox-pg",
                "--ready-file", ready, "--lifetime-ms", "300000",
            ], environment: environment, log: world.dir + "/server-pg.log")
        try waitUntil(30, "the reference server on PostgreSQL", interval: 0.01) {
            FileManager.default.fileExists(atPath: ready)
        }
        usleep(20_000)
        let origin = try String(contentsOfFile: ready, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        return (server, origin, cluster)
    }

    static func figures(world: World, quick: Bool) throws {
        let seconds = quick ? 1.0 : 3.0
        // The minimal handler first and last, the server in between: the baseline is the mean of both.
        let minimalBefore = try minimalLoads(
            seconds: seconds, count: exchangeCount(quick: quick), repetitions: repetitions(quick: quick))
        guard let server = world.server else { throw BenchError("the reference server is not running") }
        let sqlite = try serverLoads(world: world, server: server, origin: world.serverOrigin, quick: quick)
        var postgres: (creates: Load, exchanges: Load)?
        if let pg = try postgresServer(world: world) {
            defer {
                pg.server.stop()
                pg.cluster.stop()
            }
            postgres = try serverLoads(world: world, server: pg.server, origin: pg.origin, quick: quick)
        }
        let minimalAfter = try minimalLoads(
            seconds: seconds, count: exchangeCount(quick: quick), repetitions: repetitions(quick: quick))
        func mean(_ a: Load, _ b: Load) -> Load {
            Load(rate: (a.rate + b.rate) / 2, p99: (a.p99 + b.p99) / 2, failed: a.failed + b.failed)
        }
        let minimal = (
            creates: mean(minimalBefore.creates, minimalAfter.creates),
            exchanges: mean(minimalBefore.exchanges, minimalAfter.exchanges)
        )
        for (store, loads) in [("SQLite", sqlite), ("PostgreSQL", postgres)] {
            guard let loads else { continue }
            let judged = store == "SQLite"
            for (name, server, baseline) in [
                ("creates", loads.creates, minimal.creates), ("exchanges", loads.exchanges, minimal.exchanges),
            ] {
                let ratio = server.rate / baseline.rate
                record(
                    Row(
                        figure: "server \(name), \(clients) clients (\(store))", value: perSecond(server.rate),
                        baseline: perSecond(baseline.rate) + " (minimal MHD)", ratio: String(format: "%.2f×", ratio),
                        target: judged ? "≥ 0.8× minimal MHD" : "(info)", met: judged ? ratio >= 0.8 : nil))
                let exchange = name == "exchanges"
                record(
                    Row(
                        figure: "  p99 of one \(exchange ? "exchange" : "create") (\(store))", value: ms(server.p99),
                        baseline: ms(baseline.p99) + " (minimal MHD)",
                        ratio: String(format: "%.2f×", server.p99 / baseline.p99),
                        target: judged && exchange ? "≤ 25 ms" : "(info)", met: judged && exchange ? server.p99 <= 25e6 : nil))
                if let cpu = server.cpuPerRequest {
                    record(
                        Row(
                            figure: "  server CPU per \(exchange ? "exchange" : "create") (\(store))", value: us(cpu * 1e9),
                            baseline: "-", ratio: "-", target: "(info)", met: nil))
                }
            }
        }
    }
}
