import CLinux
import Glibc
import Synchronization
import SystemSupport

/// The credentials of a connected process, read with `SO_PEERCRED` at accept.
public struct RPCPeer: Sendable, Hashable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
}

/// Why a connection was closed.
public enum RPCCloseReason: Sendable, Hashable {
    /// The peer closed its side and every reply was sent.
    case peerClosed
    /// A message was over the size limit (answered `-32600` first).
    case oversize
    /// The `Content-Length` framing was broken (answered `-32700` first).
    case malformedFraming
    /// The peer did not read its replies and more than the connection's
    /// output bound was queued (a slow reader).
    case outputOverflow
    /// The peer did not read its replies while the unsent replies of all
    /// connections had spent the server's output budget (a slow reader).
    case outputBudgetSpent
    /// The peer did not read its replies while the unsent replies of all
    /// connections of its process had spent what one process may queue (a slow reader).
    case outputProcessBudgetSpent
    /// The peer closed the connection (both ways) while requests were in
    /// flight or replies unsent: the requests were cancelled.
    case peerHungUp
    /// Closed to make room for a new connection at the connection limit: it
    /// was the connection idle longest (it was sent one `BUSY` error first).
    case evictedIdle
    case readFailed(Errno)
    case writeFailed(Errno)
    /// `RPCConnection.close()` was called.
    case closedByServer
    /// The server stopped.
    case serverShutdown
}

/// One accepted connection. The daemon keeps it (for example in a
/// subscription) to send notifications; `onClose` tells it when to forget it.
public final class RPCConnection: Sendable {
    /// Unique within one server.
    public let id: UInt64
    public let peer: RPCPeer
    let io: ConnectionIO

    private struct Hooks {
        var closed = false
        var onClose: [@Sendable () -> Void] = []
    }
    private let hooks = Mutex(Hooks())
    /// Holds taken by `hold()` and not yet released.
    private let holds = Atomic<Int>(0)
    /// What the handler keeps with this connection (`attached`).
    @usableFromInline let attachment = Mutex<(AnyObject & Sendable)?>(nil)

    init(id: UInt64, peer: RPCPeer, io: ConnectionIO) {
        self.id = id
        self.peer = peer
        self.io = io
    }

    /// The value the handler keeps with this connection, made by `make` on
    /// first use (the broker: its peer's identity, read once per connection).
    /// One value per connection: a later call with another type replaces it.
    /// An object, so that finding it again is a class check (inlined: for the caller's class).
    @inlinable public func attached<T: AnyObject & Sendable>(_ make: () -> T) -> T {
        attachment.withLock { slot in
            if let value = slot as? T { return value }
            let value = make()
            slot = value
            return value
        }
    }

    /// Sends a notification. Notifications (and replies) go out in the order
    /// their calls were made; on a closed connection this does nothing.
    public func notify(method: String, params: JSONValue? = nil) {
        let body = RPCCodec.encodeNotification(method: method, params: params)
        let io = self.io
        io.queue.async { io.enqueue(body: body) }
    }

    /// Runs `body` once when the connection closes (at once if it already has).
    /// It runs on the connection's I/O queue: keep it short (drop a
    /// subscription, do not await anything).
    public func onClose(_ body: @escaping @Sendable () -> Void) {
        let runNow = hooks.withLock { state -> Bool in
            if state.closed { return true }
            state.onClose.append(body)
            return false
        }
        if runNow { body() }
    }

    public var isClosed: Bool { hooks.withLock { $0.closed } }

    /// Marks the connection as holding state that its peer relies on (an
    /// event subscription): while any hold is taken, it is never closed to
    /// make room for new connections at the connection limit. Balance each
    /// call with `release()` (closing the connection drops them all).
    public func hold() {
        holds.add(1, ordering: .relaxed)
    }

    /// Gives back one `hold()`.
    public func release() {
        holds.subtract(1, ordering: .relaxed)
    }

