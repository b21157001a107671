import Synchronization
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

#if canImport(Glibc)
    import Glibc
#endif

// Executors of our own, for a process that must not wake up at rest: the broker daemon.
//
// Swift concurrency's default executor on Linux is libdispatch's global queues, and the first worker
// thread those queues start also starts libdispatch's workqueue monitor (`_dispatch_workq_init_once`
// in swift-corelibs-libdispatch): a 1 Hz timer on its manager thread, for the life of the process,
// with no switch to turn it off. A process that installs these executors before anything else runs
// (`Executors.runMain`) runs its tasks, actors and sleeps on threads of its own that sleep on a
// condition variable with no timeout when there is nothing to do, and so take no wake-ups at rest.
//
// The pieces:
// - `ThreadPool`: a fixed set of threads (started as work needs them) taking jobs from one queue;
//   the global executor (`ThreadPool.shared`), and also what runs `SerialQueue`s and closures.
//   Delayed jobs (`Task.sleep`, `asyncAfter`) wait in a heap; the threads sleep with a timed wait
//   only while one is waiting, untimed otherwise.
// - `MainRunLoop`: the main executor (`MainActor`), a run loop on the main thread.
// - `Executors`: the `ExecutorFactory`, and `runMain`, which installs both and runs the program.
//
// The experimental interfaces used here (`ExecutorFactory`, `SchedulingExecutor`, `_createExecutors`)
// are the ones of Swift 6.3's _Concurrency; see its private interface for the signatures.

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`, what `SuspendingClock` reads on Linux).
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return max(1, UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec))
}

/// A POSIX mutex and a condition variable on `CLOCK_MONOTONIC`, at fixed addresses.
///
/// `@unchecked Sendable`: the pthread objects are made for use from any thread; their storage is
/// allocated once in `init` and freed in `deinit`, never moved.
final class ThreadCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    /// With the lock held: waits until signalled (spurious wake-ups possible).
    func wait() { pthread_cond_wait(condition, mutex) }
    /// With the lock held: waits until signalled or until `deadline` (monotonic ns).
    func wait(until deadline: UInt64) {
        var at = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        _ = pthread_cond_timedwait(condition, mutex, &at)
    }
    func signal() { pthread_cond_signal(condition) }
    func broadcast() { pthread_cond_broadcast(condition) }
}

/// A counting semaphore for threads (what `DispatchSemaphore` gave): `wait()` blocks until a `signal()`.
///
/// `@unchecked Sendable`: `count` is read and written only with `condition`'s lock held.
public final class ThreadSemaphore: @unchecked Sendable {
    private let condition = ThreadCondition()
    /// Guarded by `condition`'s lock (the wait needs the condition's own lock, so no `Mutex`).
    private let count: UnsafeMutablePointer<Int>

    public init(value: Int = 0) {
        count = .allocate(capacity: 1)
        count.initialize(to: value)
    }

    deinit { count.deallocate() }

    public func signal() {
        condition.lock()
        count.pointee += 1
        condition.signal()
        condition.unlock()
    }

    public func wait() {
        condition.lock()
        while count.pointee <= 0 { condition.wait() }
        count.pointee -= 1
        condition.unlock()
    }
}

/// One thing a pool thread runs.
private enum PoolWork: @unchecked Sendable {
    // `@unchecked`: an `UnownedJob` is a reference to a job the runtime handed over to this pool;
    // it is run exactly once, by the one thread that takes it from the queue.
    case job(UnownedJob)
    case block(@Sendable () -> Void)
}

/// Delayed work, earliest first (a binary heap; equal deadlines in the order they came).
private struct DelayHeap {
    private var items: [(deadline: UInt64, sequence: UInt64, work: PoolWork)] = []
    private var sequence: UInt64 = 0

    var isEmpty: Bool { items.isEmpty }
    var count: Int { items.count }
    var earliest: UInt64? { items.first?.deadline }

    private func before(_ a: Int, _ b: Int) -> Bool {
        items[a].deadline != items[b].deadline
            ? items[a].deadline < items[b].deadline : items[a].sequence < items[b].sequence
    }

    mutating func insert(_ work: PoolWork, at deadline: UInt64) {
        sequence &+= 1
        items.append((deadline, sequence, work))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard before(child, parent) else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    /// The earliest item if it is due at `now`.
    mutating func popDue(now: UInt64) -> PoolWork? {
        guard let first = items.first, first.deadline <= now else { return nil }
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < items.count && before(left, smallest) { smallest = left }
                if right < items.count && before(right, smallest) { smallest = right }
                if smallest == parent { break }
                items.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first.work
    }
}

/// A fixed-size pool of threads taking work from one queue: the global task executor of a process that
/// installs `Executors` (`ThreadPool.shared`), and a place to run closures now (`async`) or later
/// (`asyncAfter`), serially through a `SerialQueue`.
///
/// Threads are started as work needs them, up to `maximumThreads`, and then kept: an idle thread waits on
/// a condition variable with no timeout, so a pool with nothing to do takes no wake-ups. While delayed
/// work waits, the idle threads wait until the earliest deadline (or new work). Work runs in the order it
/// was queued (FIFO; delayed work when due). A job blocked in a system call holds its thread: run work
/// that blocks (a keyring call, a proxy look-up) on a pool of its own. A cancelled `Task.sleep` returns
/// at once, but its job stays in the heap until its deadline (the runtime gives no way to take it out),
/// where it wakes a thread once and does nothing, as a cancelled `dispatch_after` did.
///
/// `@unchecked Sendable`: every mutable member is touched only with `condition`'s lock held.
public final class ThreadPool: TaskExecutor, @unchecked Sendable {
    /// The process's pool for tasks and non-blocking work: as many threads as CPUs this process may
    /// use, at least 2. With `Executors` installed it is also the global executor.
    public static let shared = ThreadPool(name: "bl-pool", maximumThreads: max(2, availableCPUs()))

    public let name: String
    public let maximumThreads: Int
    private let condition = ThreadCondition()
    private var ready: [PoolWork?] = []
    private var readyStart = 0
    private var delayed = DelayHeap()
    private var threads = 0
    private var idle = 0
    private var stopping = false
    /// Threads that ended after `shutdown()`.
    private var ended = 0

    /// `name`: the threads' name (`NAME-N`; the kernel keeps 15 bytes).
    public init(name: String, maximumThreads: Int) {
        precondition(maximumThreads > 0, "a pool has at least one thread")
        self.name = name
        self.maximumThreads = maximumThreads
    }

    /// CPUs online, at least 1.
    public static func availableCPUs() -> Int {
        max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }

    /// Threads started so far.
    public var threadCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return threads
    }

    /// Delayed work waiting now.
    public var delayedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return delayed.count
    }

    // MARK: Closures

    /// Runs `body` on one of the pool's threads.
    public func async(_ body: @escaping @Sendable () -> Void) {
        submit(.block(body), at: nil)
    }

    /// Runs `body` on one of the pool's threads once `delay` has passed (monotonic clock).
    public func asyncAfter(_ delay: Duration, _ body: @escaping @Sendable () -> Void) {
        submit(.block(body), at: Self.deadline(after: delay))
    }

    // MARK: Executor

    public func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)), at: nil)
    }

    fileprivate func enqueue(_ job: UnownedJob, after delay: Duration) {
        submit(.job(job), at: Self.deadline(after: delay))
    }

    static func deadline(after delay: Duration) -> UInt64 {
        let (seconds, attoseconds) = delay.components
        let nanoseconds = Double(seconds) * 1e9 + Double(attoseconds) / 1e9
        let now = monotonicNanoseconds()
        guard nanoseconds > 0 else { return now }
        guard nanoseconds < Double(UInt64.max - now) else { return .max }
        return now + UInt64(nanoseconds)
    }

    // MARK: Threads

    private func submit(_ work: PoolWork, at deadline: UInt64?) {
        condition.lock()
        if let deadline {
            let earliest = delayed.earliest
            delayed.insert(work, at: deadline)
            // A new earliest deadline: an idle thread must wait for it instead.
            if idle > 0, earliest.map({ deadline < $0 }) ?? true { condition.signal() }
        } else {
            ready.append(work)
            if idle > 0 { condition.signal() }
        }
        let start = idle == 0 && threads < maximumThreads && !stopping
        if start { threads += 1 }
        let number = threads
        condition.unlock()
        if start { startThread(number: number) }
    }

    private func startThread(number: Int) {
        let started = PosixThread.detach(name: "\(name)-\(number)") { [self] in run() }
        if !started {
            condition.lock()
            threads -= 1
            condition.unlock()
        }
    }

    /// A thread's loop: with the lock held, takes the next work (moving delayed work that is due first),
    /// runs it without the lock, and waits when there is none.
    private func run() {
        condition.lock()
        while true {
            if !delayed.isEmpty {
                let now = monotonicNanoseconds()
                while let due = delayed.popDue(now: now) { ready.append(due) }
            }
            if readyStart < ready.count {
                let work = ready[readyStart]
                ready[readyStart] = nil
                readyStart += 1
                if readyStart == ready.count {
                    ready.removeAll(keepingCapacity: ready.capacity <= 1024)
                    readyStart = 0
                } else if readyStart >= 1024 && readyStart * 2 >= ready.count {
                    ready.removeSubrange(0..<readyStart)
                    readyStart = 0
                }
                condition.unlock()
                switch work {
                case .job(let job)?: job.runSynchronously(on: asUnownedTaskExecutor())
                case .block(let body)?: body()
                case nil: break
                }
                condition.lock()
                continue
            }
            if stopping { break }
            idle += 1
            if let earliest = delayed.earliest {
                condition.wait(until: earliest)
            } else {
                condition.wait()
            }
            idle -= 1
        }
        ended += 1
        condition.broadcast()
        condition.unlock()
    }

    /// Lets the threads end once the queue is empty (delayed work not yet due is dropped) and waits
    /// until they have. For a pool of an owner that goes away; never for `shared`.
    public func shutdown() {
        condition.lock()
        stopping = true
        delayed = DelayHeap()
        condition.broadcast()
        while ended < threads { condition.wait() }
        condition.unlock()
    }
}

/// Delayed jobs (`Task.sleep`): the runtime asks the global executor for this (and stops the process
/// if it cannot). An SPI conformance: the protocol is an experimental one of _Concurrency's.
@_spi(BrowserLoginExecutors) extension ThreadPool: SchedulingExecutor {
    /// The continuous and suspending clocks are slept on the monotonic clock (a sleep across a system
    /// suspend on the continuous clock ends late by the time suspended); any other clock's durations
    /// must be `Swift.Duration`s. The tolerance is not used.
    public func enqueue<C: Clock>(
        _ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C
    ) {
        guard let delay = delay as? Duration else {
            preconditionFailure("ThreadPool: a delay on a clock whose durations are not Swift.Duration")
        }
        enqueue(UnownedJob(job), after: delay)
    }

    public func enqueue<C: Clock>(
        _ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C
    ) {
        guard let delay = clock.now.duration(to: instant) as? Duration else {
            preconditionFailure("ThreadPool: a deadline on a clock whose durations are not Swift.Duration")
        }
        enqueue(UnownedJob(job), after: delay)
    }
}

/// Closures run one at a time in the order they came (what a serial `DispatchQueue` gave), on a
/// `ThreadPool`'s threads: no thread of its own, nothing at all while empty.
///
/// A queue with work is one item in the pool's queue; it runs up to `batch` closures per turn, then
/// goes to the back of the pool's queue if more came meanwhile, so a busy queue never starves others.
public final class SerialQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var scheduled = false
    }
    public let label: String
    private let pool: ThreadPool
    private let state = Mutex(State())
    /// Closures run per turn before the queue yields its thread.
    private let batch = 64

    public init(label: String, pool: ThreadPool = .shared) {
        self.label = label
        self.pool = pool
    }

    /// Runs `body` after everything queued before it.
    public func async(_ body: @escaping @Sendable () -> Void) {
        let schedule = state.withLock { state -> Bool in
            state.jobs.append(body)
            guard !state.scheduled else { return false }
            state.scheduled = true
            return true
        }
        if schedule { pool.async { [self] in drain() } }
    }

    /// Runs `body` now, on the calling thread, when the queue is idle (nothing
    /// queued, no turn running); otherwise queues it as `async` does. The
    /// caller holds the queue's turn while `body` runs, so it is serialised
    /// with everything else the queue runs; what is queued meanwhile runs
    /// after it, on the pool. It saves the hand-over to a pool thread (a
    /// wake-up) for work that ends a task, such as an RPC handler's reply.
    /// Never call it with a lock held that the queue's work may take.
    public func runHereOrAsync(_ body: @escaping @Sendable () -> Void) {
        let here = state.withLock { state -> Bool in
            guard !state.scheduled else {
                state.jobs.append(body)
                return false
            }
            state.scheduled = true
            return true
        }
        guard here else { return }
        body()
        endTurn()
    }

    /// Queues `body` once `delay` has passed.
    public func asyncAfter(_ delay: Duration, _ body: @escaping @Sendable () -> Void) {
        pool.asyncAfter(delay) { [self] in async(body) }
    }

    private func drain() {
        var ran = 0
        while ran < batch {
            let jobs = state.withLock { state -> [@Sendable () -> Void] in
                if state.jobs.isEmpty { state.scheduled = false }
                defer { state.jobs = [] }
                return state.jobs
            }
            if jobs.isEmpty { return }
            for job in jobs { job() }
            ran += jobs.count
        }
        // More kept coming: the next turn after the pool's other work.
        endTurn()
    }

    /// Ends the turn that ran: the queue is idle again, or (more was queued
    /// meanwhile) its next turn goes to the back of the pool's queue.
    private func endTurn() {
        let more = state.withLock { state -> Bool in
            if state.jobs.isEmpty { state.scheduled = false }
            return state.scheduled
        }
        if more { pool.async { [self] in drain() } }
    }
}

/// The main executor: a run loop on the main thread (`run()`), for `MainActor` work.
///
/// `@unchecked Sendable`: every mutable member is touched only with `condition`'s lock held.
final class MainRunLoop: MainExecutor, @unchecked Sendable {
    private let condition = ThreadCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false
    /// The thread that runs the loop (`run()`).
    private var owner: pthread_t?

    init() {}

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    var isMainExecutor: Bool { true }

    private var onOwner: Bool {
        condition.lock()
        defer { condition.unlock() }
        guard let owner else { return false }
        return pthread_equal(owner, pthread_self()) != 0
    }

    func checkIsolated() {
        precondition(onOwner, "not on the main executor's thread")
    }

    func isIsolatingCurrentContext() -> Bool? { onOwner }

    /// Runs main-actor jobs on the calling thread until `stop()`; waits with no timeout while there are none.
    func run() throws {
        try runUntil { false }
    }

    func runUntil(_ condition: () -> Bool) throws {
        self.condition.lock()
        owner = pthread_self()
        stopped = false
        while !stopped && !condition() {
            if jobs.isEmpty {
                self.condition.wait()
                continue
            }
            let batch = jobs
            jobs = []
            self.condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedSerialExecutor()) }
            self.condition.lock()
        }
        self.condition.unlock()
    }

    func stop() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }
}

/// The executors of a process that must not use libdispatch's global queues (the broker daemon):
/// `ThreadPool.shared` as the global executor, `MainRunLoop` as the main one.
public enum Executors {
    struct Factory: ExecutorFactory {
        static let main = MainRunLoop()
        static var mainExecutor: any MainExecutor { main }
        static var defaultExecutor: any TaskExecutor { ThreadPool.shared }
    }

    /// Installs the executors, starts `body` as the program's one top-level task (on the main actor,
    /// which it leaves at its first call to non-isolated async code), and runs the main thread's loop;
    /// never returns (`body` ends the process, with `exit`). Call it from synchronous top-level code
    /// (no `await` in main.swift: an async main would have started on the default executors), before
    /// anything starts a task.
    public static func runMain(_ body: @escaping @MainActor @Sendable () async -> Never) -> Never {
        _createExecutors(factory: Factory.self)
        Task { @MainActor in await body() }
        do { try Factory.main.run() } catch {}
        fatalError("the main executor's loop returned")
    }
}
