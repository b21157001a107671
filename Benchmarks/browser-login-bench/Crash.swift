import BrokerRPC
import BrowserLoginTestSupport
import Foundation
import SQLiteSupport
import ScriptedBrowser
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The crash-point stress run (docs/reliability.md): kills the real daemon
/// with SIGKILL at each durability point of docs/protocol.md §7, restarts it
/// against the real server, and checks after every round, from the server's
/// own records and the vault, that nothing was exchanged twice, no session
/// was lost, nothing is left unsettled, no vault item is orphaned and the
/// state file is intact. Needs debug binaries (the fault points are compiled
/// into debug builds only).
enum Crash {
    /// The daemon is killed at these points, in order, one per start; then it
    /// starts without a fault and settles.
    struct Plan: Sendable {
        var name: String
        var faults: [String]
        /// The highest occurrence to pick at random (`POINT@N`, N in 1...spread).
        var spread: Int = 1
    }

    static let plans: [Plan] = [
        Plan(name: "create answered", faults: ["answer:create"]),
        Plan(name: "after a vault write", faults: ["vault:store"], spread: 6),
        Plan(name: "after the waiting commit", faults: ["commit:waiting"]),
        Plan(name: "after the exchanging commit", faults: ["commit:exchanging"]),
        Plan(name: "exchange sent, answer lost", faults: ["answer:exchange"]),
        Plan(name: "session in the vault, not committed", faults: ["after-session-in-vault"]),
        Plan(name: "after the completed commit", faults: ["commit:completed"]),
        Plan(name: "acknowledge sent, answer lost", faults: ["answer:acknowledge"]),
        Plan(name: "mid-refresh (answer lost)", faults: ["answer:refresh"]),
        Plan(name: "mid-sign-out (before the revoke)", faults: ["before-signout-revoke"]),
        Plan(name: "mid-sign-out (revoke answer lost)", faults: ["answer:revoke-token"]),
        Plan(name: "mid-reconcile (status)", faults: ["answer:exchange", "answer:status"]),
        Plan(name: "mid-reconcile (revoke by proof)", faults: ["answer:exchange", "answer:revoke-proof"]),
        Plan(name: "mid-reconcile (settled)", faults: ["answer:exchange", "after-reconcile-settled"]),
    ]

    struct Tally: Sendable {
        var rounds = 0
        var kills = 0
        var failed = 0
    }

    static func run(binDirectory: String, rounds: Int, only: String?, workers: Int) -> Int32 {
        let chosen = plans.filter { plan in only.map { plan.name.contains($0) || plan.faults.joined().contains($0) } ?? true }
        let started = nowNanos()
        let tallies = Mutex<[String: Tally]>([:])
        let setupFailed = Counter()
        // Independent worlds (server, state, client id) side by side: a round
        // mostly waits for processes, so two of them share two cores well.
        onThreads(workers) { worker in
            let letters = Array("pqrstuvw")
            let world: World
            do {
                world = try World(
                    binDirectory: binDirectory, clientCount: 1,
                    clientPrefix: "com.example.crash\(letters[worker % letters.count])")
                world.serverExtraArguments = ["--access-token-lifetime-ms", "10000"]
                try world.startServer()
            } catch {
                print("browser-login-bench --crash: cannot set up: \(error)")
                setupFailed.add(1)
                return
            }
            defer { world.stopAll() }
            let client = world.clientIds[0]
            // Items of earlier runs in the same keyring are not this run's to judge.
            world.foreignItems = Set(vaultAttributes().compactMap { $0["attempt"] })
            var emailTag = worker * 1_000_000
            for plan in chosen {
                var tally = Tally()
                for round in stride(from: worker, to: rounds, by: workers) {
                    emailTag += 1
                    let failures = Crash.round(world, client: client, plan: plan, emailTag: emailTag, tally: &tally)
                    tally.rounds += 1
                    if !failures.isEmpty {
                        tally.failed += 1
                        print("  ✘ \(plan.name), round \(round + 1): \(failures.joined(separator: "; "))")
                    }
                }
                tallies.withLock {
                    var total = $0[plan.name] ?? Tally()
                    total.rounds += tally.rounds
                    total.kills += tally.kills
                    total.failed += tally.failed
                    $0[plan.name] = total
                }
            }
        }
        let seconds = Double(nowNanos() - started) / 1e9
        let results = tallies.withLock { t in chosen.map { ($0, t[$0.name] ?? Tally()) } }
        print("")
        print("| crash point | rounds | kills | failed |")
        print("|---|---|---|---|")
        for (plan, tally) in results {
            print(
                "| \(plan.name) (`\(plan.faults.joined(separator: "` then `"))`) | \(tally.rounds) | \(tally.kills) | \(tally.failed) |"
            )
        }
        let failed = results.map { $0.1.failed }.reduce(0, +) + setupFailed.current
        let passed = results.map { $0.1.rounds - $0.1.failed }.reduce(0, +)
        print(String(format: "crash points: %.0f s with %d workers", seconds, workers))
        print("\(passed) passed, \(failed) failed")
        return failed == 0 ? 0 : 1
    }