    /// Holds taken now.
    public var holdCount: Int { holds.load(ordering: .relaxed) }

    /// When the connection became idle (monotonic ns): nothing in flight,
    /// nothing unsent, no hold. nil while busy, held or closed.
    var idleSince: UInt64? {
        guard holds.load(ordering: .relaxed) <= 0 else { return nil }
        let since = io.idleSince.load(ordering: .relaxed)
        return since == 0 ? nil : since
    }

    /// Closes the connection now (queued replies that were not sent are dropped).
    public func close() {
        let io = self.io
        io.queue.async { io.close(.closedByServer) }
    }

    /// Called once, by `ConnectionIO`, when it closed.
    func didClose() {
        let pending = hooks.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            defer { state.onClose = [] }
            return state.onClose
        }
        for body in pending { body() }
    }
}

/// What a handler knows about the request it serves.
public struct RPCRequestContext: Sendable {
    public let connection: RPCConnection
    /// nil for a notification.
    public let requestID: RPCID?

    public var connectionID: UInt64 { connection.id }
    public var peer: RPCPeer { connection.peer }

    /// Sends a notification to this request's connection.
    public func notify(method: String, params: JSONValue? = nil) {
        connection.notify(method: method, params: params)
    }

    /// Runs `body` when this request's connection closes.
    public func onClose(_ body: @escaping @Sendable () -> Void) {
        connection.onClose(body)
    }
}

/// The I/O side of one connection: the descriptor, its poller registration,
/// the framing decoder, the output buffer and the handlers in flight.
///
/// `@unchecked Sendable`: every mutable member is touched only on `queue`
/// (a serial queue) — the sources' handlers run there, and every other
/// caller goes through `queue.async`. The `let` members are immutable, and
/// `idleSince` is an atomic, read from other queues.
final class ConnectionIO: @unchecked Sendable {
    /// What became of one message handed to `submit`.
    enum Submitted {
        /// The server takes no more work; the message gets no reply.
        case refused
        /// Handling is this work, started as a task of the connection's own (`handlers`);
        /// `finished(handler:reply:)` follows on `queue`.
        case started(@Sendable () async -> Void)
        /// Answered at once (the fast path, or `BUSY`), with this reply (nil: none due).
        case answered([UInt8]?)
        /// A large message, decoded away from `queue`; `decoded(token:work:)` follows on `queue`, and
        /// the connection's next messages wait for it (one large message of a connection at a time).
        case decoding
    }

    struct Limits {
        var maxMessageSize: Int
        var maxInFlight: Int
    }

    let connectionID: UInt64
    let peer: RPCPeer
    let fd: Int32
    let queue: SerialQueue
    let limits: Limits
    /// The server's budget for unsent output (shared by all connections).
    let budget: OutputBudget
    /// When the connection became idle (monotonic ns): nothing in flight and
    /// nothing unsent. 0 while busy or closed. Written on `queue` only.
    let idleSince = Atomic<UInt64>(0)
    /// Starts the handling of one message (its handler token given).
    private let submit: @Sendable (ConnectionIO, UInt64, [UInt8]) -> Submitted
    /// The queue's read buffer (shared with the other connections on `queue`).
    private let readBuffer: ReadBuffer
    /// The queue's lane for turns that move bulk (shared with the other connections on `queue`).
    private let backgroundTurns: BackgroundTurns
    /// Called once on `queue` when the connection closed.
    var onClosed: ((RPCCloseReason) -> Void)?
    /// Reports framing failures.
    private let onFrameError: @Sendable (RPCFrameError) -> Void
    /// Reports a slow reader being dropped: its unsent bytes and the reason.
    private let onSlowReader: @Sendable (Int, RPCCloseReason) -> Void

