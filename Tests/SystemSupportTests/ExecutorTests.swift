import Foundation
import Synchronization
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// SystemSupport's executors (Executors.swift). What needs them installed as the process's executors
/// (tasks, `Task.sleep`, the main actor) runs in `executor-probe`, a process of its own that installs
/// them as the broker daemon does; the pool, serial queues and semaphores are also tested here directly.
@Suite struct ExecutorTests {
    /// Runs `executor-probe SCENARIO` (built next to the test bundle; killed after 60 s) and answers its
    /// output lines; expects exit status 0.
    static func probe(_ scenario: String) throws -> [String] {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let path = URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("executor-probe").path
        try #require(FileManager.default.isExecutableFile(atPath: path), "executor-probe is not built at \(path)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = ["-s", "KILL", "60", path, scenario]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "executor-probe \(scenario) ended with \(process.terminationStatus)")
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test func tasksActorsAndGroupsRunOnThePool() throws {
        #expect(try Self.probe("tasks") == ["tasks 10000 10000"])
    }

    @Test func sleepsOnBothClocksWakeInDeadlineOrder() throws {
        #expect(
            try Self.probe("sleeps") == [
                "order continuous-20,continuous-100,suspending-200,continuous-300,continuous-400"
            ])
    }

    /// The probe sleeps for an hour and is killed after 60 s: it answers only if the cancelled sleep ended.
    @Test func aCancelledSleepEndsAtOnce() throws {
        #expect(try Self.probe("cancel") == ["sleeper cancelled"])
    }

    @Test func theMainActorRunsOnTheMainThread() throws {
        #expect(try Self.probe("main") == ["main true"])
    }

    /// No libdispatch worker ("com.apple.root.…-qos…") or manager thread: only the pool's own.
    @Test func noThreadButThePoolsOwn() throws {
        let lines = try Self.probe("threads")
        let line = try #require(lines.first)
        let names = line.dropFirst("threads ".count).split(separator: ",").map(String.init)
        #expect(!names.isEmpty)
        #expect(names.allSatisfy { $0.hasPrefix("bl-pool-") }, "\(names)")
        #expect(names.count <= max(2, ThreadPool.availableCPUs()))
    }

    @Test func closuresRunAndDelayedOnesRunInDeadlineOrder() async {
        // One thread: work that is due runs in deadline order, one at a time.
        let pool = ThreadPool(name: "bl-test", maximumThreads: 1)
        defer { pool.shutdown() }
        let order = Mutex<[Int]>([])
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let left = Mutex(4)
            for milliseconds in [120, 40, 80, 0] {
                let run: @Sendable () -> Void = {
                    order.withLock { $0.append(milliseconds) }
                    if left.withLock({ count in
                        count -= 1
                        return count == 0
                    }) {
                        done.resume()
                    }
                }
                if milliseconds == 0 { pool.async(run) } else { pool.asyncAfter(.milliseconds(milliseconds), run) }
            }
        }
        #expect(order.withLock { $0 } == [0, 40, 80, 120])
        #expect(pool.threadCount == 1)
        #expect(pool.delayedCount == 0)
    }

    @Test func aSerialQueueRunsOneAtATimeInOrder() async {
        let pool = ThreadPool(name: "bl-test", maximumThreads: 4)
        defer { pool.shutdown() }
        let queue = SerialQueue(label: "test", pool: pool)
        let seen = Mutex<(values: [Int], running: Int, overlapped: Bool)>(([], 0, false))
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            for value in 0..<5_000 {
                queue.async {
                    seen.withLock {
                        $0.running += 1
                        if $0.running > 1 { $0.overlapped = true }
                    }
                    seen.withLock {
                        $0.values.append(value)
                        $0.running -= 1
                    }
                    if value == 4_999 { done.resume() }
                }
            }
        }
        let result = seen.withLock { $0 }
        #expect(result.values == Array(0..<5_000))
        #expect(!result.overlapped)
    }

    /// `runHereOrAsync` runs on the caller's thread while the queue is idle,
    /// and otherwise takes its turn: never beside another closure of the
    /// queue, and after what its own thread queued before it.
    @Test func runHereOrAsyncRunsOnTheCallerWhenIdleAndInTurnOtherwise() async {
        let pool = ThreadPool(name: "bl-test", maximumThreads: 4)
        defer { pool.shutdown() }
        let queue = SerialQueue(label: "test", pool: pool)
        let caller = pthread_self()
        let ranOn = Mutex<pthread_t?>(nil)
        queue.runHereOrAsync { ranOn.withLock { $0 = pthread_self() } }
        #expect(ranOn.withLock { $0.map { pthread_equal($0, caller) != 0 } } == true, "not run on the idle queue's caller")

        let seen = Mutex<(values: [[Int]], running: Int, overlapped: Bool)>((Array(repeating: [], count: 4), 0, false))
        let perThread = 2_000
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let left = Mutex(4 * perThread)
            DispatchQueue.global().async {
                DispatchQueue.concurrentPerform(iterations: 4) { thread in
                    for value in 0..<perThread {
                        let body: @Sendable () -> Void = {
                            seen.withLock {
                                $0.running += 1
                                if $0.running > 1 { $0.overlapped = true }
                            }
                            seen.withLock {
                                $0.values[thread].append(value)
                                $0.running -= 1
                            }
                            if left.withLock({ count -> Bool in
                                count -= 1
                                return count == 0
                            }) {
                                done.resume()
                            }
                        }
                        if value % 2 == 0 { queue.async(body) } else { queue.runHereOrAsync(body) }
                    }
                }
            }
        }
        let result = seen.withLock { $0 }
        for values in result.values { #expect(values == Array(0..<perThread)) }
        #expect(!result.overlapped)
    }

    @Test func aTaskPreferringThePoolRunsOnIt() async {
        let pool = ThreadPool(name: "bl-test", maximumThreads: 2)
        defer { pool.shutdown() }
        let name = await Task(executorPreference: pool) { () -> String in
            (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        }.value
        #expect(name.hasPrefix("bl-test-"))
    }

    @Test func aSemaphoreCountsSignalsBeforeWaits() {
        let semaphore = ThreadSemaphore()
        semaphore.signal()
        semaphore.signal()
        semaphore.wait()
        semaphore.wait()
        let woke = Atomic<Bool>(false)
        let other = ThreadSemaphore()
        let pool = ThreadPool(name: "bl-test", maximumThreads: 1)
        defer { pool.shutdown() }
        pool.async {
            semaphore.wait()
            woke.store(true, ordering: .releasing)
            other.signal()
        }
        semaphore.signal()
        other.wait()
        let didWake = woke.load(ordering: .acquiring)
        #expect(didWake)
    }
}