    /// One round: armed starts (each ends in a kill or runs the workload to its
    /// end), then an unarmed start that settles, then the invariants.
    static func round(_ world: World, client: String, plan: Plan, emailTag: Int, tally: inout Tally) -> [String] {
        var specs: [String] = []
        for (stage, fault) in plan.faults.enumerated() {
            var spec = fault
            if plan.spread > 1 { spec += "@\(Int.random(in: 1...plan.spread))" }
            if let forced = ProcessInfo.processInfo.environment["BENCH_FAULT"], stage == 0 { spec = forced }
            specs.append(spec)
            world.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = spec
            guard
                let broker = try? world.spawnBroker(arguments: ["--socket", world.socketPath], log: world.dir + "/broker.log").0
            else {
                // Killed before it was ready (a point on the start-up path): that is a kill too.
                tally.kills += 1
                continue
            }
            if stage == 0 {
                // Randomised timing: the workload starts after a random pause.
                usleep(UInt32.random(in: 0...20_000))
                workload(world, client: client, emailTag: emailTag, until: broker)
            } else {
                // A later stage: the start-up reconciliation is the workload.
                _ = try? waitUntil(5, "the kill", interval: 0.005) { !broker.isAlive }
            }
            if broker.isAlive {
                broker.stop()
            } else {
                tally.kills += 1
                broker.reap()
            }
        }
        world.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = nil
        guard let (broker, _) = try? world.spawnBroker(arguments: ["--socket", world.socketPath], log: world.dir + "/broker.log")
        else { return ["the broker did not start after the crash"] }
        defer { broker.stop() }
        var failures = settle(world, client: client)
        failures += check(world, client: client)
        if !failures.isEmpty { failures.append("(faults: \(specs.joined(separator: ", ")))") }
        // Back to signed out for the next round.
        if let rpc = try? world.rpc() {
            _ = try? rpc.call("session.signOut", params: ["client": .string(client)])
            failures += settle(world, client: client)
        }
        return failures
    }

    /// Sign in (with the in-flight exchange), one API call (which refreshes
    /// the short-lived access token), sign out — until the daemon dies.
    static func workload(_ world: World, client: String, emailTag: Int, until broker: SpawnedProcess) {
        guard let rpc = try? RPCClient(socketPath: world.socketPath, timeout: .seconds(20)) else { return }
        let current = try? rpc.call("session.get", params: ["client": .string(client)])
        if current?["status"]?.stringValue != "signedIn" {
            guard let attempt = try? rpc.call("login.start", params: ["client": .string(client), "openBrowser": false]),
                let url = attempt["authorizeUrl"]?.stringValue,
                let callback = try? ScriptedBrowser(serverOrigin: world.serverOrigin).signInAndAuthorize(
                    authorizeURL: url, email: world.email(emailTag), code: "000000")
            else { return }
            guard (try? rpc.call("login.finish", params: ["url": .string(callback)])) != nil else { return }
        }
        usleep(UInt32.random(in: 0...20_000))
        guard
            (try? rpc.call(
                "http.request", params: ["client": .string(client), "method": "GET", "path": "/api/me"])) != nil
        else { return }
        usleep(UInt32.random(in: 0...20_000))
        _ = try? rpc.call("session.signOut", params: ["client": .string(client)])
        // Give background follow-ups (acknowledge, the owed revoke) a moment to reach their points.
        _ = try? waitUntil(0.3, "a kill", interval: 0.005) { !broker.isAlive }
    }

    /// Waits until nothing is left to do: no attempt starting, exchanging or
    /// uncertain, no server follow-up, no owed revoke; cancels waiting attempts.
    static func settle(_ world: World, client: String) -> [String] {
        let deadline = nowNanos() + 20_000_000_000
        var cancelled = false
        while nowNanos() < deadline {
            guard let db = try? Database(path: world.dir + "/state/browser-login/state.sqlite"),
                let pending = try? db.queryOne(
                    """
                    SELECT
                      (SELECT COUNT(*) FROM attempts WHERE state IN ('starting', 'exchanging', 'uncertain')
                         OR follow_up != 'none') AS work,
                      (SELECT COUNT(*) FROM sessions WHERE revoke_pending != 0) AS revokes
                    """)
            else {
                usleep(20_000)
                continue
            }
            if !cancelled, let rpc = try? world.rpc(),
                let waiting = try? rpc.call("login.list", params: ["client": .string(client), "states": ["waiting"]]),
                case .array(let list) = waiting
            {
                for attempt in list {
                    if let id = attempt["attemptId"] { _ = try? rpc.call("login.cancel", params: ["attemptId": id]) }
                }
                cancelled = true
                continue
            }
            if pending.int("work") == 0 && pending.int("revokes") == 0 { return [] }
            usleep(20_000)
        }
        return ["not settled within 20 s (attempts still exchanging, uncertain or owing server work)"]
    }

