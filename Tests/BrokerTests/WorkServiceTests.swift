import Synchronization
import Testing

@testable import Broker
@testable import Engine

/// The engine's work items (issue 29): bounded, cancelled and drained at stop.
@Suite struct WorkServiceTests {
    @Test func itemsRunAtMostConcurrencyAtOnceAndStopCancelsAndDrainsThem() async throws {
        let work = WorkService(concurrency: 2)
        let runner = Task { await work.run() }
        let state = Mutex((running: 0, most: 0, finished: 0, cancelled: 0))
        for _ in 0..<3 {
            let queued = work.submit {
                state.withLock {
                    $0.running += 1
                    $0.most = max($0.most, $0.running)
                }
                try? await Task.sleep(for: .seconds(60))
                state.withLock {
                    $0.running -= 1
                    $0.finished += 1
                    if Task.isCancelled { $0.cancelled += 1 }
                }
            }
            #expect(queued)
        }
        try await waitFor { state.withLock { $0.running } == 2 }
        try await Task.sleep(for: .milliseconds(100))
        #expect(state.withLock { $0.most } == 2)
        work.shutdown()
        await runner.value
        // The two running were cancelled, the one waiting ran cancelled: all three ended before run() returned.
        #expect(state.withLock { $0.finished } == 3)
        #expect(state.withLock { $0.cancelled } == 3)
        #expect(!work.submit {})
    }

    @Test func itemsBeyondTheCapacityAreRefused() async {
        let work = WorkService(concurrency: 1, capacity: 2)
        let ran = Mutex(0)
        #expect(work.submit { ran.withLock { $0 += 1 } })
        #expect(work.submit { ran.withLock { $0 += 1 } })
        #expect(!work.submit { ran.withLock { $0 += 1 } })
        work.shutdown()
        await work.run()
        #expect(ran.withLock { $0 } == 2)
    }
}
