// Issue 33's figures of the broker at rest and of a whole sign-in: context
// switches over an idle minute, and login.start → signedIn with its breakdown.
import BrokerBrowserLogin
import BrokerCore
import BrokerCurl
import BrokerHTTP
import BrokerVault
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import ScriptedBrowser
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

enum Round3 {
    // MARK: Wake-ups at rest

    /// The broker left alone for `seconds` with nothing scheduled: every
    /// session signed out, the HTTP helper gone (it exits when idle), the
    /// idle heap trim done, while other processes come to the session bus and
    /// leave it once a second. Counts the context switches of all its threads
    /// (a thread that appears or goes counts as one at least).
    static func idleWakeups(world: World, seconds: Int) throws {
        guard let broker = world.broker else { return }
        let rpc = try world.rpc()
        for client in world.clientIds {
            _ = try rpc.call("session.signOut", params: ["client": .string(client)])
        }
        rpc.close()
        // The sign-outs' revokes ran in the HTTP helper: wait until it has exited.
        let deadline = nowNanos() + 40_000_000_000
        var helpers: [pid_t] = []
        repeat {
            usleep(200_000)
            helpers = childProcesses(of: broker.pid).filter {
                ProcFS.executable(pid: $0)?.hasSuffix("/browser-login-http") == true
            }
        } while !helpers.isEmpty && nowNanos() < deadline
        guard helpers.isEmpty else { throw BenchError("the HTTP helper did not exit when idle") }
        sleep(10)  // the idle trim's quiet period (2 s), the HTTP helper's idle timers (--http-idle)
        let before = ProcFS.contextSwitches(pid: broker.pid)
        // Meanwhile, as on a desktop, other processes come to the session bus and leave it, one a
        // second; they ask the broker nothing, and the bus tells it nothing of them.
        var comings = 0
        let end = nowNanos() + UInt64(seconds) * 1_000_000_000
        while nowNanos() < end {
            let bus = try runProgram(
                "/usr/bin/gdbus",
                [
                    "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                    "--method", "org.freedesktop.DBus.GetId",
                ])
            if bus.status == 0 { comings += 1 }
            let now = nowNanos()
            let left = end > now ? end - now : 0
            usleep(UInt32(min(left / 1000, 1_000_000)))
        }
        let after = ProcFS.contextSwitches(pid: broker.pid)
        var total = 0
        var woke: [String] = []
        // libdispatch's threads are named after their queues ("com.apple.root.default-qos…", the kernel
        // keeping the last 15 bytes, and "…libdispatch-manager"). The broker runs on executors of its own
        // (round 14) and should have none: the first root-queue worker would start dispatch's workqueue
        // monitor, which wakes its manager thread once a second for the life of the process.
        let dispatchThreads = after.values.filter {
            $0.name.contains("qos") || $0.name.contains("dispatch") || $0.name.contains("com.apple")
        }.count
        for (tid, now) in after {
            let delta = before[tid].map { now.count - $0.count } ?? max(1, now.count)
            if delta > 0 { woke.append("\(now.name) (\(tid)) \(delta)") }
            total += delta
        }
        let gone = before.keys.filter { after[$0] == nil }.count
        total += gone
        log(
            "at rest for \(seconds) s (\(comings) other processes came to the bus and left): \(total) context switches"
                + " over \(after.count) threads" + (woke.isEmpty ? "" : ": " + woke.joined(separator: ", "))
                + (gone > 0 ? ", \(gone) threads gone" : ""))
        record(
            Row(
                figure: "context switches at rest, \(seconds) s, all threads, a process on the bus each second",
                value: "\(total)",
                baseline: "\(after.count) threads", target: "0", met: total == 0))
        record(
            Row(
                figure: "  libdispatch threads in the broker", value: "\(dispatchThreads)",
                baseline: "\(after.count) threads", target: "0", met: dispatchThreads == 0))
    }

    // MARK: The HTTP helper's hop

