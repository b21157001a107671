import BrokerCore
import Synchronization
import SystemSupport

/// The engine's background work as work items of one service in the daemon's
/// `ServiceGroup`: attempt follow-ups and reconciliations, session refreshes
/// and verifications, device polls, the sign-outs of a lost vault, and the
/// hops of cancelled waits back onto the engine. At most `concurrency` items
/// run at once and at most `capacity` wait their turn (beyond that an item is
/// refused: its owner fails it or the timer tries again). When the service
/// stops, the items waiting are run cancelled and every item is awaited;
/// items submitted after that are refused. The only place of the engine that
/// starts tasks.
public final class WorkService: Service {
    public typealias Item = @Sendable () async -> Void

    private struct State {
        var waiting: [Item] = []
        var running = 0
        var stopped = false
    }
    private let state = Mutex(State())
    private let wakeup = Wakeup()
    let concurrency: Int
    let capacity: Int

    public init(concurrency: Int = 32, capacity: Int = 4_096) {
        self.concurrency = concurrency
        self.capacity = capacity
    }

    /// Queues `item`; false when the service has stopped or is full.
    @discardableResult
    package func submit(_ item: @escaping Item) -> Bool {
        let queued = state.withLock { state in
            guard !state.stopped, state.waiting.count < capacity else { return false }
            state.waiting.append(item)
            return true
        }
        if queued { wakeup.signal() }
        return queued
    }

    public func run() async {
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let (ready, stopped) = state.withLock { state -> ([Item], Bool) in
                    if state.stopped { return ([], true) }
                    let count = min(state.waiting.count, concurrency - state.running)
                    let ready = Array(state.waiting.prefix(count))
                    state.waiting.removeFirst(count)
                    state.running += count
                    return (ready, false)
                }
                if stopped { break }
                for item in ready {
                    group.addTask {
                        await item()
                        self.state.withLock { $0.running -= 1 }
                        self.wakeup.signal()
                    }
                }
                await wakeup.wait()
            }
            // Stopping: what runs is cancelled, what waits runs cancelled (each releases its callers), all awaited.
            let rest = state.withLock { state in
                state.stopped = true
                defer { state.waiting.removeAll() }
                return state.waiting
            }
            group.cancelAll()
            for item in rest { group.addTask { await item() } }
        }
    }

    public func shutdown() {
        state.withLock { $0.stopped = true }
        wakeup.signal()
    }
}

extension BrokerError {
    /// A work item the engine's `WorkService` could not take: it is full or stopping.
    static let workRefused = BrokerError(.busy, "the broker's background work is full or it is stopping; try again shortly")
}
