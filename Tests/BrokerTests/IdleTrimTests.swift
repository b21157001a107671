import Broker
import Testing

@Suite struct IdleTrimTests {
    /// The answers to a sequence of checks: (messages so far, in flight).
    func answers(_ checks: [(Int, Int)], quietTicks: Int = 2) -> [Bool] {
        var idle = IdleTrim(quietTicks: quietTicks)
        return checks.map { idle.check(messages: $0.0, inFlight: $0.1) }
    }

    @Test func trimsOnceAfterTwoQuietChecks() {
        // The quiet period after start-up trims, once.
        #expect(answers([(0, 0), (0, 0), (0, 0), (0, 0)]) == [false, true, false, false])
    }

    @Test func aBusyBrokerNeverTrims() {
        let busy = stride(from: 5, through: 500, by: 5).map { ($0, 0) }
        #expect(!answers(busy).contains(true))
    }

    @Test func trimsAgainAfterNewActivityGoesQuiet() {
        #expect(
            answers([(0, 0), (0, 0), (7, 0), (7, 0), (7, 0), (7, 0)]) == [false, true, false, false, true, false])
    }

    @Test func waitsForRequestsInFlight() {
        // A long call (session.wait, a keyring prompt) is not idleness.
        #expect(answers([(3, 1), (3, 1), (3, 1), (3, 0), (3, 0)]) == [false, false, false, false, true])
    }

    @Test func honoursItsQuietPeriod() {
        // The first check sees the message (activity); three quiet ones follow.
        #expect(answers([(1, 0), (1, 0), (1, 0), (1, 0), (1, 0)], quietTicks: 3) == [false, false, false, true, false])
    }

    @Test func settlesAfterItsTrimUntilTheNextMessage() {
        // Settled: the trimmer sleeps until a request wakes it (no check every second).
        var idle = IdleTrim()
        let settled = [(0, 0), (0, 0), (0, 0), (4, 0), (4, 0), (4, 0)].map { check -> Bool in
            _ = idle.check(messages: check.0, inFlight: check.1)
            return idle.isSettled
        }
        #expect(settled == [false, true, true, false, false, true])
    }

    @Test func trimmingTheHeapLeavesLiveMemoryAlone() {
        var blocks: [[UInt8]] = (0..<256).map { _ in [UInt8](repeating: 1, count: 4096) }
        let kept = [UInt8](repeating: 7, count: 65_536)
        blocks.removeAll()
        IdleTrim.trimHeap()
        #expect(blocks.isEmpty)
        #expect(kept.allSatisfy { $0 == 7 })
    }
}