    /// What the broker's HTTP helper adds to a request: `reps` state-changing
    /// requests to the reference server (`POST /health`, answered 405 at
    /// once, on a fresh connection each, as a create or an exchange goes)
    /// through `browser-login-http`, alternated with the same requests sent
    /// with libcurl in this process (the baseline).
    static func helperHop(world: World, reps: Int) async throws {
        let helper = HelperTransport(
            program: world.binDirectory + "/browser-login-http", environment: ProcessInfo.processInfo.environment)
        let direct = CurlTransport()
        let request = HTTPRequest(
            method: "POST", url: world.serverOrigin + "/browser-login/health", body: [], changesState: true)
        var viaHelper: [Double] = []
        var inProcess: [Double] = []
        for rep in 0..<(reps + 20) {
            let t0 = nowNanos()
            let a = try await helper.send(request)
            let t1 = nowNanos()
            let b = try await direct.send(request)
            let t2 = nowNanos()
            guard a.status == b.status else { throw BenchError("the helper answered \(a.status), libcurl \(b.status)") }
            guard rep >= 20 else { continue }
            viaHelper.append(Double(t1 - t0))
            inProcess.append(Double(t2 - t1))
        }
        let (h, d) = (median(viaHelper), median(inProcess))
        record(
            Row(
                figure: "HTTP request through the helper (POST, fresh connection, \(reps))", value: ms(h),
                baseline: ms(d) + " (libcurl in-process)", ratio: String(format: "%.2f×, %+.2f ms", h / d, (h - d) / 1e6),
                target: "(info)", met: nil))
    }

    // MARK: The sign-in, end to end

