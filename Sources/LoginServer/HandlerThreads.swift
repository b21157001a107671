import Dispatch
import Foundation
import Synchronization

/// The threads the HTTP listener's requests are answered on. A thread is
/// made only when every one is busy (up to `maximum`), is kept while work
/// comes, and ends after `idleTimeout` without any (no timer: an idle
/// thread sleeps until it is handed a job or its time is up). Jobs are plain
/// blocking code — a commit, a mail, an upstream provider, the test exchange
/// delay — and one that waits holds up only its own thread. The listener
/// sets `maximum` to its connection limit: each connection has at most one
/// request in flight, so a job never waits for a thread; the queue is only
/// a fallback.
final class HandlerThreads: Sendable {
    typealias Job = @Sendable () -> Void

    /// An idle thread's wake-up. The job it is handed waits in `State.handed`.
    private final class Sleeper: Sendable {
        let wake = DispatchSemaphore(value: 0)
    }

    private struct State {
        /// The idle threads, the most recently idle last: that one is woken first
        /// (its stack is warm) and the others time out when there is less work.
        var idle: [Sleeper] = []
        /// Jobs handed to an idle thread, by the thread's sleeper.
        var handed: [ObjectIdentifier: Job] = [:]
        /// Jobs waiting for a thread (only when `maximum` threads are busy).
        var queued: [Job] = []
        var threads = 0
        var stopping = false
    }

    private enum Step {
        case run(Job)
        case sleep
        case end
    }

    let maximum: Int
    let idleTimeout: DispatchTimeInterval
    private let state = Mutex(State())
    /// Signalled by the last thread to end once `stop()` has begun.
    private let ended = DispatchSemaphore(value: 0)

    init(maximum: Int, idleTimeout: DispatchTimeInterval = .seconds(10)) {
        self.maximum = max(1, maximum)
        self.idleTimeout = idleTimeout
    }

    /// Runs `job` on an idle thread, on a new one, or — with `maximum` busy — after one is free.
    func submit(_ job: @escaping Job) {
        enum Placement {
            case handed(Sleeper)
            case newThread
            case queued
        }
        let placement = state.withLock { state -> Placement in
            if let sleeper = state.idle.popLast() {
                state.handed[ObjectIdentifier(sleeper)] = job
                return .handed(sleeper)
            }
            if state.threads < maximum {
                state.threads += 1
                return .newThread
            }
            state.queued.append(job)
            return .queued
        }
        switch placement {
        case .handed(let sleeper): sleeper.wake.signal()
        case .newThread: Thread { [self] in run(first: job) }.start()
        case .queued: break
        }
    }

    /// The threads now (busy and idle) and the idle ones among them, for tests.
    var counts: (threads: Int, idle: Int) { state.withLock { ($0.threads, $0.idle.count) } }

    /// Ends the idle threads and returns when every thread has ended. Called
    /// when no job is running or queued any more (the listener has answered
    /// everything and stopped); nothing may be submitted after it.
    func stop() {
        let (sleepers, running) = state.withLock { state -> ([Sleeper], Int) in
            state.stopping = true
            defer { state.idle = [] }
            return (state.idle, state.threads)
        }
        for sleeper in sleepers { sleeper.wake.signal() }
        if running > 0 { ended.wait() }
    }

    private func run(first: Job) {
        let me = Sleeper()
        var job = first
        while true {
            job()
            guard let next = next(for: me) else { return }
            job = next
        }
    }

    /// The next job of the thread that sleeps on `me`: a queued one, or one handed
    /// over while it slept; nil when the thread is to end (idle too long, or stopping).
    private func next(for me: Sleeper) -> Job? {
        var step = state.withLock { state -> Step in
            if !state.queued.isEmpty { return .run(state.queued.removeFirst()) }
            if state.stopping { return end(&state) }
            state.idle.append(me)
            return .sleep
        }
        while case .sleep = step {
            let woken = me.wake.wait(timeout: .now() + idleTimeout) == .success
            var handOverPending = false
            step = state.withLock { state -> Step in
                if let job = state.handed.removeValue(forKey: ObjectIdentifier(me)) {
                    // Handed over just as the wait timed out: its signal is still to come.
                    handOverPending = !woken
                    return .run(job)
                }
                // Timed out, or woken by `stop()` (which has taken it off the idle list).
                state.idle.removeAll { $0 === me }
                return end(&state)
            }
            if handOverPending { me.wake.wait() }
        }
        if case .run(let job) = step { return job }
        return nil
    }

    /// Counts the calling thread out (under the lock).
    private func end(_ state: inout State) -> Step {
        state.threads -= 1
        if state.stopping && state.threads == 0 { ended.signal() }
        return .end
    }
}
