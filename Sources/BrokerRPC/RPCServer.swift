import Synchronization
import SystemSupport

/// Handles one request or notification. Throw an `RPCError` to answer with
/// it; for a notification the result (or error) is discarded. Calls run
/// concurrently, so a slow one never holds up another.
public typealias RPCHandler =
    @Sendable (_ context: RPCRequestContext, _ method: String, _ params: JSONValue?) async throws(RPCError) -> JSONValue

/// Answers a request at once, on the connection's I/O queue, with the
/// serialized JSON of its result (as `JSONValue.serialized()` writes it), or
/// returns nil to hand it to the `RPCHandler`. For cheap, non-blocking reads
/// only (the broker's `session.get`): it runs on the queue that serves other
/// connections too, and only for a single plain request (not a notification,
/// not a batch) whose params are absent or an object of at most 16 members:
/// `params` holds them in order (no dictionary: a method's few params are
/// found by comparing names; no name repeats).
public typealias RPCFastHandler =
    @Sendable (_ context: RPCRequestContext, _ method: String, _ params: [(String, JSONValue)]) -> [UInt8]?

/// Configuration of an `RPCServer`.
public struct RPCServerConfiguration: Sendable {
    /// Where the server listens.
    public enum Listen: Sendable, Hashable {
        /// Bind this path: its parent directory is created `0700` when
        /// missing, a stale socket there is replaced (any other file is
        /// refused), and the socket is made `0600`. Removed on shutdown.
        case path(String)
        /// An already-listening Unix stream socket (systemd's `LISTEN_FDS`).
        /// The server owns it from then on and closes it on shutdown.
        case fileDescriptor(Int32)
    }

    public var listen: Listen
    /// Connections from any other uid are closed before anything is read.
    /// Default: the effective uid of this process.
    public var allowedUID: UInt32
    /// Serial queues that serve the connections' I/O (run by `RPCServer.ioPool`'s two threads). Default 2.
    public var ioQueueCount: Int
    /// The largest message accepted. Default 1 MiB.
    public var maxMessageSize: Int
    /// A connection that does not read its replies is closed when it has
    /// unsent output and another message would take it over this. One
    /// message of any size is always queued on a connection with nothing
    /// pending. Default 4 MiB.
    public var maxQueuedOutput: Int
    /// The unsent output of all connections of one peer process (pid): a
    /// connection of a process that has unsent output, whose message would
    /// take the process over this, is closed (a slow reader); while the
    /// process has half of it unsent, its new requests are answered `BUSY`.
    /// A process with nothing unsent always has its reply queued. Default 16 MiB.
    public var maxQueuedOutputPerProcess: Int = 16 * 1_048_576
    /// The unsent output of all connections together: a message that would
    /// take it over this closes its connection (a slow reader) when its
    /// process has unsent output already, and while three quarters of it are
    /// in use new requests of processes with unsent output are answered
    /// `BUSY` (a process that reads its replies is always served). Default 64 MiB.
    public var outputBudget: Int
    /// Connections served at once; at the limit the connection idle longest
    /// is closed to make room (see `reservedConnections`). Default 512.
    public var maxConnections: Int
    /// Connections beyond `maxConnections`, when none is idle, for processes
    /// that have no connection open yet (the CLI, a newly started app).
    /// Everyone else is answered `BUSY` and closed. Default 32.
    public var reservedConnections: Int
    /// Connections one peer process (pid) may hold; past it a new one closes
    /// an idle connection of the same process, else gets `BUSY`. Default 128.
    public var maxConnectionsPerProcess: Int = RPCServerConfiguration.defaultMaxConnectionsPerProcess
    /// How long a connection must have been idle before it may be closed to
    /// make room. Default 0.5 s.
    public var minimumIdleBeforeEviction: Duration = .milliseconds(500)
    /// Requests of one connection handled at once; past it the connection is
    /// not read until some complete. Default 64.
    public var maxInFlightPerConnection: Int
    /// How long shutdown waits for requests in flight before cancelling them. Default 5 s.
    public var shutdownGracePeriod: Duration
    /// The listen backlog. Default 128.
    public var backlog: Int32

    public init(
        listen: Listen,
        allowedUID: UInt32? = nil,
        ioQueueCount: Int = 2,
        maxMessageSize: Int = RPCFrameDecoder.defaultMaxMessageSize,
        maxQueuedOutput: Int = 4 * 1_048_576,
        outputBudget: Int = 64 * 1_048_576,
        maxConnections: Int = RPCServerConfiguration.defaultMaxConnections,
        reservedConnections: Int = RPCServerConfiguration.defaultReservedConnections,
        maxInFlightPerConnection: Int = 64,
        shutdownGracePeriod: Duration = .seconds(5),
        backlog: Int32 = 128
    ) {
        self.listen = listen
        self.allowedUID = allowedUID ?? Syscalls.effectiveUID
        self.ioQueueCount = max(1, ioQueueCount)
        self.maxMessageSize = maxMessageSize
        self.maxQueuedOutput = max(1, maxQueuedOutput)
        self.outputBudget = max(1, outputBudget)
        self.maxConnections = max(1, maxConnections)
        self.reservedConnections = max(0, reservedConnections)
        self.maxInFlightPerConnection = max(2, maxInFlightPerConnection)
        self.shutdownGracePeriod = shutdownGracePeriod
        self.backlog = backlog
    }

