import Synchronization

/// The tasks of one owner, by id: started here, forgotten when they finish,
/// cancelled by id or all at once. With `WorkGroup` (below) and the lifecycle
/// code in Services.swift, this file is the only one in Sources that starts a
/// task (`NoLooseTasksTests` checks it): every task has an owner that cancels
/// it, and a bound.
///
/// Not `Sendable` and without a lock of its own: its owner serialises every
/// use (a serial queue, a lock, an actor), so keeping a task costs what a
/// dictionary insert does (the RPC server's handlers live on their
/// connection's queue). The owner calls `finished(_:)` when a task ends
/// (`WorkGroup` does it for its items), and bounds how many it starts.
public struct TaskSet<ID: Hashable & Sendable> {
    private var tasks: [ID: Task<Void, Never>] = [:]

    public init() {}

    public var count: Int { tasks.count }
    public var isEmpty: Bool { tasks.isEmpty }
    public func contains(_ id: ID) -> Bool { tasks[id] != nil }

    /// Starts `body` as a task kept under `id` (an id in use is a bug of the owner). The task inherits no actor:
    /// `body` runs on the global executor.
    public mutating func start(_ id: ID, _ body: @escaping @Sendable () async -> Void) {
        let replaced = tasks.updateValue(Task(operation: body), forKey: id)
        precondition(replaced == nil, "a task id in use was started again")
    }

    /// The task of `id` ended: forget it (not cancelled).
    public mutating func finished(_ id: ID) {
        tasks[id] = nil
    }

    /// Cancels the task of `id` (kept until it has `finished`); false if there is none. Cancelling only asks:
    /// the task still runs to its end (and answers, if it does), now cancelled.
    @discardableResult
    public func cancel(_ id: ID) -> Bool {
        guard let task = tasks[id] else { return false }
        task.cancel()
        return true
    }

    /// Cancels every task whose id matches; answers how many.
    @discardableResult
    public func cancelAll(where matches: (ID) -> Bool = { _ in true }) -> Int {
        var count = 0
        for (id, task) in tasks where matches(id) {
            task.cancel()
            count += 1
        }
        return count
    }
}

/// A bounded set of work items, each a task of its own kept by id, as a
/// `Service`: run it in a `ServiceGroup` after what submits to it, so it
/// stops after them. At most `limit` items run at once; beyond it, and once
/// the group is stopping, `submit` refuses (its caller answers busy or fails
/// the work). An item is cancelled by id (its caller went away), or with
/// the others that match. `shutdown()` stops taking items; `run()` then
/// cancels those in flight, waits for each to end, and returns.
///
/// Unlike the engine's `WorkService`, nothing waits: an item starts when
/// submitted or is refused, so a caller in flight is never queued behind
/// another's slow work (a D-Bus call, the HTTP helper's transfers, a
/// loopback listener's deliveries).
public final class WorkGroup<ID: Hashable & Sendable>: Service {
    private struct State {
        /// Every item until it ends, cancelled or not (a cancelled one still counts against `limit`).
        var items = TaskSet<ID>()
        var stopping = false
        /// `drain()`s waiting for the last item to end.
        var drains: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())
    /// Signalled by `shutdown()`.
    private let stop = Wakeup()
    public let limit: Int

    public init(limit: Int) {
        precondition(limit > 0, "a work group takes at least one item")
        self.limit = limit
    }

    /// Items running now (cancelled ones included, until they end).
    public var count: Int { state.withLock { $0.items.count } }

    /// Starts `item` as a task kept under `id`; false (and `item` never runs) when `limit` items run, when
    /// an item of `id` still runs, or once the group is stopping.
    @discardableResult
    public func submit(_ id: ID, _ item: @escaping @Sendable () async -> Void) -> Bool {
        // Started under the lock its end takes, so it cannot end before it is kept.
        state.withLock { state in
            guard !state.stopping, state.items.count < limit, !state.items.contains(id) else { return false }
            state.items.start(id) { [self] in
                await item()
                ended(id)
            }
            return true
        }
    }

    /// Cancels the item of `id` (it runs to its end, cancelled); false if none runs.
    @discardableResult
    public func cancel(_ id: ID) -> Bool {
        state.withLock { $0.items.cancel(id) }
    }

    /// Cancels every item whose id matches; answers how many.
    @discardableResult
    public func cancelAll(where matches: @Sendable (ID) -> Bool = { _ in true }) -> Int {
        state.withLock { $0.items.cancelAll(where: matches) }
    }

    private func ended(_ id: ID) {
        let drains = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.items.finished(id)
            guard state.items.isEmpty else { return [] }
            defer { state.drains = [] }
            return state.drains
        }
        for drain in drains { drain.resume() }
    }

    /// Waits for `shutdown()`, then does what `drain()` does.
    public func run() async {
        await stop.wait()
        await drain()
    }

    /// Stops taking items, cancels those in flight and returns once each has ended (`run()` after
    /// `shutdown()`; for an owner that runs no `ServiceGroup`). Safe to call more than once, from anywhere.
    public func drain() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let empty = state.withLock { state -> Bool in
                state.stopping = true
                state.items.cancelAll()
                if state.items.isEmpty { return true }
                state.drains.append(done)
                return false
            }
            if empty { done.resume() }
        }
    }

    public func shutdown() {
        state.withLock { $0.stopping = true }
        stop.signal()
    }
}

/// Runs `body` as a task and blocks the calling thread until it returns: how code on a thread of its own (the
/// reference server's thread per connection, never a thread of the concurrency pool) calls async code. The task
/// is awaited here, so it is no loose one; each of its waits has its own timeout.
public func waitBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let done = ThreadSemaphore()
    let box = ResultBox<T>()
    Task {
        let value = await body()
        box.value.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    guard let value = box.value.withLock({ $0 }) else { preconditionFailure("the task ended without a value") }
    return value
}

private final class ResultBox<T: Sendable>: Sendable {
    let value = Mutex<T?>(nil)
}
