import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A long-running part of a program (in the style of swift-service-lifecycle):
/// `run()` works until it is done or until `shutdown()` asks it to return.
public protocol Service: Sendable {
    func run() async throws
    /// Asks `run()` to finish what it is doing and return. Safe to call from
    /// anywhere, before `run()` started or after it returned, more than once.
    func shutdown()
}

/// Runs services as child tasks of one task group, started in order. On
/// SIGTERM or SIGINT, or when a service marked `endsGroup` returns or any
/// service throws, the others are shut down one at a time in REVERSE order
/// (each `shutdown()`, then its `run()` awaited), so a service stops only
/// after everything started after it (and so possibly relying on it) has.
public struct ServiceGroup: Sendable {
    public struct Entry: Sendable {
        public var service: any Service
        /// When this service's `run()` returns, the group shuts down.
        public var endsGroup: Bool
        public init(_ service: any Service, endsGroup: Bool = false) {
            self.service = service
            self.endsGroup = endsGroup
        }
    }

    /// Why the group shut down.
    public enum Trigger: Sendable {
        case signal(Int32)
        case serviceReturned(index: Int)
        case serviceFailed(index: Int, any Error)
    }

    public let entries: [Entry]
    public let signals: [Int32]
    /// The signals, watched from `init` on: make the group before telling
    /// systemd it is ready, so a stop that comes right after is never lost.
    private let signalStream: AsyncStream<Int32>

    public init(_ entries: [Entry], signals: [Int32] = [SIGTERM, SIGINT]) {
        self.entries = entries
        self.signals = signals
        signalStream = SignalWatcher.stream(signals)
    }

    /// Runs the services until the group shuts down; `willShutdown` is called
    /// once, before the first service is asked to stop. Answers the trigger.
    @discardableResult
    public func run(willShutdown: @Sendable (Trigger) -> Void = { _ in }) async -> Trigger {
        enum Event: Sendable {
            case finished(Int, (any Error)?)
            case signal(Int32)
        }
        let signalStream = self.signalStream
        return await withTaskGroup(of: Event?.self) { group in
            for (index, entry) in entries.enumerated() {
                group.addTask {
                    do {
                        try await entry.service.run()
                        return .finished(index, nil)
                    } catch {
                        return .finished(index, error)
                    }
                }
            }
            group.addTask {
                for await signal in signalStream { return .signal(signal) }
                return nil
            }
            var running = Set(entries.indices)
            var trigger: Trigger?
            while trigger == nil, let next = await group.next() {
                switch next {
                case .signal(let number)?: trigger = .signal(number)
                case .finished(let index, let error?)?:
                    running.remove(index)
                    trigger = .serviceFailed(index: index, error)
                case .finished(let index, nil)?:
                    running.remove(index)
                    if entries[index].endsGroup { trigger = .serviceReturned(index: index) }
                case nil: break
                }
            }
            let why = trigger ?? .serviceReturned(index: -1)
            willShutdown(why)
            for index in entries.indices.reversed() where running.contains(index) {
                entries[index].service.shutdown()
                while running.contains(index), let next = await group.next() {
                    if case .finished(let done, _)? = next { running.remove(done) }
                }
            }
            group.cancelAll()
            return why
        }
    }
}

/// Wakes one waiting task; a signal sent while no one waits is kept for the next wait.
///
/// Signals coalesce: one sent while another is pending joins it, with an
/// atomic exchange and no lock (the broker signals once per RPC request).
/// Every change of `pending` is an exchange, acquiring and releasing, so
/// whoever takes a pending signal sees what each signaller wrote before
/// signalling, however many joined it.
public final class Wakeup: Sendable {
    /// The task waiting, if any; only set while no signal is pending.
    private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let pending = Atomic<Bool>(false)

    public init() {}

    public func signal() {
        guard !pending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        waiter.withLock { waiter -> CheckedContinuation<Void, Never>? in
            // No one waits: the signal stays pending for the next wait.
            guard let woken = waiter.take() else { return nil }
            // The waiter woken here takes it.
            _ = pending.exchange(false, ordering: .acquiringAndReleasing)
            return woken
        }?.resume()
    }