    public static let defaultMaxConnections = 512
    public static let defaultReservedConnections = 32
    public static let defaultMaxConnectionsPerProcess = 128
}

/// Why the server could not start. The messages name no path.
public enum RPCServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The socket's directory could not be created or is not a directory.
    case directoryUnavailable(Errno)
    case pathOccupied
    case pathTooLong
    case notAListeningSocket
    case socketFailed(Errno)
    case bindFailed(Errno)
    case listenFailed(Errno)
    /// `run()` was called twice.
    case alreadyRunning

    public var description: String {
        switch self {
        case .directoryUnavailable(let e): "the socket directory could not be created (\(e))"
        case .pathOccupied: "a file that is not a socket is in the way of the socket; remove it"
        case .pathTooLong: "the socket path is too long for a Unix socket (at most 107 bytes)"
        case .notAListeningSocket: "the passed file descriptor is not a listening stream socket"
        case .socketFailed(let e): "could not create the socket (\(e))"
        case .bindFailed(let e): "could not bind the socket (\(e)); is another broker running?"
        case .listenFailed(let e): "could not listen on the socket (\(e))"
        case .alreadyRunning: "the server is already running"
        }
    }
}

/// What the server reports, for logs and counters.
public enum RPCServerEvent: Sendable, Hashable {
    case connectionOpened(connectionID: UInt64, peer: RPCPeer)
    case connectionClosed(connectionID: UInt64, reason: RPCCloseReason)
    /// A peer of another uid was closed before anything was read.
    case peerRefused(peer: RPCPeer)
    /// `SO_PEERCRED` failed; the connection was closed.
    case peerUnknown(Errno)
    /// A message was refused as a whole (over the limit, broken framing).
    case frameRejected(connectionID: UInt64, error: RPCFrameError)
    /// `accept` failed (for example EMFILE: the process is out of file
    /// descriptors); accepting pauses for 100 ms.
    case acceptFailed(Errno)
    /// At the connection limit with no idle connection to close and no
    /// reserved slot for this peer: answered `BUSY` and closed.
    case connectionRefusedBusy(peer: RPCPeer, open: Int)
    /// The peer's process holds `maxConnectionsPerProcess` connections, none
    /// idle: the new one was answered `BUSY` and closed.
    case connectionRefusedProcessLimit(peer: RPCPeer, held: Int)
    /// At the connection limit: this idle connection was closed to make room.
    case idleConnectionEvicted(connectionID: UInt64, peer: RPCPeer)
    /// A connection that did not read its replies was closed:
    /// `unsentBytes` were queued for it, `totalUnsentBytes` for all
    /// connections; `reason` is `.outputOverflow` (its own cap),
    /// `.outputProcessBudgetSpent` (its process's budget) or
    /// `.outputBudgetSpent` (the server's budget).
    case slowReaderDropped(
        connectionID: UInt64, peer: RPCPeer, unsentBytes: Int, totalUnsentBytes: Int, reason: RPCCloseReason)
}

/// Counters of a server.
public struct RPCServerStatistics: Sendable, Hashable {
    public var accepted = 0
    public var refused = 0
    public var open = 0
    /// Messages (single requests, notifications or batches) taken for handling.
    public var messages = 0
    /// Messages taken and not yet answered.
    public var inFlight = 0
    /// Connections answered `BUSY` and closed at the connection limit.
    public var refusedBusy = 0
    /// Idle connections closed to make room at the connection limit.
    public var evictedIdle = 0
    /// Connections closed because they did not read their replies.
    public var slowReadersDropped = 0
    /// Requests answered `BUSY` because the output budget was nearly spent.
    public var requestsRefusedBusy = 0
    /// Closed by their peer while requests were in flight (those were cancelled).
    public var hungUp = 0
    /// Unsent output of all connections now, in bytes.
    public var unsentBytes = 0
}