    /// `count` sign-ins of one client, one at a time: login.start, the hosted
    /// page in the scripted browser, login.finish (its answer is the session:
    /// signedIn). Interleaved with each, a replica of what the broker cannot
    /// avoid, done directly in this process with the broker's own vault and
    /// HTTP client: the server's create and exchange (server), and the
    /// vault's store, lookup, store, store (keyring). The broker's own
    /// share is the broker's part (start + finish round trips) less both,
    /// per sign-in against its own replica; the figure is the median of
    /// those. (The difference of the three medians, printed before, moved
    /// by a millisecond or more between runs with the keyring's long tail.)
    static func signInEndToEnd(world: World, count: Int) async throws {
        let client = world.clientIds[2]
        let rpc = try world.rpc()
        defer { rpc.close() }
        let origin = try Origin(world.serverOrigin)
        guard let configuration = LoginServerConfiguration(origin: origin) else { throw BenchError("configuration") }
        let server = LoginServerClient(configuration: configuration, transport: CurlTransport())
        let vault = SecretServiceVault()
        var total: [Double] = []
        var brokerPart: [Double] = []
        var browserPart: [Double] = []
        var serverPart: [Double] = []
        var keyringPart: [Double] = []
        // Each call on its own: the broker's round trip against its replica's direct calls.
        var startOwn: [Double] = []
        var finishOwn: [Double] = []
        let warmUp = 3
        for rep in 0..<(count + warmUp) {
            // The broker.
            let t0 = nowNanos()
            let attempt = try rpc.call("login.start", params: ["client": .string(client), "openBrowser": false])
            let t1 = nowNanos()
            guard let url = attempt["authorizeUrl"]?.stringValue else { throw BenchError("no authorizeUrl") }
            let callback = try ScriptedBrowser(serverOrigin: world.serverOrigin).signInAndAuthorize(
                authorizeURL: url, email: world.email(3), code: "000000")
            let t2 = nowNanos()
            let finished = try rpc.call("login.finish", params: ["url": .string(callback)])
            let t3 = nowNanos()
            guard finished["state"]?.stringValue == "completed" else { throw BenchError("sign-in did not complete") }
            let session = try rpc.call("session.get", params: ["client": .string(client)])
            guard session["status"]?.stringValue == "signedIn" else {
                throw BenchError("session.get after the sign-in: \(session)")
            }
            _ = try rpc.call("session.signOut", params: ["client": .string(client)])

            // The replica.
            let verifier = try ProofSecret.generate()
            let recovery = try ProofSecret.generate()
            let attemptKeys = ["kind": "bench-attempt", "client": client, "attempt": "at_bench\(rep)"]
            let sessionKeys = ["kind": "bench-session", "client": client]
            var secrets: [String: String] = ["codeVerifier": verifier.value, "recoveryKey": recovery.value]
            let r0 = nowNanos()
            let created = try await server.create(
                CreateAttemptRequest(
                    clientId: client, returnUrl: world.returnURL(client), codeChallenge: verifier.challenge,
                    recoveryChallenge: recovery.challenge))
            let r1 = nowNanos()
            secrets["authorizeUrl"] = created.authorizeUrl
            try await vault.store(
                try JSONEncoder().encode(secrets).map { $0 }, label: "bench attempt", attributes: attemptKeys)
            let r3 = nowNanos()
            let callbackURL = try ScriptedBrowser(serverOrigin: world.serverOrigin).signInAndAuthorize(
                authorizeURL: created.authorizeUrl, email: world.email(4), code: "000000")
            guard case .code(let code) = try Callback(parsing: callbackURL).outcome else {
                throw BenchError("no code in the callback")
            }
            let r4 = nowNanos()
            guard let stored = try await vault.lookup(attributes: attemptKeys),
                let kept = try JSONDecoder().decode([String: String].self, from: Data(stored))["codeVerifier"]
            else { throw BenchError("vault lookup failed") }
            let r5 = nowNanos()
            let answer = try await server.exchange(
                attemptId: created.attemptId, ExchangeRequest(code: code, codeVerifier: kept))
            let r6 = nowNanos()
            let withSession = try JSONEncoder().encode(
                Figures.AttemptWithSession(secrets: secrets, session: answer.session))
            try await vault.store(withSession.map { $0 }, label: "bench attempt", attributes: attemptKeys)
            try await vault.store(
                try JSONEncoder().encode(answer.session).map { $0 }, label: "bench session", attributes: sessionKeys)
            let r7 = nowNanos()
            try await vault.remove(attributes: attemptKeys)
            try await vault.remove(attributes: sessionKeys)
            _ = try? await server.revokeByToken(accessToken: answer.session.accessToken)

            guard rep >= warmUp else { continue }
            total.append(Double(t3 - t0))
            brokerPart.append(Double((t1 - t0) + (t3 - t2)))
            browserPart.append(Double(t2 - t1))
            serverPart.append(Double((r1 - r0) + (r6 - r5)))
            keyringPart.append(Double((r3 - r1) + (r5 - r4) + (r7 - r6)))
            startOwn.append(Double(t1 - t0) - Double(r3 - r0))
            finishOwn.append(Double(t3 - t2) - Double(r7 - r4))
        }
        let p50 = median(total)
        let p95 = percentile(total, 0.95)
        let broker = median(brokerPart)
        let serverShare = median(serverPart)
        let keyringShare = median(keyringPart)
        let own = median(zip(startOwn, finishOwn).map { $0 + $1 })
        record(
            Row(
                figure: "sign-in end to end (login.start → signedIn), \(count) sign-ins", value: ms(p50) + " p50",
                baseline: ms(p95) + " p95", target: "(info)", met: nil))
        record(
            Row(
                figure: "  the hosted page in the scripted browser", value: ms(median(browserPart)),
                target: "(info)", met: nil))
        record(
            Row(
                figure: "  the broker's part (start + finish round trips)", value: ms(broker),
                baseline: ms(percentile(brokerPart, 0.95)) + " p95", target: "(info)", met: nil))
        record(
            Row(
                figure: "    server (create + exchange, direct)", value: ms(serverShare), target: "(info)", met: nil))
        record(
            Row(
                figure: "    keyring (3 stores + 1 lookup, direct)", value: ms(keyringShare), target: "(info)", met: nil))
        record(
            Row(
                figure: "    the broker's own share (median per sign-in)", value: ms(own),
                baseline: ms(serverShare + keyringShare) + " (server+keyring)",
                ratio: String(format: "%.0f%% of its part", own / max(1, broker) * 100), target: "≤ 2 ms",
                met: own <= 2e6))
        record(
            Row(
                figure: "      of which login.start (less create, store)", value: ms(median(startOwn)),
                target: "(info)", met: nil))
        record(
            Row(
                figure: "      of which login.finish (less lookup, exchange, store, store)", value: ms(median(finishOwn)),
                target: "(info)", met: nil))
    }
}
