import Dispatch
import Synchronization

/// The credentials of a connected process, read with `SO_PEERCRED` at accept.
public struct RPCPeer: Sendable, Hashable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// Why a connection was closed.
public enum RPCCloseReason: Sendable, Hashable {
    /// The peer closed its side and every reply was sent.
    case peerClosed
    /// A message was over the size limit (answered `-32600` first).
    case oversize
    /// The `Content-Length` framing was broken (answered `-32700` first).
    case malformedFraming
    /// The peer did not read its replies and more than the output bound was queued.
    case outputOverflow
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

    init(id: UInt64, peer: RPCPeer, io: ConnectionIO) {
        self.id = id
        self.peer = peer
        self.io = io
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

    public init(connection: RPCConnection, requestID: RPCID?) {
        self.connection = connection
        self.requestID = requestID
    }

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

/// The I/O side of one connection: the descriptor, its dispatch sources,
/// the framing decoder and the output buffer.
///
/// `@unchecked Sendable`: every mutable member is touched only on `queue`
/// (a serial queue) — the sources' handlers run there, and every other
/// caller goes through `queue.async`. The `let` members are immutable.
final class ConnectionIO: @unchecked Sendable {
    /// What became of one message handed to `submit`.
    enum Submitted {
        /// The server takes no more work; the message gets no reply.
        case refused
        /// Handling started; `finished(reply:)` follows on `queue`.
        case started
        /// Answered at once (the fast path), with this reply (nil: none due).
        case answered([UInt8]?)
    }

    struct Limits {
        var maxMessageSize: Int
        var maxQueuedOutput: Int
        var maxInFlight: Int
    }

    let connectionID: UInt64
    let fd: Int32
    let queue: DispatchQueue
    let limits: Limits
    /// Starts the handling of one message; false when the server no longer takes work.
    private let submit: @Sendable (ConnectionIO, [UInt8]) -> Submitted
    /// The queue's read buffer (shared with the other connections on `queue`).
    private let readBuffer: ReadBuffer
    /// Called once on `queue` when the connection closed.
    var onClosed: ((RPCCloseReason) -> Void)?
    /// Reports framing failures.
    private let onFrameError: @Sendable (RPCFrameError) -> Void

    private var decoder: RPCFrameDecoder
    private var readSource: DispatchSourceRead?
    private var readPaused = false
    private var writeSource: DispatchSourceWrite?
    /// Dispatch sources not yet cancelled-and-finished; the descriptor is closed when this reaches 0.
    private var liveSources = 0
    private var output: [UInt8] = []
    private var outputStart = 0
    private var inFlight = 0
    /// No more requests are read (end of stream, framing failure, or shutdown).
    private var readingStopped = false
    /// Close as soon as the output is written (after a framing failure).
    private var closeWhenFlushed = false
    private(set) var closed = false
    private var descriptorClosed = false

    init(
        connectionID: UInt64, fd: Int32, queue: DispatchQueue, readBuffer: ReadBuffer, limits: Limits,
        submit: @escaping @Sendable (ConnectionIO, [UInt8]) -> Submitted,
        onFrameError: @escaping @Sendable (RPCFrameError) -> Void
    ) {
        self.connectionID = connectionID
        self.fd = fd
        self.queue = queue
        self.readBuffer = readBuffer
        self.limits = limits
        self.submit = submit
        self.onFrameError = onFrameError
        self.decoder = RPCFrameDecoder(maxMessageSize: limits.maxMessageSize)
    }

    /// The framing replies use (NDJSON until the first byte said otherwise).
    var framing: RPCFraming { decoder.framing ?? .ndjson }

    // MARK: Reading

    /// On `queue`: starts reading.
    func start() {
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [unowned self] in self.readAvailable() }
        source.setCancelHandler { [self] in self.sourceFinished() }
        liveSources += 1
        readSource = source
        source.resume()
    }

    private func readAvailable() {
        guard !closed, !readingStopped else { return }
        // Bounded per event, so that one busy client does not starve the others on this queue.
        for _ in 0..<8 {
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
                stopReading()
                closeIfDone()
                return
            }
            for event in decoder.feed(readBuffer.bytes[0..<count]) {
                // An inline reply may have closed it (output over the limit).
                if closed { return }
                switch event {
                case .message(let bytes):
                    inFlight += 1
                    switch submit(self, bytes) {
                    case .refused: inFlight -= 1
                    case .started: break
                    case .answered(let reply): finished(reply: reply)
                    }
                case .failure(let error):
                    frameFailed(error)
                    return
                }
            }
            if inFlight >= limits.maxInFlight {
                pauseReading()
                return
            }
            if count < readBuffer.bytes.count { return }
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
        guard !readPaused, let readSource else { return }
        readPaused = true
        readSource.suspend()
    }

    private func resumeReading() {
        guard readPaused, let readSource else { return }
        readPaused = false
        readSource.resume()
    }

    /// On `queue`: takes no more requests (replies still go out).
    func stopReading() {
        guard !readingStopped else { return }
        readingStopped = true
        if let readSource {
            readSource.cancel()
            if readPaused {
                readPaused = false
                readSource.resume()
            }
            self.readSource = nil
        }
    }

    /// On `queue`: one message was handled; `reply` is nil when it gets none.
    func finished(reply: [UInt8]?) {
        inFlight -= 1
        if let reply, !closed { enqueue(body: reply) }
        if inFlight < limits.maxInFlight / 2 { resumeReading() }
        closeIfDone()
    }

    private func closeIfDone() {
        guard !closed, readingStopped, inFlight == 0, outputStart == output.count else { return }
        close(closeWhenFlushed ? closeReason : .peerClosed)
    }

    // MARK: Writing

    private var closeReason: RPCCloseReason = .peerClosed

    /// On `queue`: frames and queues one message, and writes what the socket takes.
    func enqueue(body: [UInt8], reason: RPCCloseReason? = nil) {
        guard !closed else { return }
        if let reason { closeReason = reason }
        let framed = RPCFrameEncoder.encode(body, framing: framing)
        if output.count - outputStart + framed.count > limits.maxQueuedOutput {
            close(.outputOverflow)
            return
        }
        output.append(contentsOf: framed)
        flush()
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
        }
        output.removeAll(keepingCapacity: output.capacity <= 262_144)
        outputStart = 0
        disarmWriteSource()
        if closeWhenFlushed {
            close(closeReason)
        } else {
            closeIfDone()
        }
    }