/// JSON-RPC 2.0 over a Unix stream socket.
///
/// `init` binds and listens (so clients can connect at once); `run()`
/// serves until `shutdown()` is called or its task is cancelled, then stops
/// accepting, lets requests in flight finish (up to the grace period), closes
/// every connection, removes the socket file it created, and returns.
///
/// ```swift
/// let server = try RPCServer(configuration: .init(listen: .path(path))) { context, method, params throws(RPCError) in
///     switch method {
///     case "broker.info": return ["version": "1.0"]
///     default: throw .methodNotFound(method)
///     }
/// }
/// try await server.run()
/// ```
public final class RPCServer: Sendable {
    public let configuration: RPCServerConfiguration
    private let handler: RPCHandler
    private let fastHandler: RPCFastHandler?
    private let events: @Sendable (RPCServerEvent) -> Void
    private let listenFD: Int32
    /// The path bound and its inode, to remove exactly that socket at shutdown.
    private let boundPath: (path: String, device: UInt64, inode: UInt64)?
    /// The threads that run every server's I/O queues and accept queue in this process: two, apart from
    /// the global executor's (a handler's work on a busy executor never holds up reading and answering),
    /// as libdispatch's queues of their own were until round 14 (docs/performance.md).
    static let ioPool = ThreadPool(name: "bl-rpc-io", maximumThreads: 2)
    private let acceptQueue = SerialQueue(label: "browser-login.rpc.accept", pool: RPCServer.ioPool)
    /// Decodes the large messages of every connection, one at a time (`largeMessage`), at a lower priority.
    private let bulk = BulkLane()
    private let ioQueues: [SerialQueue]
    /// One read buffer per I/O queue, shared by that queue's connections.
    private let readBuffers: [ReadBuffer]
    /// One lane per I/O queue for the turns of its connections that move bulk (`BackgroundTurns`).
    private let backgroundTurns: [BackgroundTurns]
    /// Ends when `shutdown()` is called.
    private let stopSignal: AsyncStream<Void>
    private let stopContinuation: AsyncStream<Void>.Continuation
    private let budget: OutputBudget
    private let policy: ConnectionPolicy
    /// The connections' readiness, from an epoll thread of the server's own (`EventPoller`), running
    /// from `run()` until it returns.
    private let poller: EventPoller

    private struct State {
        var running = false
        var stopping = false
        var listenerClosed = false
        var nextConnectionID: UInt64 = 1
        var connections: [UInt64: RPCConnection] = [:]
        /// Idle connections being closed to make room (not counted as open).
        var evicting: Set<UInt64> = []
        /// Open connections per peer process.
        var peerConnections: [Int32: Int] = [:]
        var statistics = RPCServerStatistics()
        /// Set when `run()` was cancelled (a hard stop).
        var cancelled = false
    }
    private let state = Mutex(State())
    /// Touched only on `acceptQueue`. `@unchecked Sendable` box: see `AcceptSourceBox`.
    private let acceptSource = AcceptSourceBox()

