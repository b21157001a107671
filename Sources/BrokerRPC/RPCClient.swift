import Glibc

/// Why the client could not talk to the broker.
public enum RPCClientError: Error, Sendable, Hashable, CustomStringConvertible {
    case socketMissing
    /// A socket is there but nobody listens: the daemon is not running (it left a stale socket).
    case connectionRefused
    /// The socket or its directory belongs to someone else.
    case permissionDenied
    case pathTooLong
    case timedOut
    case connectionClosed
    /// The daemon sent something that is not a JSON-RPC response or notification.
    case invalidMessage
    case framing(RPCFrameError)
    case io(Errno)

    public var description: String {
        switch self {
        case .socketMissing: "the broker socket does not exist (is the broker running?)"
        case .connectionRefused: "the broker socket refused the connection (is the broker running?)"
        case .permissionDenied: "permission denied on the broker socket"
        case .pathTooLong: "the socket path is too long for a Unix socket"
        case .timedOut: "the broker did not answer in time"
        case .connectionClosed: "the broker closed the connection"
        case .invalidMessage: "the broker sent an invalid message"
        case .framing(let error): "the broker's reply framing is broken (\(error))"
        case .io(let error): "socket error \(error)"
        }
    }

    /// The error for a failed `connect`.
    init(connectFailure error: Errno) {
        switch error {
        case .noSuchFile, .notDirectory: self = .socketMissing
        case .connectionRefused: self = .connectionRefused
        case .permissionDenied, .notPermitted: self = .permissionDenied
        case .nameTooLong: self = .pathTooLong
        default: self = .io(error)
        }
    }

    /// Whether the CLI should say "the daemon is not running".
    public var meansNotRunning: Bool { self == .socketMissing || self == .connectionRefused }
}

/// A small blocking JSON-RPC client over a Unix socket, for the CLI and tests.
/// Not thread-safe: use one client from one thread at a time.
///
/// ```swift
/// let client = try RPCClient(socketPath: path)
/// let info = try client.call("broker.info")           // throws RPCError for an error response
/// _ = try client.call("events.subscribe", params: [:])
/// while case .notification(let method, let params) = try client.nextMessage(timeout: .seconds(60)) { … }
/// ```
public final class RPCClient {
    public let framing: RPCFraming
    /// The default timeout of `call` and `nextMessage`.
    public var timeout: Duration
    private var fd: Int32
    private var decoder: RPCFrameDecoder
    private var nextID: Int64 = 1
    /// Messages read while waiting for another response, handed out by `nextMessage` first.
    private var pending: [RPCClientMessage] = []
    /// Raw message bodies decoded but not yet parsed.
    private var bodies: [[UInt8]] = []
    private var endOfStream = false

    /// Connects to the socket at `path`.
    public init(
        socketPath path: String, framing: RPCFraming = .ndjson, timeout: Duration = .seconds(30)
    ) throws(RPCClientError) {
        self.framing = framing
        self.timeout = timeout
        self.decoder = RPCFrameDecoder(framing: framing, maxMessageSize: Int.max / 2)
        let fd: Int32
        do {
            fd = try Syscalls.unixStreamSocket()
        } catch {
            throw .io(error)
        }
        do {
            try Syscalls.connect(fd, path: path)
            try Syscalls.makeNonBlockingCloseOnExec(fd)
        } catch {
            Syscalls.close(fd)
            throw RPCClientError(connectFailure: error)
        }
        self.fd = fd
    }

    deinit { close() }

    /// Closes the connection (also done when the client is released).
    public func close() {
        if fd >= 0 {
            Syscalls.close(fd)
            fd = -1
        }
    }

    // MARK: Calls

    /// Calls `method` and waits for its response. Throws `RPCError` for an
    /// error response and `RPCClientError` when the transport fails.
    /// Notifications that arrive meanwhile are kept for `nextMessage`.
    public func call(_ method: String, params: JSONValue? = nil, timeout: Duration? = nil) throws -> JSONValue {
        let id = RPCID.integer(nextID)
        nextID += 1
        do {
            try send(RPCRequest(id: id, method: method, params: params))
        } catch .connectionClosed {
            // Refused at the connection limit: the server wrote `BUSY` and closed.
            if let busy = busyNotice() { throw busy }
            throw RPCClientError.connectionClosed
        }
        let response = try waitForResponse(id: id, deadline: deadline(timeout))
        return try response.outcome.get()
    }

    /// Sends a notification (no response comes back).
    public func notify(_ method: String, params: JSONValue? = nil) throws(RPCClientError) {
        try send(RPCRequest(id: nil, method: method, params: params))
    }