    /// Returns when signalled (or at once if a signal is pending), or when the task is cancelled.
    public func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = waiter.withLock { waiter -> Bool in
                    // Taken under the lock: a signal that finds no waiter leaves it here.
                    if pending.exchange(false, ordering: .acquiringAndReleasing) || Task.isCancelled { return true }
                    waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            waiter.withLock { $0.take() }?.resume()
        }
    }

    /// Returns when signalled, after `timeout` (nil: never), or when the task is cancelled.
    public func wait(timeout: Duration?) async {
        guard let timeout else { return await wait() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: timeout) }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
    }
}

/// Calls `tick` and sleeps until the time it answers (nil: until woken),
/// or until `wake()`; instead of polling at a fixed rate, a timer that has
/// nothing due takes no wake-ups.
///
/// Two kinds of deadline: a `Duration` from now (`tick`), slept on the
/// monotonic clock; or a wall-clock time (milliseconds since
/// 1970; `TimerService.wallClock`), slept on a `WallClockAlarm`, which also wakes the timer when the
/// system clock is set, so a deadline far away costs no wake-up before it
/// and a clock jump is noticed at once.
public final class TimerService: Service {
    private enum Tick: Sendable {
        case relative(@Sendable () async -> Duration?)
        case wallClock(@Sendable () async -> Int64?)
    }
    private let tick: Tick
    private let wakeup: Wakeup
    private let minimumInterval: Duration
    private let stopping = Atomic<Bool>(false)

    /// `wakeup`: signalled by whoever schedules new work (e.g. made before the
    /// engine that signals it, and handed to both).
    /// `minimumInterval`: ticks never come closer than this, however often it is woken (work that keeps
    /// failing fast cannot spin).
    public init(
        wakeup: Wakeup = Wakeup(), minimumInterval: Duration = .zero, tick: @escaping @Sendable () async -> Duration?
    ) {
        self.wakeup = wakeup
        self.minimumInterval = minimumInterval
        self.tick = .relative(tick)
    }

    private init(wakeup: Wakeup, minimumInterval: Duration, tick: Tick) {
        self.wakeup = wakeup
        self.minimumInterval = minimumInterval
        self.tick = tick
    }

    /// A timer whose `tick` answers a wall-clock deadline in milliseconds since 1970 (nil: none).
    public static func wallClock(
        wakeup: Wakeup = Wakeup(), minimumInterval: Duration = .zero, tick: @escaping @Sendable () async -> Int64?
    ) -> TimerService {
        TimerService(wakeup: wakeup, minimumInterval: minimumInterval, tick: .wallClock(tick))
    }

    /// Where no timerfd can be made, a wall-clock deadline is slept towards on
    /// the monotonic clock for at most this long, so a clock jump is noticed within it.
    public static let wallClockFallbackCap: Duration = .seconds(5)

    /// New work may be due earlier than the last answer said: tick now.
    public func wake() { wakeup.signal() }

    public func run() async {
        var alarm: WallClockAlarm?
        if case .wallClock = tick, !Self.clockIsFaked {
            let wakeup = self.wakeup
            alarm = WallClockAlarm { wakeup.signal() }
        }
        defer { alarm?.cancel() }
        while !stopping.load(ordering: .acquiring) && !Task.isCancelled {
            let ticked = ContinuousClock.now
            switch tick {
            case .relative(let tick):
                let next = await tick()
                guard !stopping.load(ordering: .acquiring) else { return }
                await wakeup.wait(timeout: next.map { max($0, .zero) })
            case .wallClock(let tick):
                let next = await tick()
                guard !stopping.load(ordering: .acquiring) else { return }
                if let alarm, alarm.arm(atMillisecondsSince1970: next) {
                    await wakeup.wait()
                } else {
                    let left = next.map { Duration.milliseconds(max(0, $0 - Self.nowMilliseconds())) }
                    await wakeup.wait(timeout: min(left ?? Self.wallClockFallbackCap, Self.wallClockFallbackCap))
                }
            }
            try? await Task.sleep(until: ticked + minimumInterval)
        }
    }

    /// Under libfaketime (the clock-fault tests) the wall clock moves without the kernel
    /// knowing, so no timerfd sees the change: such a process sleeps the capped way instead.
    static let clockIsFaked: Bool = {
        if getenv("FAKETIME_TIMESTAMP_FILE") != nil || getenv("FAKETIME") != nil { return true }
        guard let preload = getenv("LD_PRELOAD") else { return false }
        return String(cString: preload).contains("faketime")
    }()

    static func nowMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    public func shutdown() {
        stopping.store(true, ordering: .releasing)
        wakeup.signal()
    }
}
