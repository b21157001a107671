// `browser-login-bench --server-stores`: the reference server's throughput
// on its two stores, measured in one run: attempt creates and exchanges per
// second with one instance on SQLite, and 1, 2 and 4 instances on one
// PostgreSQL database (a throw-away cluster, scripts/postgres). Needs no
// keyring: the broker is not involved.
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Dispatch
import Foundation
import ScriptedBrowser
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

enum ServerStores {
    static let client = "com.example.bench"
    static let returnURL = "com.example.bench:/callback"
    static let email = "bench+bltest@example.com"
    /// Requests in flight at once, spread round-robin over the instances.
    static let concurrency = 16

    static func run(binDirectory: String, quick: Bool) throws -> Int32 {
        let directory = try TemporaryDirectory("bench-stores")
        let config = directory.path + "/server.json"
        let limit = #"{"burst": 100000000, "perMinute": 100000000}"#
        let text = """
            {"clients": [{"clientId": "\(client)", "appName": "Bench", "returnUrls": ["\(returnURL)"], "policy": "confirm"}],
             "testAccounts": ["bench@example.com"],
             "rateLimits": {"create": \(limit), "exchange": \(limit), "codeEntry": \(limit)}}
            """
        guard FileManager.default.createFile(atPath: config, contents: Data(text.utf8)) else {
            throw BenchError("cannot write \(config)")
        }
        let secret = Base64URL.encode(try Crypto.randomBytes(32))
        let seconds = quick ? 1.0 : 3.0
        let exchanges = quick ? 200 : 800
        let setup = Setup(
            binary: binDirectory + "/browser-login-server", config: config, directory: directory.path, secret: secret,
            seconds: seconds, exchanges: exchanges)

        var results: [(label: String, Rates)] = []
        results.append(("SQLite, 1 instance", try measure(setup, database: directory.path + "/server.sqlite", instances: 1)))
        if let reason = PostgresCluster.unavailableReason {
            log("PostgreSQL figures skipped: \(reason)")
        } else {
            let cluster = try PostgresCluster()
            defer { cluster.stop() }
            for n in [1, 2, 4] {
                let url = try cluster.createDatabase()
                results.append(("PostgreSQL, \(n) instance\(n == 1 ? "" : "s")", try measure(setup, database: url, instances: n)))
            }
        }
        let sqlite = results[0].1
        for (label, rates) in results {
            record(
                Row(
                    figure: "server creates, \(label)", value: perSecond(rates.creates),
                    baseline: label.hasPrefix("SQLite") ? "-" : perSecond(sqlite.creates) + " (SQLite)",
                    ratio: label.hasPrefix("SQLite") ? "-" : String(format: "%.2f", rates.creates / sqlite.creates),
                    target: "-"))
            record(
                Row(
                    figure: "server exchanges, \(label)", value: perSecond(rates.exchanges),
                    baseline: label.hasPrefix("SQLite") ? "-" : perSecond(sqlite.exchanges) + " (SQLite)",
                    ratio: label.hasPrefix("SQLite") ? "-" : String(format: "%.2f", rates.exchanges / sqlite.exchanges),
                    target: "-"))
        }
        print("")
        print(
            "browser-login-bench --server-stores — \(quick ? "QUICK run (not for the record)" : "full run"), "
                + "\(concurrency) requests in flight, \(ProcessInfo.processInfo.activeProcessorCount) CPUs")
        Table.shared.print()
        return 0
    }

    struct Setup: Sendable {
        var binary: String
        var config: String
        var directory: String
        var secret: String
        var seconds: Double
        var exchanges: Int
    }

    struct Rates {
        var creates: Double
        var exchanges: Double
    }

