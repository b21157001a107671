import BrowserLoginTestSupport
import Dispatch
import Foundation
import Glibc
import Synchronization
import SystemSupport
import Testing

@testable import BrokerRPC

@Suite struct EventPollerTests {
    /// One event per arming (a connection's events never pile up on its queue),
    /// and none once the registration is gone (its descriptor may be closed then,
    /// and its number reused).
    @Test func oneEventPerArmingAndNoneAfterUnregistering() async throws {
        let poller = try EventPoller()
        #expect(poller.start())
        defer { poller.stop() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let seen = Mutex<[UInt32]>([])
        let id = try poller.register(fd: fds[0], interest: .readable, queue: SerialQueue(label: "poller-test")) {
            mask in seen.withLock { $0.append(mask) }
        }
        #expect(write(fds[1], "x", 1) == 1)
        try waitUntil(5, "the first event") { seen.withLock { $0.count } == 1 }
        // Unread data keeps the descriptor readable: a second event would come if it were not one-shot.
        usleep(50_000)
        #expect(seen.withLock { $0.count } == 1)
        poller.arm(id, fd: fds[0], interest: .readable)
        try waitUntil(5, "the event after arming again") { seen.withLock { $0.count } == 2 }
        poller.arm(id, fd: fds[0], interest: .readable)
        poller.unregister(id, fd: fds[0])
        #expect(write(fds[1], "y", 1) == 1)
        usleep(50_000)
        #expect(seen.withLock { $0.count } <= 3)
        let settled = seen.withLock { $0.count }
        usleep(50_000)
        #expect(seen.withLock { $0.count } == settled)
        #expect(seen.withLock { $0.allSatisfy { $0 & EventPoller.Interest.readable.rawValue != 0 } })
    }

    /// Connections come and go from many threads at once, their descriptor
    /// numbers reused at once: what corrupted libdispatch's epoll bookkeeping
    /// (the broker crashed in `_dispatch_event_loop_drain`; `EventPoller`).
    @Test func connectionsComingAndGoingFromManyThreadsAtOnce() async throws {
        let live = try LiveServer()
        let path = live.path
        let failures = Mutex<[String]>([])
        try await onThread {
            DispatchQueue.concurrentPerform(iterations: 8) { worker in
                for n in 0..<150 {
                    do {
                        let client = try RPCClient(socketPath: path)
                        if n % 3 == 0 {
                            client.close()
                            continue
                        }
                        // Every fifth reply is larger than the socket takes at once: it waits to be writable.
                        let method = n % 5 == 1 ? "big" : "echo"
                        let reply = try client.call(method, params: ["size": 300_000, "n": .integer(Int64(n))])
                        if method == "echo", reply["n"] != .integer(Int64(n)) {
                            failures.withLock { $0.append("worker \(worker), call \(n): \(reply)") }
                        }
                    } catch {
                        failures.withLock { $0.append("worker \(worker), call \(n): \(error)") }
                    }
                }
            }
            let survivor = try RPCClient(socketPath: path)
            #expect(try survivor.call("echo", params: ["alive": true]) == ["alive": true])
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(3) })")
        try await live.stop()
        #expect(live.server.statistics.accepted == 8 * 150 + 1)
        #expect(live.server.statistics.open == 0)
    }
}