    /// Sends one request as it is (the caller chooses the id).
    public func send(_ request: RPCRequest) throws(RPCClientError) {
        try sendBody(request.json.serialized())
    }

    /// Sends one message body (any bytes), framed with this client's framing.
    public func sendBody(_ body: [UInt8]) throws(RPCClientError) {
        try sendRaw(RPCFrameEncoder.encode(body, framing: framing))
    }

    /// Sends bytes exactly as given (no framing added), for tests of the framing itself.
    public func sendRaw(_ bytes: [UInt8]) throws(RPCClientError) {
        guard fd >= 0 else { throw .connectionClosed }
        let deadline = deadline(nil)
        var offset = 0
        while offset < bytes.count {
            do {
                offset += try Syscalls.send(fd, bytes, from: offset)
            } catch .wouldBlock {
                try waitFor(Int16(POLLOUT), until: deadline)
            } catch .brokenPipe, .connectionReset {
                throw .connectionClosed
            } catch {
                throw .io(error)
            }
        }
    }

    /// The next message from the server, in the order received (notifications
    /// and responses that `call` did not consume). Throws `.timedOut` when none
    /// comes within `timeout` (default: the client's timeout).
    public func nextMessage(timeout: Duration? = nil) throws(RPCClientError) -> RPCClientMessage {
        if !pending.isEmpty { return pending.removeFirst() }
        return try readMessage(deadline: deadline(timeout))
    }

    /// The next message body as raw bytes (for tests of malformed traffic).
    public func nextBody(timeout: Duration? = nil) throws(RPCClientError) -> [UInt8] {
        try readBody(deadline: deadline(timeout))
    }

    // MARK: Reading

    /// A `BUSY` error (null id) that the server sent before closing, if one is waiting to be read.
    private func busyNotice() -> RPCError? {
        let deadline = ContinuousClock.now + .milliseconds(100)
        while let message = try? readMessage(deadline: deadline) {
            if case .response(let response) = message, response.id == .null,
                case .failure(let error) = response.outcome, error.applicationCode == "BUSY"
            {
                return error
            }
            pending.append(message)
        }
        return nil
    }

    private func deadline(_ timeout: Duration?) -> ContinuousClock.Instant {
        ContinuousClock.now + (timeout ?? self.timeout)
    }

    private func waitForResponse(id: RPCID, deadline: ContinuousClock.Instant) throws(RPCClientError) -> RPCResponse {
        if let index = pending.firstIndex(where: { if case .response(let r) = $0 { r.id == id } else { false } }),
            case .response(let response) = pending.remove(at: index)
        {
            return response
        }
        while true {
            let message = try readMessage(deadline: deadline)
            if case .response(let response) = message, response.id == id { return response }
            // `BUSY` with a null id: the server refused the connection, or closed
            // it to make room, at its connection limit. It is this call's answer.
            if case .response(let response) = message, response.id == .null,
                case .failure(let error) = response.outcome, error.applicationCode == "BUSY"
            {
                return response
            }
            pending.append(message)
        }
    }

    private func readMessage(deadline: ContinuousClock.Instant) throws(RPCClientError) -> RPCClientMessage {
        let body = try readBody(deadline: deadline)
        guard let message = RPCCodec.decodeClientMessage(body) else { throw .invalidMessage }
        return message
    }

    private func readBody(deadline: ContinuousClock.Instant) throws(RPCClientError) -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while bodies.isEmpty {
            guard fd >= 0, !endOfStream else { throw .connectionClosed }
            let count: Int
            do {
                count = try Syscalls.read(fd, into: &chunk)
            } catch .wouldBlock {
                try waitFor(Int16(POLLIN), until: deadline)
                continue
            } catch .connectionReset {
                endOfStream = true
                throw .connectionClosed
            } catch {
                throw .io(error)
            }
            if count == 0 {
                endOfStream = true
                throw .connectionClosed
            }
            for event in decoder.feed(chunk[0..<count]) {
                switch event {
                case .message(let body): bodies.append(body)
                case .failure(let error): throw .framing(error)
                }
            }
        }
        return bodies.removeFirst()
    }

    private func waitFor(_ events: Int16, until deadline: ContinuousClock.Instant) throws(RPCClientError) {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { throw .timedOut }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = min(Int64(Int32.max), seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
        do {
            _ = try Syscalls.poll(fd, events: events, timeoutMilliseconds: Int32(milliseconds))
        } catch {
            throw .io(error)
        }
    }
}
