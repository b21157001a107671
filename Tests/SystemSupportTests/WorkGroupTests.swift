import Synchronization
import SystemSupport
import Testing

/// A gate items wait at until it opens (or their task is cancelled), recording who came and how they left.
final class Gate: Sendable {
    private let opened = Atomic<Bool>(false)
    let arrived = Mutex(0)
    let left = Mutex<[String]>([])

    func open() { opened.store(true, ordering: .releasing) }

    /// Waits at the gate until it opens or the task is cancelled; records `name` with "cancelled" or "passed".
    func pass(_ name: String) async {
        arrived.withLock { $0 += 1 }
        while !opened.load(ordering: .acquiring) && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(5))
        }
        left.withLock { $0.append("\(name) \(Task.isCancelled ? "cancelled" : "passed")") }
    }

    /// Polls `condition` for up to 10 s (the machine may be busy: no test of speed here).
    static func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<1000 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}

@Suite("WorkGroup", .timeLimit(.minutes(1)))
struct WorkGroupTests {
    @Test func itRefusesBeyondItsLimitAndTakesMoreOnceOneEnds() async {
        let work = WorkGroup<Int>(limit: 2)
        let gate = Gate()
        #expect(work.submit(1) { await gate.pass("1") })
        #expect(work.submit(2) { await gate.pass("2") })
        #expect(!work.submit(3) { await gate.pass("3") })
        #expect(work.count == 2)
        gate.open()
        #expect(await Gate.eventually { work.count == 0 })
        #expect(work.submit(3) { await gate.pass("3") })
        #expect(await Gate.eventually { work.count == 0 })
        #expect(gate.left.withLock { $0.sorted() } == ["1 passed", "2 passed", "3 passed"])
    }

    @Test func anIdInUseIsRefused() async {
        let work = WorkGroup<String>(limit: 4)
        let gate = Gate()
        #expect(work.submit("a") { await gate.pass("a") })
        #expect(!work.submit("a") { await gate.pass("again") })
        gate.open()
        #expect(await Gate.eventually { work.count == 0 })
        #expect(gate.left.withLock { $0 } == ["a passed"])
    }

    @Test func cancelByIdCancelsThatItemOnly() async {
        let work = WorkGroup<Int>(limit: 4)
        let gate = Gate()
        work.submit(1) { await gate.pass("1") }
        work.submit(2) { await gate.pass("2") }
        #expect(await Gate.eventually { gate.arrived.withLock { $0 } == 2 })
        #expect(work.cancel(1))
        #expect(await Gate.eventually { gate.left.withLock { $0 } == ["1 cancelled"] })
        #expect(!work.cancel(1))  // it ended
        gate.open()
        #expect(await Gate.eventually { work.count == 0 })
        #expect(gate.left.withLock { $0 } == ["1 cancelled", "2 passed"])
    }

    @Test func cancelAllWhereCancelsTheMatchingOnes() async {
        let work = WorkGroup<String>(limit: 8)
        let gate = Gate()
        for id in ["x.1", "x.2", "y.1"] { work.submit(id) { await gate.pass(id) } }
        #expect(await Gate.eventually { gate.arrived.withLock { $0 } == 3 })
        #expect(work.cancelAll { $0.hasPrefix("x.") } == 2)
        #expect(await Gate.eventually { gate.left.withLock { $0.count } == 2 })
        gate.open()
        #expect(await Gate.eventually { work.count == 0 })
        #expect(gate.left.withLock { $0.sorted() } == ["x.1 cancelled", "x.2 cancelled", "y.1 passed"])
    }

    /// A cancelled item still counts until it ends: the bound is on what runs.
    @Test func aCancelledItemCountsUntilItEnds() async {
        let work = WorkGroup<Int>(limit: 1)
        let latch = Latch()
        work.submit(1) { await latch.wait() }
        work.cancel(1)
        #expect(!work.submit(2) {})
        latch.open()
        #expect(await Gate.eventually { work.count == 0 })
        #expect(work.submit(2) {})
        await work.drain()
    }

    @Test func stoppingCancelsWhatRunsWaitsForItAndRefusesMore() async {
        let work = WorkGroup<Int>(limit: 4)
        let gate = Gate()
        let latch = Latch()
        let ended = Mutex(false)
        work.submit(1) { await gate.pass("1") }
        work.submit(2) {
            await gate.pass("2")
            // Cancelled, it still waits for the latch: the group waits for it.
            await latch.wait()
            ended.withLock { $0 = true }
        }
        #expect(await Gate.eventually { gate.arrived.withLock { $0 } == 2 })
        async let stopped = ServiceGroup([.init(work), .init(EndsAtOnce(), endsGroup: true)], signals: []).run()
        #expect(await Gate.eventually { gate.left.withLock { $0.count } == 2 })
        #expect(!work.submit(3) {})
        #expect(!ended.withLock { $0 })
        latch.open()
        let trigger = await stopped
        guard case .serviceReturned = trigger else {
            Issue.record("trigger \(trigger)")
            return
        }
        // run() returned only after both items ended, both cancelled.
        #expect(ended.withLock { $0 })
        #expect(gate.left.withLock { $0.sorted() } == ["1 cancelled", "2 cancelled"])
        #expect(work.count == 0)
    }

    @Test func drainWithNothingInFlightReturnsAtOnceAndMayRepeat() async {
        let work = WorkGroup<Int>(limit: 1)
        await work.drain()
        await work.drain()
        #expect(!work.submit(1) {})
    }

    /// The queue-confined set under it: kept until finished, cancelled by id or all.
    @Test func aTaskSetKeepsItsTasksUntilTheyFinish() async {
        let gate = Gate()
        let set = Mutex(TaskSet<Int>())
        set.withLock { tasks in
            for id in 1...3 { tasks.start(id) { await gate.pass("\(id)") } }
        }
        #expect(await Gate.eventually { gate.arrived.withLock { $0 } == 3 })
        #expect(set.withLock { $0.cancel(2) })
        #expect(await Gate.eventually { gate.left.withLock { $0 } == ["2 cancelled"] })
        // Cancelled, it is still kept: the owner forgets it when it says it finished.
        #expect(set.withLock { $0.count } == 3)
        set.withLock { $0.finished(2) }
        #expect(set.withLock { !$0.contains(2) && !$0.cancel(2) })
        #expect(set.withLock { $0.cancelAll() } == 2)
        #expect(await Gate.eventually { gate.left.withLock { $0.count } == 3 })
    }
}

/// Waits until opened, cancelled or not.
final class Latch: Sendable {
    private struct State {
        var open = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(waiter)
                return false
            }
            if now { waiter.resume() }
        }
    }
}

/// Returns at once: ends the group it is in.
struct EndsAtOnce: Service {
    func run() async {}
    func shutdown() {}
}
