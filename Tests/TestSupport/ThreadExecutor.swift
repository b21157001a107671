import Foundation

/// A task executor with one thread of its own. Code that blocks (waits on a
/// socket, a child process, a sleep) runs on it without taking a thread of
/// the cooperative pool, which has as many threads as the machine has cores
/// (two here) and which in-process servers and other tests running in
/// parallel need. Used through `withTaskExecutorPreference` (see
/// `onDedicatedThread`), the code keeps its task and so its task-locals (the
/// current test, to which `#expect` reports).
public final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    // Safe: `jobs` and `stopped` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false

    public init(name: String = "bl-test") {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once the jobs enqueued so far have run.
    public func shutdown() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopped { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs `body` in the current task on a thread of its own (a `ThreadExecutor`),
/// so that blocking in it never starves the cooperative pool.
public func onDedicatedThread<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
    let executor = ThreadExecutor()
    defer { executor.shutdown() }
    return try await withTaskExecutorPreference(executor) { try await body() }
}