    private var decoder: RPCFrameDecoder
    /// The server's epoll thread, which reports the descriptor's readiness on `queue`.
    private let poller: EventPoller
    /// This connection's registration with `poller`; nil before `start()` and once closed.
    private var registration: UInt64?
    /// What the registration is armed for now (empty after an event: registrations are one-shot).
    private var armed: EventPoller.Interest = []
    private var readPaused = false
    /// Replies wait for the socket to take them.
    private var wantsWrite = false
    /// A turn is queued behind the other connections' events (`scheduleTurn`).
    private var readRequeued = false
    /// Messages framed and not yet handled (`pendingStart` on): a turn handles a few of them.
    private var pending: [RPCFrameEvent] = []
    private var pendingStart = 0
    /// A large message of this connection is being decoded (`Submitted.decoding`).
    private var decodingLarge = false
    /// The last message this connection sent was a large one (`RPCServer.largeMessage`).
    private var lastMessageLarge = false
    private var output: [UInt8] = []
    private var outputStart = 0
    private var inFlight = 0
    /// The tasks handling this connection's messages, by token: cancelled when it closes (at most
    /// `limits.maxInFlight`, and the server's shutdown waits for them).
    private var handlers = TaskSet<UInt64>()
    private var nextHandler: UInt64 = 0
    /// A timer checks for a hang-up while reading is paused or stopped with work left.
    private var watchingHangUp = false
    /// No more requests are read (end of stream, framing failure, or shutdown).
    private var readingStopped = false
    /// Close as soon as the output is written (after a framing failure).
    private var closeWhenFlushed = false
    private(set) var closed = false

    init(
        connectionID: UInt64, peer: RPCPeer, fd: Int32, queue: SerialQueue, readBuffer: ReadBuffer,
        backgroundTurns: BackgroundTurns, limits: Limits, budget: OutputBudget, poller: EventPoller,
        submit: @escaping @Sendable (ConnectionIO, UInt64, [UInt8]) -> Submitted,
        onFrameError: @escaping @Sendable (RPCFrameError) -> Void,
        onSlowReader: @escaping @Sendable (Int, RPCCloseReason) -> Void
    ) {
        self.connectionID = connectionID
        self.peer = peer
        self.fd = fd
        self.queue = queue
        self.readBuffer = readBuffer
        self.backgroundTurns = backgroundTurns
        self.limits = limits
        self.budget = budget
        self.poller = poller
        self.submit = submit
        self.onFrameError = onFrameError
        self.onSlowReader = onSlowReader
        self.decoder = RPCFrameDecoder(maxMessageSize: limits.maxMessageSize)
        // Idle from the start: nothing in flight, nothing unsent.
        idleSince.store(monotonicNanoseconds(), ordering: .relaxed)
    }

    /// The framing replies use (NDJSON until the first byte said otherwise).
    var framing: RPCFraming { decoder.framing ?? .ndjson }

    /// Bytes queued and not yet written.
    private var unsent: Int { output.count - outputStart }

    /// Publishes whether the connection is idle now (for the connection limit).
    private func updateIdle() {
        let idle = !closed && inFlight == 0 && unsent == 0 && pendingStart >= pending.count
        let current = idleSince.load(ordering: .relaxed)
        if idle {
            if current == 0 { idleSince.store(monotonicNanoseconds(), ordering: .relaxed) }
        } else if current != 0 {
            idleSince.store(0, ordering: .relaxed)
        }
    }

    // MARK: Reading

    /// On `queue`: starts reading.
    func start() {
        do {
            registration = try poller.register(fd: fd, interest: .readable, queue: queue) { [self] mask in
                self.handle(mask)
            }
            armed = .readable
        } catch {
            close(.readFailed(Errno(rawValue: error.code)))
            return
        }
        updateIdle()
    }

    /// On `queue`: the descriptor is ready (`mask`: epoll's events); the
    /// registration is disarmed until `arm()`.
    private func handle(_ mask: UInt32) {
        armed = []
        guard !closed else { return }
        let failed = mask & (bl_epoll_err | bl_epoll_hup) != 0
        if wantsWrite, mask & bl_epoll_out != 0 || failed { flush() }
        if !closed, !readingStopped, !readPaused, !readRequeued, mask & bl_epoll_in != 0 || failed {
            if movesBulk {
                takeTurnInBackground()
            } else {
                readAvailable()
            }
        }
        arm()
    }