    /// The invariants, from the server's records, the broker's state and the vault.
    static func check(_ world: World, client: String) -> [String] {
        var failures: [String] = []
        let serverLog = (try? String(contentsOfFile: world.dir + "/server.log", encoding: .utf8)) ?? ""
        let replays = serverLog.components(separatedBy: "replayed exchange").count - 1
        let reuses = serverLog.components(separatedBy: "refresh token reused").count - 1
        if replays > world.seenReplays { failures.append("a second exchange reached the server") }
        if reuses > world.seenReuses { failures.append("a refresh token was used twice (session revoked)") }
        world.seenReplays = replays
        world.seenReuses = reuses

        guard let rpc = try? world.rpc(), let session = try? rpc.call("session.get", params: ["client": .string(client)])
        else { return failures + ["the broker does not answer"] }
        let live =
            (try? Database(path: world.dir + "/server/server.sqlite").query(
                "SELECT id FROM sessions WHERE revoked_at IS NULL AND expires_at > ?",
                Int64(Date().timeIntervalSince1970 * 1000)
            ).compactMap { $0.string("id") }) ?? []
        var vaultItems = vaultAttributes()
        var held = vaultItems.filter { $0["kind"] == "session" && $0["client"] == client }
        for _ in 0..<3 where held.count != 1 {
            // secret-tool's listing can miss items that other workers change meanwhile: look again.
            usleep(100_000)
            vaultItems = vaultAttributes()
            held = vaultItems.filter { $0["kind"] == "session" && $0["client"] == client }
        }
        if session["status"]?.stringValue == "signedIn" {
            if live.count != 1 { failures.append("signed in, but the server has \(live.count) live sessions") }
            if held.count != 1 { failures.append("signed in, but the vault holds \(held.count) session items") }
        } else if !live.isEmpty {
            failures.append("a session the server issued is neither adopted nor revoked")
        }

        guard let db = try? Database(path: world.dir + "/state/browser-login/state.sqlite") else {
            return failures + ["cannot open the broker's state file"]
        }
        if let integrity = try? db.queryOne("PRAGMA integrity_check"), integrity.string("integrity_check") != "ok" {
            failures.append("integrity_check: \(integrity.string("integrity_check") ?? "?")")
        }
        let unsettled =
            (try? db.queryOne(
                "SELECT COUNT(*) AS n FROM attempts WHERE state IN ('starting', 'exchanging', 'uncertain')"))?.int("n") ?? -1
        if unsettled != 0 { failures.append("\(unsettled) attempts left unsettled") }
        // Every attempt item belongs to an attempt that still needs its proofs.
        let needing = Set(
            ((try? db.query(
                "SELECT id FROM attempts WHERE state IN ('waiting', 'exchanging', 'uncertain') OR follow_up != 'none'"))
                ?? []).compactMap { $0.string("id") })
        let orphans = vaultItems.filter {
            $0["kind"] == "attempt" && $0["client"] == client && !needing.contains($0["attempt"] ?? "")
                && !world.foreignItems.contains($0["attempt"] ?? "")
        }
        if !orphans.isEmpty { failures.append("\(orphans.count) orphaned attempt items in the vault") }
        let owed = ((try? db.queryOne("SELECT COUNT(*) AS n FROM sessions WHERE revoke_pending != 0"))?.int("n")) ?? 0
        let revokeItems = vaultItems.filter { $0["kind"] == "revoke" && $0["client"] == client }.count
        if revokeItems > owed { failures.append("\(revokeItems - Int(owed)) orphaned revoke items in the vault") }
        return failures
    }

    /// The attributes of every broker item in the keyring (`secret-tool search --all`).
    static func vaultAttributes() -> [[String: String]] {
        let out = runCapturing(["/usr/bin/secret-tool", "search", "--all", "xdg:schema", "org.browserlogin.Broker"])
        var items: [[String: String]] = []
        var current: [String: String]?
        for line in out.split(separator: "\n") {
            if line.hasPrefix("[") {
                if let current { items.append(current) }
                current = [:]
            } else if line.hasPrefix("attribute."), let eq = line.range(of: " = ") {
                let name = String(line[line.index(line.startIndex, offsetBy: 10)..<eq.lowerBound])
                current?[name] = String(line[eq.upperBound...])
            }
        }
        if let current { items.append(current) }
        return items
    }
}

/// Runs a program and answers its standard output and error, together.
func runCapturing(_ argv: [String]) -> String {
    let path = NSTemporaryDirectory() + "/blb-capture-\(UInt32.random(in: 0...UInt32.max))"
    defer { unlink(path) }
    guard let child = try? SpawnedProcess(argv, environment: ProcessInfo.processInfo.environment, log: path) else { return "" }
    child.reap()
    return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
}
