import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Turns signals into a callback, or into an async sequence. While watched, a
/// signal's action is a handler that writes its number to a pipe (the
/// self-pipe: async-signal-safe, whichever thread the kernel picks), and the
/// pipe is read by `EventPoller.shared`'s thread, which calls the watchers'
/// handlers there (keep them short: yield to a stream, signal a wake-up). The
/// signals are unblocked (a parent may have started us with them blocked).
/// Once no watcher is left for a signal, it is ignored (`SIG_IGN`).
///
/// No libdispatch: a dispatch signal source would start dispatch's manager
/// thread and its 1 Hz workqueue monitor (Executors.swift).
public final class SignalWatcher: Sendable {
    private let id: UInt64
    private let signals: [Int32]

    public init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        self.signals = signals
        id = SignalHub.shared.add(signals: signals, handler: handler)
    }

    public func cancel() { SignalHub.shared.remove(id) }

    /// The signals as they arrive; the watcher stops when the stream's consumer goes away.
    public static func stream(_ signals: [Int32]) -> AsyncStream<Int32> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        let watcher = SignalWatcher(signals: signals) { continuation.yield($0) }
        continuation.onTermination = { _ in watcher.cancel() }
        return stream
    }

    /// `SIGTERM` or `SIGINT` by name, for logs.
    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGTERM: "SIGTERM"
        case SIGINT: "SIGINT"
        default: "signal \(signal)"
        }
    }
}

/// The write end of the self-pipe, read by the signal handler (an atomic load is async-signal-safe).
private let signalPipeWriter = Atomic<Int32>(-1)

/// The handler of every watched signal: one byte, the signal's number, into the pipe. A full pipe
/// drops the byte (the signals already waiting there are read first, and coalesce anyway).
private func signalArrived(_ number: Int32) {
    let fd = signalPipeWriter.load(ordering: .relaxed)
    guard fd >= 0 else { return }
    let saved = errno
    var byte = UInt8(truncatingIfNeeded: number)
    _ = write(fd, &byte, 1)
    errno = saved
}

/// The process's watchers by id, and the pipe their signals come through.
private final class SignalHub: Sendable {
    static let shared = SignalHub()

    private struct Watcher {
        let signals: Set<Int32>
        let handler: @Sendable (Int32) -> Void
    }
    private struct State {
        var watchers: [UInt64: Watcher] = [:]
        var nextID: UInt64 = 1
        var pipeOpen = false
        var readFD: Int32 = -1
    }
    private let state = Mutex(State())

    func add(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) -> UInt64 {
        openPipe()
        let id = state.withLock { state -> UInt64 in
            defer { state.nextID += 1 }
            state.watchers[state.nextID] = Watcher(signals: Set(signals), handler: handler)
            return state.nextID
        }
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for number in signals {
            sigaddset(&unblock, number)
            var action = sigaction()
            action.__sigaction_handler.sa_handler = signalArrived
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(number, &action, nil)
        }
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
        return id
    }

    func remove(_ id: UInt64) {
        let orphaned = state.withLock { state -> Set<Int32> in
            guard let gone = state.watchers.removeValue(forKey: id) else { return [] }
            let still = state.watchers.values.reduce(into: Set<Int32>()) { $0.formUnion($1.signals) }
            return gone.signals.subtracting(still)
        }
        for number in orphaned { signal(number, SIG_IGN) }
    }

    /// Makes the pipe and has `EventPoller.shared` read it (once per process).
    private func openPipe() {
        let fresh = state.withLock { state -> Bool in
            guard !state.pipeOpen else { return false }
            state.pipeOpen = true
            return true
        }
        guard fresh else { return }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { preconditionFailure("no pipe for the signal watcher (errno \(errno))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        state.withLock { $0.readFD = fds[0] }
        guard let poller = EventPoller.shared,
            let id = try? poller.register(fd: fds[0], interest: .readable, queue: nil, handler: { [self] _ in drain() })
        else {
            preconditionFailure("no event thread for the signal watcher")
        }
        // Before the first byte can come: the handler re-arms the registration by this id.
        registration.withLock { $0 = id }
        signalPipeWriter.store(fds[1], ordering: .releasing)
    }

    /// On the poller's thread: reads the signals waiting and calls their watchers; then waits for more.
    private func drain() {
        let fd = state.withLock { $0.readFD }
        var bytes = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(fd, &bytes, bytes.count)
            guard count > 0 else { break }
            for byte in bytes[0..<count] {
                let number = Int32(byte)
                let handlers = state.withLock { state in
                    state.watchers.sorted { $0.key < $1.key }.filter { $0.value.signals.contains(number) }.map(
                        \.value.handler)
                }
                for handler in handlers { handler(number) }
            }
        }
        rearm()
    }

    private func rearm() {
        // The registration is one-shot: armed again once the pipe is empty.
        guard let poller = EventPoller.shared else { return }
        let fd = state.withLock { $0.readFD }
        if let id = registration.withLock({ $0 }) { poller.arm(id, fd: fd, interest: .readable) }
    }

    private let registration = Mutex<UInt64?>(nil)
}
