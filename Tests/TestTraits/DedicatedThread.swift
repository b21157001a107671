import BrowserLoginTestSupport
import Testing

/// Runs each test of a suite (or one test) on a thread of its own
/// (`onDedicatedThread`): for tests that block — on sockets, child processes
/// and sleeps — so that they can run in parallel without starving the
/// cooperative pool that in-process servers and async tests need. An
/// `alone` test also waits until no other such test runs, and holds the
/// others back while it runs (tests whose figures only hold on a quiet
/// machine).
public struct DedicatedThreadTrait: SuiteTrait, TestTrait, TestScoping {
    let alone: Bool

    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // Per test case, not per suite: a suite holding the lock would wait
        // for slots of the parallelization width that tests queued behind
        // the lock occupy.
        guard testCase != nil else { return try await function() }
        try await RunLock.shared.holding(exclusive: alone) { try await onDedicatedThread { try await function() } }
    }
}

extension Trait where Self == DedicatedThreadTrait {
    /// Each test on a thread of its own: it may block.
    public static var dedicatedThread: Self { DedicatedThreadTrait(alone: false) }

    /// Each test on a thread of its own, and while it runs no other test
    /// with either trait runs.
    public static var alone: Self { DedicatedThreadTrait(alone: true) }
}

/// A fair readers–writer lock over the tests: `dedicatedThread` tests share
/// it, `alone` tests hold it exclusively; waiters enter in arrival order (a
/// waiting `alone` test holds back the shared ones that come after it).
actor RunLock {
    static let shared = RunLock()
    private var readers = 0
    private var writer = false
    private var queue: [(exclusive: Bool, continuation: CheckedContinuation<Void, Never>)] = []

    func acquire(exclusive: Bool) async {
        if queue.isEmpty && canEnter(exclusive) {
            enter(exclusive)
            return
        }
        await withCheckedContinuation { queue.append((exclusive, $0)) }
    }

    /// Runs `body` holding the lock (shared or exclusive).
    func holding(exclusive: Bool, _ body: @Sendable () async throws -> Void) async throws {
        await acquire(exclusive: exclusive)
        do {
            try await body()
        } catch {
            release(exclusive: exclusive)
            throw error
        }
        release(exclusive: exclusive)
    }

    func release(exclusive: Bool) {
        if exclusive { writer = false } else { readers -= 1 }
        while let first = queue.first, canEnter(first.exclusive) {
            queue.removeFirst()
            enter(first.exclusive)
            first.continuation.resume()
        }
    }

    private func canEnter(_ exclusive: Bool) -> Bool { exclusive ? !writer && readers == 0 : !writer }

    private func enter(_ exclusive: Bool) {
        if exclusive { writer = true } else { readers += 1 }
    }
}
