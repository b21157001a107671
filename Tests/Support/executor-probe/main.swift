// A process on SystemSupport's executors (Executors.runMain), as the broker daemon runs: ExecutorTests runs
// it with a scenario's name and reads what it prints, one finding a line. Exits 0 when the scenario ran.
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

actor Counter {
    private(set) var value = 0
    func increment() -> Int {
        value += 1
        return value
    }
}

final class Lines: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// The names of this process's threads (`/proc/self/task/*/comm`), main thread excluded.
func threadNames() -> [String] {
    guard let directory = opendir("/proc/self/task") else { return [] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard let number = Int32(tid), number != getpid() else { continue }
        let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY)
        guard fd >= 0 else { continue }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &buffer, buffer.count)
        close(fd)
        if count > 0 { names.append(String(decoding: buffer[0..<count], as: UTF8.self).filter { $0 != "\n" }) }
    }
    return names.sorted()
}

/// Printed lines reach the test when the probe exits (`exit` flushes standard output).
func say(_ line: String) { print(line) }

let mainThread = pthread_self()

let scenario = CommandLine.arguments.dropFirst().first ?? ""

Executors.runMain {
    switch scenario {
    case "tasks":
        // Many tasks, an actor, a task group: every job runs.
        let counter = Counter()
        let highest = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<10_000 { group.addTask { await counter.increment() } }
            var highest = 0
            for await value in group { highest = max(highest, value) }
            return highest
        }
        say("tasks \(highest) \(await counter.value)")
    case "sleeps":
        // Sleeps on both clocks wake in deadline order, whatever order they started in.
        let woke = Lines()
        await withTaskGroup(of: Void.self) { group in
            for milliseconds in [400, 100, 300] {
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(milliseconds))
                    woke.add("continuous-\(milliseconds)")
                }
            }
            group.addTask {
                try? await Task.sleep(until: .now + .milliseconds(200), clock: .suspending)
                woke.add("suspending-200")
            }
            group.addTask {
                try? await ContinuousClock().sleep(until: .now + .milliseconds(20))
                woke.add("continuous-20")
            }
        }
        say("order " + woke.all.joined(separator: ","))
    case "cancel":
        // A task asleep for an hour is cancelled: its sleep throws at once.
        let sleeper = Task<String, Never> {
            do {
                try await Task.sleep(for: .seconds(3_600))
                return "slept"
            } catch is CancellationError {
                return "cancelled"
            } catch {
                return "failed"
            }
        }
        try? await Task.sleep(for: .milliseconds(50))
        sleeper.cancel()
        say("sleeper \(await sleeper.value)")
    case "main":
        // The main actor runs on the main thread.
        let onMain = await MainActor.run { pthread_equal(pthread_self(), mainThread) != 0 }
        say("main \(onMain)")
    case "threads":
        // After tasks, sleeps and closures: only the pool's threads, no libdispatch worker or manager.
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<100 { group.addTask { try? await Task.sleep(for: .milliseconds(index % 10)) } }
        }
        let done = ThreadSemaphore()
        SerialQueue(label: "probe").async { done.signal() }
        done.wait()
        say("threads " + threadNames().joined(separator: ","))
    default:
        say("unknown scenario \(scenario)")
        exit(2)
    }
    exit(0)
}
