import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Where the server decodes large messages (over `RPCServer.largeMessage`): one thread of its own, at
/// a lower scheduling priority (nice +10), running its jobs in the order they came.
///
/// A process that sends 1 MiB requests makes the broker parse them; on a machine with few cores that
/// parsing competed for the CPU, at the same priority, with the threads that answer every other
/// client (the I/O queues, the epoll thread). At nice +10 the kernel gives this thread about a tenth
/// of a core's share against them whenever they have work, and all the rest while they have none: a
/// large request of a well-behaved client is decoded as fast as before on an idle broker, and an
/// abuser's stream of them slows down only itself. (A serial queue on a shared pool cannot be given a
/// priority, and a pool thread made nicer could not be made normal again without `CAP_SYS_NICE`.)
///
/// Started by `RPCServer.run()` and stopped when it returns, after the last job (every job belongs to
/// a request in flight, which `run()` waits for).
final class BulkLane: Sendable {
    /// How much nicer than the rest of the broker the lane's thread runs.
    static let niceness: Int32 = 10

    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var next = 0
        var started = false
        var stopping = false
    }

    private let state = Mutex(State())
    private let wake = ThreadSemaphore()
    /// Signalled by the thread when it has ended (after `stop()`).
    private let ended = ThreadSemaphore()

    /// Starts the thread; false when none could be made (jobs then run on `ThreadPool.shared`).
    func start() -> Bool {
        let first = state.withLock { state -> Bool in
            guard !state.started else { return false }
            state.started = true
            return true
        }
        guard first else { return true }
        if PosixThread.detach(name: "bl-rpc-bulk", { [self] in loop() }) { return true }
        state.withLock { $0.started = false }
        return false
    }

    /// Runs `job` on the lane after the jobs before it.
    func async(_ job: @escaping @Sendable () -> Void) {
        let queued = state.withLock { state -> Bool in
            guard state.started, !state.stopping else { return false }
            state.jobs.append(job)
            return true
        }
        if queued {
            wake.signal()
        } else {
            ThreadPool.shared.async(job)
        }
    }

    /// Runs what is queued, then ends the thread; returns once it has ended.
    func stop() {
        let running = state.withLock { state -> Bool in
            defer { state.stopping = true }
            return state.started && !state.stopping
        }
        guard running else { return }
        wake.signal()
        ended.wait()
    }

    private func loop() {
        // PRIO_PROCESS with 0 is the calling thread on Linux (its nice value is per thread); relative
        // to the nice value it started with (the broker's).
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        _ = setpriority(which, 0, min(19, getpriority(which, 0) + Self.niceness))
        while true {
            wake.wait()
            while let job = take() { job() }
            if state.withLock({ $0.stopping && $0.next >= $0.jobs.count }) { break }
        }
        ended.signal()
    }

    private func take() -> (@Sendable () -> Void)? {
        state.withLock { state in
            guard state.next < state.jobs.count else {
                state.jobs.removeAll(keepingCapacity: state.jobs.capacity <= 64)
                state.next = 0
                return nil
            }
            defer { state.next += 1 }
            let job = state.jobs[state.next]
            state.jobs[state.next] = {}
            return job
        }
    }
}