    /// Whether this connection moves bulk now: it is reading a large message or sent one last, or its
    /// process has replies it has not read. Its turns then wait in the queue's background lane
    /// (`BackgroundTurns`), one at a time between everything else on the queue: a process that streams
    /// 1 MiB requests, or pipelines requests it never reads the answers to, delays another client's
    /// request by one of its turns at most, not by one turn of each of its connections.
    private var movesBulk: Bool {
        lastMessageLarge || decoder.bufferedCount > RPCServer.largeMessage || budget.unsent(of: peer.pid) > 0
    }

    /// Queues the next turn in the background lane (once).
    private func takeTurnInBackground() {
        guard !readRequeued, !closed else { return }
        readRequeued = true
        backgroundTurns.add(self)
    }

    /// On `queue`: this connection's turn in the background lane.
    func backgroundTurn() {
        readRequeued = false
        if !closed, !readingStopped, !readPaused { readAvailable() }
        arm()
    }

    /// On `queue`: arms the registration for what the connection waits for now.
    private func arm() {
        guard !closed, let registration else { return }
        var wanted: EventPoller.Interest = []
        if !readingStopped && !readPaused && !readRequeued && !decodingLarge { wanted.insert(.readable) }
        if wantsWrite { wanted.insert(.writable) }
        // Armed for nothing (read paused or stopped, nothing to write): only a hang-up or an error is reported, once.
        guard wanted != armed else { return }
        poller.arm(registration, fd: fd, interest: wanted)
        armed = wanted
    }

    /// Messages handled per turn (one event, or one requeued turn) of a connection whose process reads
    /// its replies; the rest wait, framed, behind the other connections' turns on this queue.
    static let messagesPerTurn = 16
    /// Messages handled per turn of a connection whose process has replies it has not read: its
    /// requests wait behind everyone else's, so that a process that does not read cannot hold the
    /// queue (and the well-behaved clients on it) with its pipelined requests.
    static let messagesPerTurnOwing = 2

    /// Handles at most a turn's worth of messages (framed earlier first), reading at most two buffers
    /// (one full one); more work left goes on after the other connections' turns on this queue.
    private func readAvailable() {
        guard !closed, !readingStopped else { return }
        defer { updateIdle() }
        var quota = budget.unsent(of: peer.pid) > 0 ? Self.messagesPerTurnOwing : Self.messagesPerTurn
        // A turn that moves bulk reads one buffer (64 KiB), any other up to two.
        let maxReads = movesBulk ? 1 : 2
        var reads = 0
        var lastReadFull = false
        while true {
            while pendingStart < pending.count {
                // Resumed by whoever lifts the pause (`resumeReading`, `decoded`).
                if closed || readingStopped || readPaused || decodingLarge { return }
                guard quota > 0 else {
                    scheduleTurn()
                    return
                }
                quota -= 1
                let event = pending[pendingStart]
                pending[pendingStart] = .message([])
                pendingStart += 1
                switch event {
                case .message(let bytes):
                    if unsent > 0, let refusal = budget.refusal(for: peer.pid) {
                        // More asked on a connection that leaves its replies unread, while its process is
                        // refused (`BUSY`) for its unread replies: closed as a slow reader, not answered
                        // `BUSY` — each answer would be one more reply it does not read, and decoding
                        // every one of its pipelined requests cost the CPU that answers everyone else.
                        if case .process = refusal {
                            dropSlowReader(.outputProcessBudgetSpent)
                        } else {
                            dropSlowReader(.outputBudgetSpent)
                        }
                        return
                    }
                    lastMessageLarge = bytes.count > RPCServer.largeMessage
                    inFlight += 1
                    nextHandler &+= 1
                    let token = nextHandler
                    switch submit(self, token, bytes) {
                    case .refused: inFlight -= 1
                    case .started(let work): handlers.start(token, work)
                    case .answered(let reply): finished(handler: nil, reply: reply)
                    case .decoding: decodingLarge = true
                    }
                case .failure(let error):
                    frameFailed(error)
                    return
                }
                if !closed, inFlight >= limits.maxInFlight {
                    pauseReading()
                    return
                }
            }
            pending.removeAll(keepingCapacity: pending.capacity <= 64)
            pendingStart = 0
            if closed || readingStopped || readPaused || decodingLarge { return }
            // Bounded per turn: more may be waiting; go on after the other connections' turns.
            if reads >= maxReads || lastReadFull {
                scheduleTurn()
                return
            }
            let count: Int
            do {
                count = try Syscalls.read(fd, into: &readBuffer.bytes)
            } catch .wouldBlock {
                return
            } catch {
                close(.readFailed(error))
                return
            }
            if count == 0 {
                endOfStream()
                return
            }
            reads += 1
            // After a short read, read on until EAGAIN: the source does not report again an end of
            // stream that came with the last bytes, and a peer that sends a request and closes must
            // be seen to hang up.
            lastReadFull = count == readBuffer.bytes.count
            pending = decoder.feed(readBuffer.bytes[0..<count])
        }
    }