    /// Binds (or adopts) the socket and listens. Nothing is served before `run()`.
    public init(
        configuration: RPCServerConfiguration,
        events: @escaping @Sendable (RPCServerEvent) -> Void = { _ in },
        fast: RPCFastHandler? = nil,
        handler: @escaping RPCHandler
    ) throws(RPCServerError) {
        self.configuration = configuration
        self.handler = handler
        self.fastHandler = fast
        self.events = events
        self.ioQueues = (0..<configuration.ioQueueCount).map {
            SerialQueue(label: "browser-login.rpc.io.\($0)", pool: RPCServer.ioPool)
        }
        self.readBuffers = ioQueues.map { _ in ReadBuffer() }
        self.backgroundTurns = ioQueues.map { BackgroundTurns(queue: $0) }
        do {
            poller = try EventPoller()
        } catch {
            throw .socketFailed(Errno(rawValue: error.code))
        }
        (stopSignal, stopContinuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
        budget = OutputBudget(
            total: configuration.outputBudget, perConnection: configuration.maxQueuedOutput,
            perProcess: configuration.maxQueuedOutputPerProcess)
        policy = ConnectionPolicy(
            maxConnections: configuration.maxConnections, reservedConnections: configuration.reservedConnections,
            maxPerProcess: max(1, configuration.maxConnectionsPerProcess),
            minimumIdleNanoseconds: UInt64(configuration.minimumIdleBeforeEviction.components.seconds) * 1_000_000_000
                + UInt64(configuration.minimumIdleBeforeEviction.components.attoseconds / 1_000_000_000))
        switch configuration.listen {
        case .fileDescriptor(let fd):
            guard (try? Syscalls.isListeningStreamSocket(fd)) == true else { throw .notAListeningSocket }
            do {
                try Syscalls.makeNonBlockingCloseOnExec(fd)
            } catch {
                throw .socketFailed(error)
            }
            listenFD = fd
            boundPath = nil
        case .path(let path):
            (listenFD, boundPath) = try Self.bindPath(path, backlog: configuration.backlog)
        }
    }

    deinit {
        // Only when run() never ran (run() closes the listener itself).
        if !set(\.listenerClosed) { closeListener() }
    }

    /// Sets a flag of the state; answers whether it was set already.
    private func set(_ flag: WritableKeyPath<State, Bool>) -> Bool {
        state.withLock { state in
            defer { state[keyPath: flag] = true }
            return state[keyPath: flag]
        }
    }

    private static func bindPath(
        _ path: String, backlog: Int32
    ) throws(RPCServerError) -> (Int32, (path: String, device: UInt64, inode: UInt64)) {
        guard path.utf8.count <= 107, !path.isEmpty else { throw .pathTooLong }
        let directory = Self.parentDirectory(of: path)
        do throws(Errno) {
            if let status = try Syscalls.lstat(directory) {
                guard status.isDirectory else { throw .notDirectory }
            } else {
                try Syscalls.mkdir(directory, mode: 0o700)
            }
        } catch {
            throw .directoryUnavailable(error)
        }
        do {
            if let existing = try Syscalls.lstat(path) {
                guard existing.isSocket else { throw RPCServerError.pathOccupied }
                try Syscalls.unlink(path)
            }
        } catch let error as RPCServerError {
            throw error
        } catch {
            throw .bindFailed((error as? Errno) ?? .invalidArgument)
        }
        let fd: Int32
        do {
            fd = try Syscalls.unixStreamSocket()
        } catch {
            throw .socketFailed(error)
        }
        do {
            try Syscalls.bind(fd, path: path)
        } catch {
            Syscalls.close(fd)
            throw error == .nameTooLong ? .pathTooLong : .bindFailed(error)
        }
        let identity: FileStatus
        do throws(Errno) {
            // Owner-only before anyone can connect (the directory is 0700 as well).
            try Syscalls.chmod(path, mode: 0o600)
            try Syscalls.makeNonBlockingCloseOnExec(fd)
            try Syscalls.listen(fd, backlog: backlog)
            guard let status = try Syscalls.lstat(path) else { throw Errno.noSuchFile }
            identity = status
        } catch {
            Syscalls.close(fd)
            try? Syscalls.unlink(path)
            throw .listenFailed(error)
        }
        return (fd, (path, identity.device, identity.inode))
    }

    private static func parentDirectory(of path: String) -> String {
        let bytes = Array(path.utf8)
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "." }
        if slash == 0 { return "/" }
        return String(decoding: bytes[..<slash], as: UTF8.self)
    }

    /// The current counters.
    public var statistics: RPCServerStatistics {
        var statistics = state.withLock { $0.statistics }
        statistics.unsentBytes = budget.current
        return statistics
    }

    /// Connections open now.
    public var connections: [RPCConnection] { state.withLock { Array($0.connections.values) } }

    // MARK: Running

