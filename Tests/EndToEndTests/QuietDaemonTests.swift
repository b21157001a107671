import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon runs its tasks on executors of its own (SystemSupport/Executors.swift) and watches its
/// descriptors, signals and alarms on epoll threads of its own: libdispatch never starts a worker thread
/// in it, and so never its workqueue monitor, which would wake it every second for the rest of its life
/// (docs/performance.md, round 14). Checked by the threads' names, not by timing: the bench's `idle`
/// figure counts the wake-ups.
@Suite("The quiet daemon", .dedicatedThread)
struct QuietDaemonTests {
    /// Each thread of `pid` but the main one: its name (`/proc/PID/task/TID/comm`).
    static func threadNames(_ pid: pid_t) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.filter { $0 != "\(pid)" }.compactMap { tid in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }.sorted()
    }

    /// libdispatch's threads on Linux are named after their queues: the root queues' workers
    /// ("com.apple.root.default-qos", "…-qos.overcommit"; the kernel keeps the last 15 bytes) and the
    /// manager ("com.apple.libdispatch-manager").
    static func isDispatchThread(_ name: String) -> Bool {
        name.contains("qos") || name.contains("dispatch") || name.contains("com.apple") || name.hasSuffix("manager")
    }

    @Test func theNamesOfLibdispatchThreadsAreRecognised() {
        for name in ["oot.default-qos", "-qos.overcommit", "atch-manager", "com.apple.root"] {
            #expect(Self.isDispatchThread(name), "\(name)")
        }
        for name in ["bl-pool-1", "bl-rpc-events", "bl-events", "bl-vault-1", "gmain", "gdbus", "exe"] {
            #expect(!Self.isDispatchThread(name), "\(name)")
        }
    }

    @Test func noLibdispatchThreadAfterSignInsCallsAndASignOut() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--http-idle", "1"])
        let broker = try #require(h.broker?.pid)
        _ = try h.signIn()
        let rpc = try h.rpc()
        for _ in 0..<200 {
            #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
        }
        _ = try rpc.call("broker.info")
        _ = try rpc.call("clients.list")
        _ = try rpc.call("login.list")
        // A notification subscription, a connection closed with it, then a sign-out (a revoke through the
        // HTTP helper) and a second sign-in.
        let events = try h.rpc()
        _ = try events.call("events.subscribe", params: ["clients": ["com.example.notes"]])
        events.close()
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        _ = try h.signIn()
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        rpc.close()

        let names = Self.threadNames(broker)
        #expect(names.contains { $0.hasPrefix("bl-pool-") }, "\(names)")
        #expect(names.filter(Self.isDispatchThread) == [], "\(names)")
        // The global executor's threads are bounded by the CPUs (at least 2), whatever the load was.
        #expect(names.filter { $0.hasPrefix("bl-pool-") }.count <= max(2, ThreadPool.availableCPUs()), "\(names)")

        // SIGTERM still stops it (the signal comes through the self-pipe on its event thread).
        kill(broker, SIGTERM)
        try waitUntil(15, "the broker to stop on SIGTERM") { !(h.broker?.isRunning ?? false) }
        #expect(h.broker?.crashSignal == nil)
    }
}