    /// Runs another turn of `readAvailable` after the events and turns already queued (once).
    private func scheduleTurn() {
        guard !readRequeued, !closed else { return }
        if movesBulk {
            takeTurnInBackground()
            return
        }
        readRequeued = true
        queue.async { [weak self] in
            guard let self else { return }
            self.readRequeued = false
            if !self.closed, !self.readingStopped, !self.readPaused { self.readAvailable() }
            self.arm()
        }
    }

    /// On `queue`: the large message handed over as `.decoding` is decoded; `work` handles it (nil: it
    /// was answered, or the connection closed meanwhile). The connection's next messages go on.
    func decoded(token: UInt64, work: (@Sendable () async -> Void)?) {
        decodingLarge = false
        if let work {
            handlers.start(token, work)
            if closed { handlers.cancel(token) }
        }
        if !closed, !readingStopped, !readPaused { scheduleTurn() }
    }

    /// The peer will send nothing more: it closed, or only shut down its
    /// writing side (it may still read its replies).
    private func endOfStream() {
        stopReading()
        if inFlight > 0 || unsent > 0 {
            if peerHungUp() {
                close(.peerHungUp)
                return
            }
            watchForHangUp()
        }
        closeIfDone()
    }

    /// Whether the peer closed both ways (`POLLHUP`; a half-close sets only `POLLRDHUP`).
    private func peerHungUp() -> Bool {
        guard !closed, let events = try? Syscalls.poll(fd, events: 0, timeoutMilliseconds: 0) else {
            return false
        }
        return events & Int16(POLLHUP | POLLERR) != 0
    }

    /// While reading is paused or stopped with work left, checks every
    /// 200 ms whether the peer went away, to cancel what it no longer waits for.
    private func watchForHangUp() {
        guard !watchingHangUp, !closed else { return }
        watchingHangUp = true
        scheduleHangUpCheck()
    }

    private func scheduleHangUpCheck() {
        queue.asyncAfter(.milliseconds(200)) { [weak self] in
            guard let self else { return }
            guard !self.closed, self.readPaused || (self.readingStopped && (self.inFlight > 0 || self.unsent > 0))
            else {
                self.watchingHangUp = false
                return
            }
            if self.peerHungUp() {
                self.close(.peerHungUp)
            } else {
                self.scheduleHangUpCheck()
            }
        }
    }