    /// Serves until `shutdown()` or cancellation, then stops and returns.
    ///
    /// `shutdown()` is the graceful stop: accepting and reading end at once,
    /// requests in flight get up to `shutdownGracePeriod` to finish (then they
    /// are cancelled), their replies are written, and every connection is
    /// closed. Cancelling the task that runs `run()` is the hard stop: the
    /// handlers are cancelled at once (they still answer, if they do), then the
    /// same steps follow.
    public func run() async throws {
        if set(\.running) { throw RPCServerError.alreadyRunning }
        guard poller.start() else { throw RPCServerError.socketFailed(.wouldBlock) }
        defer { poller.stop() }
        // Without its thread, large messages are decoded on the shared pool instead.
        _ = bulk.start()
        defer { bulk.stop() }

        acceptQueue.async { self.startAccepting() }
        await withTaskCancellationHandler {
            for await _ in stopSignal {}
        } onCancel: {
            self.state.withLock { $0.cancelled = true }
            self.shutdown()
        }
        // shutdown() was called (or the task was cancelled, which also
        // cancels the handlers at once). New requests are no longer taken.
        shutdown()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            acceptQueue.async {
                self.stopAccepting()
                done.resume()
            }
        }
        // The listener is closed (and its socket file gone) by `stopAccepting`.
        for _ in 0..<200 where !state.withLock({ $0.listenerClosed }) { await pause() }
        await eachConnection { $0.stopReading() }
        let deadline = ContinuousClock.now + configuration.shutdownGracePeriod
        while state.withLock({ $0.statistics.inFlight > 0 && !$0.cancelled }) && ContinuousClock.now < deadline {
            await pause()
        }
        await eachConnection { $0.cancelHandlers() }
        // Cancelled handlers still answer (if they do); their replies are written below.
        while state.withLock({ $0.statistics.inFlight }) > 0 {
            await eachConnection { $0.cancelHandlers() }
            await pause()
        }
        await eachConnection { $0.flushAndClose() }
    }

    /// Asks `run()` to stop (it returns once stopped). Safe to call from anywhere, more than once.
    public func shutdown() {
        if !set(\.stopping) { stopContinuation.finish() }
    }

    /// Waits 5 ms (also when the task is cancelled).
    private func pause() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            acceptQueue.asyncAfter(.milliseconds(5)) { done.resume() }
        }
    }

    /// Runs `body` on each open connection's queue, and waits until all ran.
    private func eachConnection(_ body: @escaping @Sendable (ConnectionIO) -> Void) async {
        let all = connections
        guard !all.isEmpty else { return }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let left = Countdown(all.count)
            for connection in all {
                let io = connection.io
                io.queue.async {
                    body(io)
                    if left.tick() { done.resume() }
                }
            }
        }
    }

    // MARK: Accepting (on acceptQueue)

    /// Watches the listener on the server's epoll thread (one-shot, like the connections: armed again
    /// after each round of accepts); its events run `acceptReady` on `acceptQueue`.
    private func startAccepting() {
        guard !state.withLock({ $0.stopping }) else { return }
        do {
            acceptSource.registration = try poller.register(fd: listenFD, interest: .readable, queue: acceptQueue) {
                [self] _ in self.acceptReady()
            }
        } catch {
            // No way to hear of connections: the server stops (and the daemon with it).
            events(.acceptFailed(Errno(rawValue: error.code)))
            shutdown()
        }
    }

    private func acceptReady() {
        guard acceptSource.registration != nil else { return }
        acceptPending()
        if !acceptSource.paused { armListener() }
    }

    private func armListener() {
        guard let registration = acceptSource.registration else { return }
        poller.arm(registration, fd: listenFD, interest: .readable)
    }

    private func stopAccepting() {
        if let registration = acceptSource.registration {
            poller.unregister(registration, fd: listenFD)
            acceptSource.registration = nil
            acceptSource.paused = false
        }
        if !set(\.listenerClosed) { closeListener() }
    }

    /// Closes the listener and removes the socket file if it is still the one bound here.
    private func closeListener() {
        Syscalls.close(listenFD)
        if let boundPath, let status = try? Syscalls.lstat(boundPath.path), status.isSocket,
            status.device == boundPath.device, status.inode == boundPath.inode
        {
            try? Syscalls.unlink(boundPath.path)
        }
    }

    private func acceptPending() {
        while true {
            let fd: Int32
            do {
                guard let accepted = try Syscalls.accept(listenFD) else { return }
                fd = accepted
            } catch {
                events(.acceptFailed(error))
                if error == .tooManyOpenFiles || error == .tooManyOpenFilesInSystem { evictForDescriptor() }
                pauseAccepting()
                return
            }
            admit(fd)
        }
    }

    /// Out of descriptors: closes the connection idle longest, if any, so that
    /// the pending connection can be accepted after the pause.
    private func evictForDescriptor() {
        let victim = state.withLock { state -> RPCConnection? in
            let candidates = state.connections.values.filter { !state.evicting.contains($0.id) }
            guard
                let oldest = candidates.compactMap({ c in c.idleSince.map { (c, $0) } }).min(by: { $0.1 < $1.1 })?.0
            else { return nil }
            state.evicting.insert(oldest.id)
            return oldest
        }
        if let victim { evict(victim) }
    }

    /// After an accept failure (EMFILE…), waits a little instead of spinning.
    private func pauseAccepting() {
        guard acceptSource.registration != nil, !acceptSource.paused else { return }
        acceptSource.paused = true
        acceptQueue.asyncAfter(.milliseconds(100)) { [self] in
            guard self.acceptSource.registration != nil, self.acceptSource.paused else { return }
            self.acceptSource.paused = false
            self.armListener()
        }
    }

    /// Checks the peer of a new connection before reading anything, applies
    /// the connection limit, then serves it.
    private func admit(_ fd: Int32) {
        let credentials: PeerCredentials
        do {
            credentials = try Syscalls.peerCredentials(fd)
        } catch {
            Syscalls.close(fd)
            state.withLock { $0.statistics.refused += 1 }
            events(.peerUnknown(error))
            return
        }
        let peer = RPCPeer(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid)
        guard peer.uid == configuration.allowedUID else {
            Syscalls.close(fd)
            state.withLock { $0.statistics.refused += 1 }
            events(.peerRefused(peer: peer))
            return
        }
        do {
            try Syscalls.makeNonBlockingCloseOnExec(fd)
        } catch {
            Syscalls.close(fd)
            events(.acceptFailed(error))
            return
        }
        // The new connection's id (nil: refused), the idle connection to close for it, the open count,
        // and whether a refusal is the process's own cap.
        let (admitted, victim, open, processLimit) = state.withLock {
            state -> (UInt64?, RPCConnection?, Int, Bool) in
            let open = state.connections.count - state.evicting.count
            let evicting = state.evicting
            let counts = state.peerConnections
            let decision = policy.decide(
                open: open, total: state.connections.count, peerConnections: counts[peer.pid, default: 0],
                candidates: state.connections.values.lazy.filter { !evicting.contains($0.id) }.map {
                    ConnectionPolicy.Candidate(
                        id: $0.id, idleSince: $0.idleSince, peerConnections: counts[$0.peer.pid, default: 1],
                        sameProcess: $0.peer.pid == peer.pid)
                })
            var victim: RPCConnection?
            switch decision {
            case .refuse, .refuseProcessLimit:
                state.statistics.refusedBusy += 1
                return (nil, nil, open, decision == .refuseProcessLimit)
            case .admitEvicting(let id):
                victim = state.connections[id]
                state.evicting.insert(id)
            case .admit, .admitReserved:
                break
            }
            defer { state.nextConnectionID += 1 }
            return (state.nextConnectionID, victim, open, false)
        }
        guard let id = admitted else {
            // Recorded before the answer: whoever has the BUSY answer finds it logged.
            if processLimit {
                events(.connectionRefusedProcessLimit(peer: peer, held: policy.maxPerProcess))
                refuseBusy(fd, error: processLimitError())
            } else {
                events(.connectionRefusedBusy(peer: peer, open: open))
                refuseBusy(fd, error: busyError(open: open, evicted: false))
            }
            return
        }
        if let victim { evict(victim) }
        let queueIndex = Int(id % UInt64(ioQueues.count))
        let queue = ioQueues[queueIndex]
        let limits = ConnectionIO.Limits(
            maxMessageSize: configuration.maxMessageSize, maxInFlight: configuration.maxInFlightPerConnection)
        let events = self.events
        let budget = self.budget
        let io = ConnectionIO(
            connectionID: id, peer: peer, fd: fd, queue: queue, readBuffer: readBuffers[queueIndex],
            backgroundTurns: backgroundTurns[queueIndex], limits: limits, budget: budget, poller: poller,
            submit: { [weak self] io, token, bytes in self?.submit(io: io, token: token, bytes: bytes) ?? .refused },
            onFrameError: { error in events(.frameRejected(connectionID: id, error: error)) },
            onSlowReader: { [weak self] unsent, reason in
                self?.state.withLock { $0.statistics.slowReadersDropped += 1 }
                events(
                    .slowReaderDropped(
                        connectionID: id, peer: peer, unsentBytes: unsent, totalUnsentBytes: budget.current,
                        reason: reason))
            })
        let connection = RPCConnection(id: id, peer: peer, io: io)
        state.withLock { state in
            state.connections[id] = connection
            state.peerConnections[peer.pid, default: 0] += 1
            state.statistics.accepted += 1
            state.statistics.open += 1
        }
        events(.connectionOpened(connectionID: id, peer: peer))
        queue.async { [weak self] in
            io.onClosed = { [weak self] reason in
                // Taken out of the registry strongly, so that its onClose hooks
                // run even when nobody else holds the connection.
                let removed = self?.state.withLock { state -> RPCConnection? in
                    state.statistics.open -= 1
                    if reason == .peerHungUp { state.statistics.hungUp += 1 }
                    state.evicting.remove(id)
                    let count = state.peerConnections[peer.pid, default: 1] - 1
                    state.peerConnections[peer.pid] = count > 0 ? count : nil
                    return state.connections.removeValue(forKey: id)
                }
                events(.connectionClosed(connectionID: id, reason: reason))
                removed?.didClose()
            }
            if self == nil || self?.state.withLock({ $0.stopping }) == true {
                io.close(.serverShutdown)
            } else {
                io.start()
            }
        }
    }

    /// The error sent to a connection refused, or closed to make room, at the connection limit.
    private func busyError(open: Int, evicted: Bool) -> RPCError {
        let message =
            evicted
            ? "the broker is at its connection limit (\(configuration.maxConnections)) and closed this connection, idle longest, to make room; connect again when needed"
            : "the broker is at its connection limit (\(open) connections open, none idle); close unused connections or try again later"
        return .application(code: "BUSY", message: message)
    }

    /// The error sent to a connection refused because its process holds as many as one process may.
    private func processLimitError() -> RPCError {
        .application(
            code: "BUSY",
            message:
                "this process holds \(policy.maxPerProcess) connections to the broker, the most one process may, none of them idle; close unused connections"
        )
    }

    /// Answers one `BUSY` error (NDJSON, `"id": null`) and closes, without reading requests.
    private func refuseBusy(_ fd: Int32, error: RPCError) {
        let body = RPCCodec.encode(RPCResponse(id: .null, error: error))
        _ = try? Syscalls.send(fd, RPCFrameEncoder.encode(body, framing: .ndjson), from: 0)
        // Take what the peer sent already, so that closing does not reset the
        // connection before it reads the error.
        var scratch = [UInt8](repeating: 0, count: 4096)
        _ = try? Syscalls.read(fd, into: &scratch)
        Syscalls.close(fd)
    }

    /// Closes an idle connection to make room (unless it became busy meanwhile).
    private func evict(_ connection: RPCConnection) {
        let io = connection.io
        let notice = RPCCodec.encode(RPCResponse(id: .null, error: busyError(open: 0, evicted: true)))
        io.queue.async { [self] in
            if io.evictIfIdle(notice: notice, stillIdle: connection.holdCount <= 0) {
                state.withLock { $0.statistics.evictedIdle += 1 }
                events(.idleConnectionEvicted(connectionID: connection.id, peer: connection.peer))
            } else {
                _ = state.withLock { $0.evicting.remove(connection.id) }
            }
        }
    }

    // MARK: Handling

    /// Messages larger than this are decoded on `bulk`, one at a time, never on an I/O queue: a
    /// process sending 1 MiB requests then spends one lane of its own, not the queue that answers the
    /// connections of others. An immediate method's request (`RPCFastHandler`) is far smaller.
    static let largeMessage = 16_384

    /// Called on the connection's queue for each complete message.
    private func submit(io: ConnectionIO, token: UInt64, bytes: [UInt8]) -> ConnectionIO.Submitted {
        let connection = state.withLock { state -> RPCConnection? in
            guard !state.stopping, let connection = state.connections[io.connectionID] else { return nil }
            state.statistics.inFlight += 1
            state.statistics.messages += 1
            return connection
        }
        guard let connection else { return .refused }
        let refusal = budget.refusal(for: io.peer.pid)
        if bytes.count > Self.largeMessage {
            bulk.async { [self] in
                let incoming = RPCCodec.decodeIncoming(bytes)
                let answer = immediateReply(to: incoming, refusal)
                io.queue.async { [self] in
                    if let answer {
                        io.decoded(token: token, work: nil)
                        io.finished(handler: token, reply: answer)
                    } else if io.closed {
                        state.withLock { $0.statistics.inFlight -= 1 }
                        io.decoded(token: token, work: nil)
                    } else {
                        io.decoded(token: token, work: handle(incoming, io: io, token: token, connection: connection))
                    }
                }
            }
            return .decoding
        }
        if let fastHandler, refusal == nil, let request = RPCCodec.plainRequest(bytes),
            let result = fastHandler(
                RPCRequestContext(connection: connection, requestID: request.id), request.method, request.params)
        {
            // Answered here, on the connection's queue: no task, no hop.
            state.withLock { $0.statistics.inFlight -= 1 }
            return .answered(RPCCodec.encode(id: request.id, serializedResult: result))
        }
        let incoming = RPCCodec.decodeIncoming(bytes)
        if let answer = immediateReply(to: incoming, refusal) { return .answered(answer) }
        return .started(handle(incoming, io: io, token: token, connection: connection))
    }

    /// The reply given without handling: `BUSY` while `refusal` holds, or the reply to a message with
    /// no valid request; nil (not `.some(nil)`) when the message is to be handled. Counts it answered.
    private func immediateReply(to incoming: RPCIncoming, _ refusal: OutputBudget.Refusal?) -> [UInt8]?? {
        if let refusal {
            // This process does not read its replies, and they use up its budget
            // (or, with others', most of the total): take no new work from it.
            state.withLock {
                $0.statistics.inFlight -= 1
                $0.statistics.requestsRefusedBusy += 1
            }
            return .some(Self.busyReply(to: incoming, refusal))
        }
        if let reply = Self.inlineReply(to: incoming) {
            // Nothing to handle (malformed, or only invalid elements): answered here.
            state.withLock { $0.statistics.inFlight -= 1 }
            return .some(reply)
        }
        return nil
    }

    /// The work that handles `incoming`, started by `io` as a task of its own; its reply goes back to `io`
    /// on its queue (written by the task's own thread when the queue is idle).
    private func handle(
        _ incoming: RPCIncoming, io: ConnectionIO, token: UInt64, connection: RPCConnection
    ) -> @Sendable () async -> Void {
        let handler = self.handler
        return { [self] in
            let reply = await RPCDispatcher.reply(to: incoming) { request in
                do throws(RPCError) {
                    let context = RPCRequestContext(connection: connection, requestID: request.id)
                    return .success(try await handler(context, request.method, request.params))
                } catch {
                    return .failure(error)
                }
            }?.serialized()
            self.state.withLock { $0.statistics.inFlight -= 1 }
            // The task ends here: its thread answers, unless the queue is busy.
            io.queue.runHereOrAsync { io.finished(handler: token, reply: reply) }
        }
    }

    /// The reply to a message that holds no valid request (a parse error, an
    /// invalid request, a batch of invalid elements); nil when it holds one.
    static func inlineReply(to incoming: RPCIncoming) -> [UInt8]?? {
        var holdsRequest = false
        let reply = reply(to: incoming) { _ in
            holdsRequest = true
            return nil
        }
        return holdsRequest ? nil : .some(reply)
    }

    /// `BUSY` for each request of `incoming` (nil when it has none).
    static func busyReply(to incoming: RPCIncoming, _ refusal: OutputBudget.Refusal) -> [UInt8]? {
        let message =
            switch refusal {
            case .process(let unsent):
                "this process has \((unsent + 1_048_575) / 1_048_576) MiB of replies it has not read, half of what one process may have queued; read your replies, then try again"
            case .total:
                "the broker's memory budget for unread replies is nearly spent and this process has replies it has not read; read your replies, then try again"
            }
        let error = RPCError.application(code: "BUSY", message: message)
        return reply(to: incoming) { request in request.id.map { RPCResponse(id: $0, error: error) } }
    }

    /// The reply to `incoming` with each invalid element answered with its
    /// error and each request with `answer` (nil: none); nil when none is due.
    private static func reply(to incoming: RPCIncoming, _ answer: (RPCRequest) -> RPCResponse?) -> [UInt8]? {
        func response(_ element: RPCIncomingElement) -> RPCResponse? {
            switch element {
            case .invalid(let id, let error): RPCResponse(id: id, error: error)
            case .request(let request): answer(request)
            }
        }
        switch incoming {
        case .rejected(let error): return RPCCodec.encode(RPCResponse(id: .null, error: error))
        case .single(let element): return response(element).map { RPCCodec.encode($0) }
        case .batch(let elements):
            let responses = elements.compactMap(response)
            return responses.isEmpty ? nil : JSONValue.array(responses.map(\.json)).serialized()
        }
    }
}

