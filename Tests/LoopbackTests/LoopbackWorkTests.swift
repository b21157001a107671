import BrokerLoopback
import BrowserLoginTestTraits
import Synchronization
import SystemSupport
import Testing

/// A listener's sweeper and deliveries are work items of its owner's `WorkGroup` (the daemon runs the
/// engine's in its `ServiceGroup`): bounded by it, and cancelled and waited for when it stops.
@Suite(.dedicatedThread)
struct LoopbackWorkTests {
    /// Polls `condition` for up to 10 s (the machine may be busy: no test of speed here).
    static func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    @Test func theSweeperIsAnItemOfTheOwnersGroupUntilTheListenerCloses() async throws {
        let work = WorkGroup<LoopbackWork>(limit: LoopbackListener.workLimit)
        let listener = try LoopbackListener.open(
            host: .ipv4, port: 0, path: "/callback", work: work, deliver: Deliveries().deliver)
        #expect(work.count == 1)
        listener.close()
        #expect(await Self.eventually { work.count == 0 })
    }

    @Test func stoppingTheGroupCancelsADeliveryInFlightAndWaitsForIt() async throws {
        let work = WorkGroup<LoopbackWork>(limit: LoopbackListener.workLimit)
        let ended = Mutex<String?>(nil)
        let (started, startedContinuation) = AsyncStream.makeStream(of: Void.self)
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", work: work) { _ in
            startedContinuation.yield()
            while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
            ended.withLock { $0 = "cancelled" }
            return LoopbackPage(status: 503, title: "Sign-in failed", message: "The broker stopped.")
        }
        defer { listener.close() }
        let waiting = try RawConnection(host: .ipv4, port: listener.port)
        waiting.send("GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\nConnection: close\r\n\r\n")
        var events = started.makeAsyncIterator()
        _ = await events.next()
        #expect(work.count == 2)
        await work.drain()
        // Returned once the delivery (cancelled) and the sweeper ended; the page still went out.
        #expect(ended.withLock { $0 } == "cancelled")
        #expect(work.count == 0)
        #expect(try waiting.response()?.status == 503)
    }

    @Test func aStoppedGroupTakesNoNewListener() async {
        let work = WorkGroup<LoopbackWork>(limit: LoopbackListener.workLimit)
        await work.drain()
        #expect(throws: LoopbackError.self) {
            _ = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", work: work, deliver: Deliveries().deliver)
        }
    }
}
