import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// Turns signals into a callback on a dispatch queue, or into an async
/// sequence. The signals' default actions are ignored while watched, and the
/// signals are unblocked (a parent may have started us with them blocked).
///
/// `@unchecked Sendable` is safe: the only state is an immutable array of
/// dispatch sources, and `DispatchSource.cancel()` may be called from any thread.
public final class SignalWatcher: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    public init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for number in signals { sigaddset(&unblock, number) }
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
        let queue = DispatchQueue(label: "browser-login.signals")
        // A source is registered asynchronously, and a signal that arrives
        // between ignoring it and that registration is lost: return only once
        // every source is registered, so "watched from here on" holds.
        let registered = DispatchGroup()
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { handler(number) }
            registered.enter()
            source.setRegistrationHandler { registered.leave() }
            source.resume()
            return source
        }
        registered.wait()
    }

    public func cancel() { for source in sources { source.cancel() } }

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