    private func armWriteSource() {
        guard writeSource == nil else { return }
        let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [unowned self] in self.flush() }
        source.setCancelHandler { [self] in self.sourceFinished() }
        liveSources += 1
        writeSource = source
        source.resume()
    }

    private func disarmWriteSource() {
        guard let writeSource else { return }
        writeSource.cancel()
        self.writeSource = nil
    }

    // MARK: Closing

    /// On `queue`: closes now. The descriptor is closed once no dispatch source uses it.
    func close(_ reason: RPCCloseReason) {
        guard !closed else { return }
        closed = true
        stopReading()
        disarmWriteSource()
        output = []
        outputStart = 0
        // Reported before the descriptor goes, so that whoever sees the end
        // of the stream also finds the connection closed here.
        onClosed?(reason)
        onClosed = nil
        closeDescriptorIfUnused()
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

    private func sourceFinished() {
        liveSources -= 1
        closeDescriptorIfUnused()
    }

    private func closeDescriptorIfUnused() {
        guard closed, liveSources == 0, !descriptorClosed else { return }
        descriptorClosed = true
        Syscalls.close(fd)
    }
}

/// A 64 KiB read buffer for the connections of one I/O queue, kept instead
/// of allocated (and zeroed) for each read event.
///
/// `@unchecked Sendable`: `bytes` is touched only on its I/O queue (a serial
/// queue), inside `ConnectionIO.readAvailable`, and never kept across events.
final class ReadBuffer: @unchecked Sendable {
    var bytes = [UInt8](repeating: 0, count: 65_536)
}