    /// Starts `instances` servers on `database`, measures, stops them.
    static func measure(_ setup: Setup, database: String, instances: Int) throws -> Rates {
        var environment = ProcessInfo.processInfo.environment
        environment["BROWSER_LOGIN_SERVER_SECRET"] = setup.secret
        var servers: [SpawnedProcess] = []
        defer { servers.forEach { _ = $0.stop() } }
        var bases: [String] = []
        for i in 0..<instances {
            let ready = setup.directory + "/ready-\(UUID().uuidString)"
            servers.append(
                try SpawnedProcess(
                    [
                        setup.binary, "--config", setup.config, "--database", database, "--port", "0", "--ready-file", ready,
                        "--outbox", setup.directory + "/outbox",
                    ], environment: environment, log: setup.directory + "/server-\(i).log"))
            try waitUntil(30, "browser-login-server ready") { FileManager.default.fileExists(atPath: ready) }
            let url = try String(contentsOfFile: ready, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            bases.append(url + "/browser-login")
        }
        let all = bases
        let challenge = try ProofSecret.generate()
        let body = try JSONEncoder().encode(
            CreateAttemptRequest(
                clientId: client, returnUrl: returnURL, codeChallenge: challenge.challenge,
                recoveryChallenge: challenge.challenge))
        let createJSON = String(decoding: body, as: UTF8.self)

        // Creates: `concurrency` threads for `seconds`, round-robin over the instances.
        let end = nowNanos() + UInt64(setup.seconds * 1e9)
        let created = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
        let start = nowNanos()
        onThreads(concurrency) { t in
            var k = t
            while nowNanos() < end {
                let answer = try? RawHTTP.postJSON(all[k % all.count] + "/native/attempts", createJSON)
                if answer?.status == 201 {
                    created.add(1, ordering: .relaxed)
                } else {
                    failed.add(1, ordering: .relaxed)
                }
                k += 1
            }
        }
        let creates = Double(created.load(ordering: .relaxed)) / (Double(nowNanos() - start) / 1e9)
        guard failed.load(ordering: .relaxed) == 0 else { throw BenchError("\(failed.load(ordering: .relaxed)) creates failed") }

        // Exchanges: `exchanges` attempts authorized first (not timed), each
        // exchanged on another instance than the one that created it.
        let prepared = Mutex<[(attempt: String, code: String, verifier: String, instance: Int)]>([])
        onThreads(concurrency) { t in
            let mine = stride(from: t, to: setup.exchanges, by: concurrency)
            var browsers: [Int: ScriptedBrowser] = [:]
            for k in mine {
                let i = k % all.count
                guard let verifier = try? ProofSecret.generate(),
                    let body = try? JSONEncoder().encode(
                        CreateAttemptRequest(
                            clientId: client, returnUrl: returnURL, codeChallenge: verifier.challenge,
                            recoveryChallenge: verifier.challenge)),
                    let answer = try? RawHTTP.postJSON(all[i] + "/native/attempts", String(decoding: body, as: UTF8.self)),
                    let created = try? answer.decode(CreateAttemptResponse.self)
                else { continue }
                let origin = String(all[i].dropLast("/browser-login".count))
                if browsers[i] == nil { browsers[i] = try? ScriptedBrowser(serverOrigin: origin) }
                guard let browser = browsers[i],
                    let callback = try? browser.signInAndAuthorize(
                        authorizeURL: created.authorizeUrl, email: email, code: "000000"),
                    case .code(let code) = (try? Callback(parsing: callback))?.outcome
                else { continue }
                prepared.withLock { $0.append((created.attemptId, code, verifier.value, i)) }
            }
        }
        let work = prepared.withLock { $0 }
        guard work.count == setup.exchanges else {
            throw BenchError("only \(work.count) of \(setup.exchanges) attempts could be authorized")
        }
        let exchanged = Atomic<Int>(0)
        let exchangeStart = nowNanos()
        onThreads(concurrency) { t in
            for k in stride(from: t, to: work.count, by: concurrency) {
                let item = work[k]
                let base = all[(item.instance + 1) % all.count]
                let json = #"{"code":"\#(item.code)","codeVerifier":"\#(item.verifier)"}"#
                if (try? RawHTTP.postJSON(base + "/native/attempts/\(item.attempt)/exchange", json))?.status == 200 {
                    exchanged.add(1, ordering: .relaxed)
                }
            }
        }
        let exchangeRate = Double(work.count) / (Double(nowNanos() - exchangeStart) / 1e9)
        guard exchanged.load(ordering: .relaxed) == work.count else {
            throw BenchError("\(work.count - exchanged.load(ordering: .relaxed)) exchanges failed")
        }
        log(
            "\(instances) instance(s) on \(database.hasPrefix("postgres") ? "PostgreSQL" : "SQLite"): "
                + "\(Int(creates)) creates/s, \(Int(exchangeRate)) exchanges/s")
        return Rates(creates: creates, exchanges: exchangeRate)
    }
}
