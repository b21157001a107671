import BrokerRPC
import BrowserLoginTestSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `--soak MINUTES`: mixed calls on four connections, sign-ins and sign-outs
/// on two clients, for MINUTES; prints the broker's RSS every 15 s.
///
/// The verdict compares the broker at rest, twice: the load pauses after the
/// first quarter (warm-up) and again at the end, each time for a few seconds
/// so that the broker goes idle and gives freed memory back (`IdleTrim`), and
/// RSS is read then. Under load RSS also holds memory freed but kept by the
/// allocator; at rest only what the broker still uses remains, so a leak
/// shows as growth between the two.
enum Soak {
    static func run(world: World, minutes: Double) throws {
        guard let broker = world.broker else { return }
        let end = nowNanos() + UInt64(minutes * 60e9)
        let calls = Counter()
        let signIns = Counter()
        let failures = Counter()
        let samples = Samples()
        let start = nowNanos()
        let warmUpEnd = start + UInt64(minutes * 15e9)
        let paused = Counter()
        let restingKiB = Samples()
        /// Pauses the load, lets the broker go idle, and reads its RSS at rest.
        @Sendable func rest(_ label: String) {
            paused.add(1)
            usleep(4_500_000)
            let rss = broker.residentKiB ?? 0
            restingKiB.append(Double(rss))
            let threads = residentKiB(broker.pid, field: "Threads:") ?? 0
            print("soak: at rest \(label): \(rss) KiB (anonymous \(broker.anonymousKiB ?? 0) KiB, \(threads) threads)")
            fflush(nil)
            paused.add(-1)
        }
        print("soak: \(minutes) min; t(s), broker RSS (KiB), calls, sign-ins")
        let hot = world.clientIds[0]
        let signers = Array(world.clientIds.dropFirst().prefix(2))
        onThreads(4 + signers.count + 1) { t in
            if t == 4 + signers.count {
                // The sampler, which also pauses the load twice.
                var rested = false
                while nowNanos() < end {
                    if !rested && nowNanos() >= warmUpEnd {
                        rest("after warm-up")
                        rested = true
                    }
                    let rss = broker.residentKiB ?? 0
                    let at = Double(nowNanos() - start) / 1e9
                    samples.append(Double(rss))
                    print(String(format: "soak: %6.0f  %7d  %9d  %6d", at, rss, calls.current, signIns.current))
                    fflush(nil)
                    var slept = 0
                    while slept < 15_000 && nowNanos() < end {
                        usleep(100_000)
                        slept += 100
                    }
                }
                return
            }
            guard let rpc = try? world.rpc() else {
                failures.add(1)
                return
            }
            if t >= 4 {
                let client = signers[t - 4]
                while nowNanos() < end {
                    while paused.current > 0 { usleep(50_000) }
                    do {
                        try world.signIn(rpc, client: client, emailTag: 100 + t)
                        _ = try rpc.call("session.get", params: ["client": .string(client)])
                        _ = try rpc.call("session.signOut", params: ["client": .string(client)])
                        signIns.add(1)
                    } catch {
                        failures.add(1)
                    }
                }
                return
            }
            var i = 0
            while nowNanos() < end {
                while paused.current > 0 { usleep(50_000) }
                do {
                    switch i % 20 {
                    case 0: _ = try rpc.call("broker.info")
                    case 1:
                        // The live attempts, as an app asks: the whole history would grow with
                        // every sign-in of the soak (up to login.list's cap of 1,000) and with it
                        // the size of this one answer, which is not the broker's memory growing.
                        _ = try rpc.call(
                            "login.list",
                            params: ["client": .string(signers[0]), "states": [.string("waiting"), .string("exchanging")]])
                    case 2: _ = try rpc.call("clients.list")
                    case 3: _ = try rpc.call("session.get", params: ["client": .string(signers[i % signers.count])])
                    case 4:
                        let sub = try rpc.call("events.subscribe", params: ["clients": [.string(hot)]])
                        _ = try rpc.call("events.unsubscribe", params: ["subscription": sub["subscription"] ?? .null])
                    default: _ = try rpc.call("session.get", params: ["client": .string(hot)])
                    }
                    calls.add(1)
                } catch {
                    failures.add(1)
                }
                i += 1
                // Paced: a busy desktop, not a load test (about 2,000 calls/s per connection at most).
                if i % 100 == 0 { usleep(50_000) }
            }
        }
        rest("at the end")
        let rss = samples.all
        let peak = rss.max() ?? 0
        let resting = restingKiB.all
        let warm = resting.first ?? 0
        let last = resting.last ?? 0
        print(
            "soak: done. \(calls.current) calls, \(signIns.current) sign-ins, \(failures.current) failures; under load: peak \(Int(peak)) KiB, last sample \(Int(rss.last ?? 0)) KiB; at rest: after warm-up \(Int(warm)) KiB, at the end \(Int(last)) KiB, growth \(Int(last - warm)) KiB"
        )
        print(
            last - warm <= 1024 ? "soak: no leak (growth at rest after warm-up ≤ 1 MiB)" : "soak: RSS GREW after warm-up")
    }
}