/// The listener's registration with the poller and whether accepting is paused.
///
/// `@unchecked Sendable`: both members are read and written only on the
/// server's `acceptQueue` (a serial queue): in `startAccepting`, `acceptReady`,
/// `stopAccepting`, `acceptPending` and `pauseAccepting`, which all run there.
private final class AcceptSourceBox: @unchecked Sendable {
    var registration: UInt64?
    var paused = false
}

/// Counts down from `count`; `tick()` answers true once, for the last tick.
private final class Countdown: Sendable {
    private let left: Atomic<Int>
    init(_ count: Int) { left = Atomic(count) }
    func tick() -> Bool { left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 }
}

/// Turns one incoming message into its reply, running the requests through `perform`.
public enum RPCDispatcher {
    /// The framed-body reply to `bytes`, or nil when none is due (notifications only).
    /// The elements of a batch run concurrently; the batch reply is sent once all are done.
    public static func reply(
        to bytes: [UInt8], perform: @escaping @Sendable (RPCRequest) async -> Result<JSONValue, RPCError>
    ) async -> [UInt8]? {
        await reply(to: RPCCodec.decodeIncoming(bytes), perform: perform)?.serialized()
    }

    /// The reply to a decoded message, or nil when none is due.
    public static func reply(
        to incoming: RPCIncoming, perform: @escaping @Sendable (RPCRequest) async -> Result<JSONValue, RPCError>
    ) async -> JSONValue? {
        switch incoming {
        case .rejected(let error): return RPCResponse(id: .null, error: error).json
        case .single(let element): return await respond(to: element, perform: perform)?.json
        case .batch(let elements):
            let responses = await withTaskGroup(of: (Int, RPCResponse?).self) { group in
                for (index, element) in elements.enumerated() {
                    group.addTask { (index, await respond(to: element, perform: perform)) }
                }
                var collected = [RPCResponse?](repeating: nil, count: elements.count)
                for await (index, response) in group { collected[index] = response }
                return collected.compactMap { $0 }
            }
            return responses.isEmpty ? nil : .array(responses.map(\.json))
        }
    }

    private static func respond(
        to element: RPCIncomingElement, perform: @Sendable (RPCRequest) async -> Result<JSONValue, RPCError>
    ) async -> RPCResponse? {
        switch element {
        case .invalid(let id, let error): return RPCResponse(id: id, error: error)
        case .request(let request):
            let outcome = await perform(request)
            guard let id = request.id else { return nil }
            // An error repeats at most 64 bytes of any string the caller sent.
            return RPCResponse(id: id, outcome: outcome.mapError { InputEcho.scrub($0, of: request) })
        }
    }
}