    private func frameFailed(_ error: RPCFrameError) {
        onFrameError(error)
        let reply: RPCError =
            switch error {
            case .oversize: .invalidRequest("Invalid Request: message over \(limits.maxMessageSize) bytes")
            case .malformedHeader: .parseError("Parse error: malformed Content-Length header")
            }
        stopReading()
        closeWhenFlushed = true
        enqueue(
            body: RPCCodec.encode(RPCResponse(id: .null, error: reply)),
            reason: error == .oversize ? .oversize : .malformedFraming)
    }

    private func pauseReading() {
        guard !readPaused, !readingStopped else { return }
        readPaused = true
        arm()
        watchForHangUp()
    }

    private func resumeReading() {
        guard readPaused, !readingStopped else { return }
        readPaused = false
        // Messages framed before the pause are not announced by the socket again.
        if pendingStart < pending.count, !decodingLarge { scheduleTurn() }
        arm()
    }

    /// On `queue`: takes no more requests (replies still go out).
    func stopReading() {
        guard !readingStopped else { return }
        readingStopped = true
        readPaused = false
        arm()
    }

    /// On `queue`: one message was handled; `reply` is nil when it gets none.
    func finished(handler: UInt64?, reply: consuming [UInt8]?) {
        inFlight -= 1
        if let handler { handlers.finished(handler) }
        if let reply = reply.take(), !closed { enqueue(body: reply) }
        if inFlight < limits.maxInFlight / 2 { resumeReading() }
        closeIfDone()
        updateIdle()
    }

    /// On `queue`: cancels the handlers in flight (they still answer, if they do).
    func cancelHandlers() {
        handlers.cancelAll()
    }

    private func closeIfDone() {
        guard !closed, readingStopped, inFlight == 0, unsent == 0 else { return }
        close(closeWhenFlushed ? closeReason : .peerClosed)
    }

    // MARK: Writing

    private var closeReason: RPCCloseReason = .peerClosed

    /// On `queue`: frames one message and writes what the socket takes; the
    /// rest is queued within the output budget, or the connection is dropped
    /// as a slow reader.
    func enqueue(body: consuming [UInt8], reason: RPCCloseReason? = nil) {
        guard !closed else { return }
        if let reason { closeReason = reason }
        let framed = RPCFrameEncoder.encode(body, framing: framing)
        var offset = 0
        if unsent == 0 {
            // Nothing pending: straight from the message, no copy.
            while offset < framed.count {
                do {
                    offset += try Syscalls.send(fd, framed, from: offset)
                } catch .wouldBlock {
                    break
                } catch {
                    close(.writeFailed(error))
                    return
                }
            }
            if offset == framed.count {
                allWritten()
                return
            }
        }
        let adding = framed.count - offset
        switch budget.decide(connectionQueued: unsent, pid: peer.pid, adding: adding) {
        case .queue:
            break
        case .overConnectionCap:
            dropSlowReader(.outputOverflow)
            return
        case .overProcessCap:
            dropSlowReader(.outputProcessBudgetSpent)
            return
        case .overBudget:
            dropSlowReader(.outputBudgetSpent)
            return
        }
        output.append(contentsOf: framed[offset...])
        budget.add(adding, pid: peer.pid)
        updateIdle()
        armWriteSource()
    }

    private func dropSlowReader(_ reason: RPCCloseReason) {
        onSlowReader(unsent, reason)
        close(reason)
    }

    private func flush() {
        while outputStart < output.count {
            let written: Int
            do {
                written = try Syscalls.send(fd, output, from: outputStart)
            } catch .wouldBlock {
                if outputStart >= 1_048_576 {
                    output.removeSubrange(0..<outputStart)
                    outputStart = 0
                }
                armWriteSource()
                return
            } catch {
                close(.writeFailed(error))
                return
            }
            outputStart += written
            budget.remove(written, pid: peer.pid)
        }
        output.removeAll(keepingCapacity: output.capacity <= 262_144)
        outputStart = 0
        disarmWriteSource()
        allWritten()
    }

    /// Everything queued is written.
    private func allWritten() {
        if closeWhenFlushed {
            close(closeReason)
        } else {
            closeIfDone()
            updateIdle()
        }
    }

