import Synchronization
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Records when it starts and stops; `run()` returns on `shutdown()`.
final class ProbeService: Service {
    let name: String
    let journal: Journal
    let endsAtOnce: Bool
    private let stop = Wakeup()

    init(_ name: String, journal: Journal, endsAtOnce: Bool = false) {
        self.name = name
        self.journal = journal
        self.endsAtOnce = endsAtOnce
    }

    func run() async {
        if endsAtOnce { return }
        await stop.wait()
        journal.lines.withLock { $0.append("stopped \(name)") }
    }

    func shutdown() {
        journal.lines.withLock { $0.append("shutdown \(name)") }
        stop.signal()
    }
}

final class Journal: Sendable {
    let lines = Mutex<[String]>([])
}

@Suite("Services")
struct ServiceTests {
    @Test func aServiceThatEndsTheGroupStopsTheOthersInReverseOrder() async {
        let journal = Journal()
        let a = ProbeService("a", journal: journal)
        let b = ProbeService("b", journal: journal)
        let last = ProbeService("c", journal: journal, endsAtOnce: true)
        let trigger = await ServiceGroup(
            [.init(a), .init(b), .init(last, endsGroup: true)], signals: []
        ).run()
        guard case .serviceReturned(index: 2) = trigger else {
            Issue.record("trigger \(trigger)")
            return
        }
        #expect(journal.lines.withLock { $0 } == ["shutdown b", "stopped b", "shutdown a", "stopped a"])
    }

    @Test func aSignalShutsTheGroupDown() async {
        let journal = Journal()
        let a = ProbeService("a", journal: journal)
        // The group watches from here on. Setting the disposition again after
        // that would take the signal from its source: the group would never see it.
        let group = ServiceGroup([.init(a)], signals: [SIGUSR1])
        // Sent until the group stops.
        let sender = Task {
            while !Task.isCancelled {
                kill(getpid(), SIGUSR1)
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        let trigger = await group.run()
        sender.cancel()
        guard case .signal(SIGUSR1) = trigger else {
            Issue.record("not stopped by the signal")
            return
        }
        #expect(journal.lines.withLock { $0 } == ["shutdown a", "stopped a"])
    }

    // A lost signal would hang a wait: the time limit turns that into a failure.
    @Test(.timeLimit(.minutes(1))) func wakeupSignalsAreKeptUntilAWaitAndCoalesce() async {
        let wakeup = Wakeup()
        // Sent before anyone waits: kept, so the wait returns at once (a lost signal would hang here).
        wakeup.signal()
        wakeup.signal()
        await wakeup.wait()
        // The two signals made one: the next wait needs a new one.
        let woken = Journal()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await wakeup.wait()
                woken.lines.withLock { $0.append("woken") }
            }
            try? await Task.sleep(for: .milliseconds(200))
            let early = !woken.lines.withLock { $0 }.isEmpty
            #expect(!early)
            wakeup.signal()
        }
        let late = !woken.lines.withLock { $0 }.isEmpty
        #expect(late)
        // Many signals while nobody waits (the broker's one per request) still wake the next wait.
        for _ in 0..<1000 { wakeup.signal() }
        await wakeup.wait()
    }

    @Test func ticksNeverComeCloserThanTheMinimumInterval() async {
        let ticks = Mutex(0)
        let timer = TimerService(minimumInterval: .milliseconds(100)) {
            ticks.withLock { $0 += 1 }
            return .zero  // always due again at once
        }
        let started = ContinuousClock.now
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await timer.run() }
            for _ in 0..<10 {
                timer.wake()
                try? await Task.sleep(for: .milliseconds(35))
            }
            timer.shutdown()
        }
        // Bounded by the time that really passed (a busy machine stretches the sleeps above): the first
        // tick comes after `started`, each next one at least 100 ms after the one before, and the last
        // one before the run ended.
        let elapsed = ContinuousClock.now - started
        let allowed = Int(elapsed / .milliseconds(100)) + 1
        let count = ticks.withLock { $0 }
        #expect(count >= 1)
        #expect(count <= allowed, "\(count) ticks in \(elapsed)")
    }

    @Test func theTimerSleepsUntilItsDeadlineOrAWake() async {
        /// Polls `condition` for up to 10 s (the machine may be busy: no test of speed here).
        func eventually(_ condition: () -> Bool) async -> Bool {
            for _ in 0..<1000 {
                if condition() { return true }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return condition()
        }
        let ticks = Mutex(0)
        let timer = TimerService {
            ticks.withLock { $0 += 1 }
            return nil
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await timer.run() }
            #expect(await eventually { ticks.withLock { $0 } == 1 })
            try? await Task.sleep(for: .milliseconds(300))
            #expect(ticks.withLock { $0 } == 1)  // nothing due: no further tick
            timer.wake()
            #expect(await eventually { ticks.withLock { $0 } == 2 })
            timer.shutdown()
        }
        let fast = Mutex(0)
        let periodic = TimerService {
            fast.withLock { $0 += 1 }
            return .milliseconds(20)
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await periodic.run() }
            #expect(await eventually { fast.withLock { $0 } >= 5 })
            periodic.shutdown()
        }
    }

    /// Wall-clock time now, in milliseconds since 1970.
    static func wallClockMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    @Test func aWallClockTimerSleepsUntilItsDeadlineOrAWake() async {
        func eventually(_ condition: () -> Bool) async -> Bool {
            for _ in 0..<1000 {
                if condition() { return true }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return condition()
        }
        // First a deadline 150 ms ahead (on the CLOCK_REALTIME timerfd), then nothing.
        let ticks = Mutex<[Int64]>([])
        let timer = TimerService.wallClock(tick: {
            let now = Self.wallClockMilliseconds()
            let count = ticks.withLock {
                $0.append(now)
                return $0.count
            }
            return count == 1 ? now + 150 : nil
        })
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await timer.run() }
            #expect(await eventually { ticks.withLock { $0.count } == 2 })
            let times = ticks.withLock { $0 }
            #expect(times[1] >= times[0] + 150, "the second tick came before the deadline: \(times)")
            try? await Task.sleep(for: .milliseconds(300))
            #expect(ticks.withLock { $0.count } == 2)  // nothing due: no further tick
            timer.wake()
            #expect(await eventually { ticks.withLock { $0.count } == 3 })
            timer.shutdown()
        }
    }

    @Test func aWallClockAlarmFiresForAPastDeadlineAndNotWhenDisarmed() async throws {
        let fired = Mutex(0)
        let alarm = try #require(WallClockAlarm { fired.withLock { $0 += 1 } })
        defer { alarm.cancel() }
        #expect(alarm.arm(atMillisecondsSince1970: Self.wallClockMilliseconds() - 1000))
        for _ in 0..<1000 where fired.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(fired.withLock { $0 } == 1)
        // Armed far ahead, then disarmed: nothing more.
        #expect(alarm.arm(atMillisecondsSince1970: Self.wallClockMilliseconds() + 100))
        #expect(alarm.arm(atMillisecondsSince1970: nil))
        try await Task.sleep(for: .milliseconds(300))
        #expect(fired.withLock { $0 } == 1)
        alarm.cancel()
        #expect(!alarm.arm(atMillisecondsSince1970: 1))
    }
}
