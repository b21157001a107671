import CLinux
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Readiness of descriptors, from one epoll thread of the poller's own,
/// delivered on each registration's `SerialQueue`, or on the epoll thread
/// itself for a registration without one (short handlers only: a signal's
/// byte read, a timerfd's expiry read). The RPC server has one for its
/// connections and listener; `EventPoller.shared` watches the process's
/// signals (`SignalWatcher`) and wall-clock alarms (`WallClockAlarm`).
///
/// Not dispatch sources: libdispatch's epoll bookkeeping on Linux keeps one
/// "muxnote" per descriptor number, and connections that come and go at a
/// high rate — a source registered, cancelled, the descriptor closed and its
/// number given to the next connection — corrupt it from several queues at
/// once (swift-corelibs-libdispatch issues 833 and 949). CI saw the broker
/// crash inside `_dispatch_event_loop_drain` a few connections after
/// start-up. Here each registration has an id of its own; an event carries
/// the id, never a pointer, and an event for a registration already removed
/// (its descriptor closed, the number perhaps reused) finds nothing and is
/// dropped.
///
/// Registrations are one-shot (`EPOLLONESHOT`): after an event, a descriptor
/// is disarmed until its owner arms it again with what it waits for — as a
/// dispatch source is while its handler runs — so a connection's events never
/// pile up on its queue.
public final class EventPoller: Sendable {
    /// A system call failed with `code` (an errno value).
    public struct Failure: Error, Sendable, Hashable {
        public let code: Int32
        public init(code: Int32) { self.code = code }
    }

    public struct Interest: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let readable = Interest(rawValue: bl_epoll_in)
        public static let writable = Interest(rawValue: bl_epoll_out)
    }

    private struct Registration {
        let queue: SerialQueue?
        let handler: @Sendable (UInt32) -> Void
    }

    private struct State {
        var registrations: [UInt64: Registration] = [:]
        var nextID: UInt64 = 1
        var started = false
        var stopped = false
    }

    /// The process's poller for signals (`SignalWatcher`) and wall-clock alarms (`WallClockAlarm`),
    /// started on first use and never stopped; nil when the kernel gave no epoll descriptor or thread.
    public static let shared: EventPoller? = {
        guard let poller = try? EventPoller(), poller.start(name: "bl-events") else { return nil }
        return poller
    }()

    private let epollFD: Int32
    /// Written by `stop()` to wake the thread (its events carry the id 0).
    private let wakeFD: Int32
    private let state = Mutex(State())

    public init() throws(EventPoller.Failure) {
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw Failure(code: errno) }
        let wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeFD >= 0 else {
            let error = Failure(code: errno)
            Glibc.close(epollFD)
            throw error
        }
        guard bl_epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, bl_epoll_in, 0) == 0 else {
            let error = Failure(code: errno)
            Glibc.close(wakeFD)
            Glibc.close(epollFD)
            throw error
        }
        self.epollFD = epollFD
        self.wakeFD = wakeFD
    }

    /// The descriptors live as long as the poller (its thread holds it while it runs), so that
    /// `arm` — once per request — needs no lock: `epoll_ctl` on a live epoll descriptor is thread-safe.
    deinit {
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    /// Starts the thread; false when none could be made.
    public func start(name: String = "bl-rpc-events") -> Bool {
        guard
            state.withLock({ state -> Bool in
                guard !state.started, !state.stopped else { return false }
                state.started = true
                return true
            })
        else { return false }
        if PosixThread.detach(name: name, { [self] in loop() }) { return true }
        state.withLock { $0.started = false }
        return false
    }

    /// Stops the thread and forgets every registration.
    public func stop() {
        let wake = state.withLock { state -> Bool in
            defer {
                state.stopped = true
                state.registrations = [:]
            }
            return state.started && !state.stopped
        }
        if wake {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
    }

    /// Watches `fd` for `interest`; `handler` runs on `queue` (nil: on the epoll thread) with the
    /// event's mask (which may also hold `EPOLLHUP`, `EPOLLERR`). Answers the registration's id.
    public func register(
        fd: Int32, interest: Interest, queue: SerialQueue?, handler: @escaping @Sendable (UInt32) -> Void
    ) throws(EventPoller.Failure) -> UInt64 {
        let outcome = state.withLock { state -> Result<UInt64, Failure> in
            guard !state.stopped else { return .failure(Failure(code: EBADF)) }
            let id = state.nextID
            guard bl_epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, interest.rawValue | bl_epoll_oneshot, id) == 0 else {
                return .failure(Failure(code: errno))
            }
            state.nextID += 1
            state.registrations[id] = Registration(queue: queue, handler: handler)
            return .success(id)
        }
        return try outcome.get()
    }

    /// Arms registration `id` (descriptor `fd`) for `interest`, for one event.
    /// Empty: only a hang-up or an error is reported, once. Only between `register`
    /// and `unregister`, by the registration's owner (a connection, on its queue).
    public func arm(_ id: UInt64, fd: Int32, interest: Interest) {
        _ = bl_epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, interest.rawValue | bl_epoll_oneshot, id)
    }

    /// Removes registration `id`; its descriptor may be closed as soon as this returns.
    public func unregister(_ id: UInt64, fd: Int32) {
        state.withLock { state in
            // After `stop()` there are none: the descriptor leaves epoll when it is closed.
            guard state.registrations.removeValue(forKey: id) != nil else { return }
            _ = bl_epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, 0, 0)
        }
    }

    private func loop() {
        var masks = [UInt32](repeating: 0, count: 64)
        var data = [UInt64](repeating: 0, count: 64)
        while true {
            let count = bl_epoll_wait(epollFD, &masks, &data, -1)
            if count < 0 {
                if errno == EINTR { continue }
                break
            }
            for index in 0..<Int(count) {
                let id = data[index]
                if id == 0 {
                    if state.withLock({ $0.stopped }) { return }
                    continue
                }
                // Looked up now: a registration removed meanwhile gets nothing.
                guard let registration = state.withLock({ $0.registrations[id] }) else { continue }
                let mask = masks[index]
                if let queue = registration.queue {
                    queue.async { registration.handler(mask) }
                } else {
                    registration.handler(mask)
                }
            }
        }
    }
}