    private func armWriteSource() {
        guard !wantsWrite else { return }
        wantsWrite = true
        arm()
    }

    private func disarmWriteSource() {
        guard wantsWrite else { return }
        wantsWrite = false
        arm()
    }

    // MARK: Closing

    /// On `queue`: closes now, cancelling the handlers in flight, and closes
    /// the descriptor (once out of the poller: an event still on its way finds nothing).
    func close(_ reason: RPCCloseReason) {
        guard !closed else { return }
        closed = true
        idleSince.store(0, ordering: .relaxed)
        readingStopped = true
        wantsWrite = false
        if let registration {
            poller.unregister(registration, fd: fd)
            self.registration = nil
        }
        cancelHandlers()
        pending = []
        pendingStart = 0
        budget.remove(unsent, pid: peer.pid)
        output = []
        outputStart = 0
        // Reported before the descriptor goes, so that whoever sees the end
        // of the stream also finds the connection closed here.
        onClosed?(reason)
        onClosed = nil
        Syscalls.close(fd)
    }

    /// On `queue`: closes the connection to make room for another if it is
    /// still idle (sending it one `BUSY` error first); false when it is busy now.
    func evictIfIdle(notice: [UInt8], stillIdle: Bool) -> Bool {
        guard !closed, stillIdle, inFlight == 0, unsent == 0, pendingStart >= pending.count else { return false }
        let framed = RPCFrameEncoder.encode(notice, framing: framing)
        _ = try? Syscalls.send(fd, framed, from: 0)
        close(.evictedIdle)
        return true
    }

    /// On `queue` at shutdown: tries once more to write what is queued, then closes.
    func flushAndClose() {
        guard !closed else { return }
        closeWhenFlushed = true
        closeReason = .serverShutdown
        stopReading()
        flush()
        close(.serverShutdown)
    }

}

/// A 64 KiB read buffer for the connections of one I/O queue, kept instead
/// of allocated (and zeroed) for each read event. Left uninitialized: a read
/// writes only what it answers, and a page no read has reached is never
/// made resident (zeroed, the two buffers held 128 KiB for good).
///
/// `@unchecked Sendable`: `bytes` is touched only on its I/O queue (a serial
/// queue), inside `ConnectionIO.readAvailable`, and never kept across events.
final class ReadBuffer: @unchecked Sendable {
    var bytes = [UInt8](unsafeUninitializedCapacity: 65_536) { _, count in count = 65_536 }
}

/// The turns of one I/O queue's connections that move bulk (`ConnectionIO.movesBulk`), run one per
/// block on the queue: each block runs one turn and queues the next block behind whatever was queued
/// meanwhile, so another connection's event waits for at most one of these turns.
///
/// `@unchecked Sendable`: its members are touched only on `queue` (a serial queue), by the
/// connections' code that runs there and by the blocks it queues itself.
final class BackgroundTurns: @unchecked Sendable {
    let queue: SerialQueue
    private var waiting: [ConnectionIO] = []
    private var next = 0
    private var scheduled = false

    init(queue: SerialQueue) { self.queue = queue }

    /// On `queue`: runs `connection`'s next turn after those waiting already.
    func add(_ connection: ConnectionIO) {
        waiting.append(connection)
        guard !scheduled else { return }
        scheduled = true
        queue.async { [self] in runOne() }
    }

    private func runOne() {
        if next < waiting.count {
            let connection = waiting[next]
            next += 1
            connection.backgroundTurn()
        }
        guard next < waiting.count else {
            waiting.removeAll(keepingCapacity: waiting.capacity <= 256)
            next = 0
            scheduled = false
            return
        }
        // Never empty while bulk keeps coming: drop the turns already run.
        if next >= 256 && next * 2 >= waiting.count {
            waiting.removeSubrange(0..<next)
            next = 0
        }
        queue.async { [self] in runOne() }
    }
}
