import CMicroHTTPDLoader
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Why a loopback listener did not start. The description names no URL and no secret.
public enum LoopbackError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Another socket holds the fixed port (EADDRINUSE).
    case portInUse(UInt16)
    case failed(String)

    public var description: String {
        switch self {
        case .portInUse(let port): "the loopback port \(port) is in use by another program"
        case .failed(let reason): reason
        }
    }
}

/// The loopback redirect listener of an installed app (RFC 8252 §7.3): an
/// HTTP server on a literal loopback address that receives the authorization
/// response and answers the browser with a small page.
///
/// HTTP is parsed by libmicrohttpd, loaded (dlopen) when the first listener
/// opens, not linked (CMicroHTTPDLoader): one internal polling thread, with
/// suspend/resume for the asynchronous `deliver`. The genuine request's
/// connection is suspended (taken out of the event loop, no timeout while
/// suspended) and `deliver` runs in a work item of its own; when it returns, the
/// page is stored and the connection resumed, and the polling thread calls the
/// access handler again, which queues the page. The polling thread never
/// waits for `deliver`, so a slow delivery holds up no other request and
/// deliveries may run concurrently.
///
/// Other local programs can connect too. A request whose `Host` is not this
/// listener's (`127.0.0.1:PORT`, `[::1]:PORT`, `localhost:PORT`) is answered
/// 400 before anything else is looked at (DNS rebinding; HTTP/1.0 without a
/// Host). libmicrohttpd reports each connection as it opens and closes
/// (`MHD_OPTION_NOTIFY_CONNECTION`) to a `ConnectionTable`: a connection has
/// `headDeadline` for a whole request head, and one more than
/// `connectionLimit` evicts the one waiting longest for its head. An evicted
/// or overdue connection's socket is shut down (libmicrohttpd then reads the
/// end of the stream and closes it); overdue ones by a sweeper work item that
/// sleeps until the earliest deadline and is cancelled when the listener
/// stops. So dribbled heads (slowloris) cannot lock the browser out.
///
/// Why this cannot deadlock: the listener's lock is taken by the access
/// handler (polling thread), by a finished delivery and by `close()`, each
/// for a few instructions; under it only `MHD_suspend_connection` and
/// `MHD_resume_connection` are called, which take libmicrohttpd's own
/// connection lock and nothing else (lock order: ours, then libmicrohttpd's,
/// everywhere; libmicrohttpd calls the access handler without its lock held,
/// and the completion callback takes no lock of ours). `deliver` is never
/// called with a lock held, and `close()` never waits for a delivery.
///
/// `close()` while a delivery is in flight:
/// - called from inside that delivery (the task that runs `deliver`, or a task
///   it started: a task-local value tells), as when the broker ends the
///   attempt while handling the callback: `close()` returns at once, nothing
///   new is delivered, other deliveries in flight are abandoned (below), and
///   the listener stops as soon as this delivery's page has been written (by
///   the task that ran `deliver`, after it returns). So the browser gets its
///   page. Until then the port stays bound; a later `close()` changes nothing.
/// - called from anywhere else: the deliveries in flight are abandoned: their
///   connections are resumed (libmicrohttpd must not be stopped with suspended
///   connections) and closed without an answer, and their pages, when
///   `deliver` returns, are discarded (the tasks are not cancelled: a code
///   exchange must not be cut off). Pages already delivered get up to
///   `drainLimit` to be written; then `MHD_stop_daemon` closes the listening
///   socket and every connection and joins the polling thread, and `close()`
///   returns.
public final class LoopbackListener: Sendable {
    /// At most this many bytes per request: request line, headers and
    /// libmicrohttpd's bookkeeping (a redirect's URL is well under it).
    static let memoryLimit = 8 * 1024
    /// Connections kept at once (browsers open up to 6 to a host). One more evicts the one waiting
    /// longest for its request head (ConnectionTable). No limit per address: every local process shares
    /// the loopback addresses (and may pick any of 127.0.0.0/8), so it would only lock the browser out.
    static let connectionLimit = 16
    /// libmicrohttpd's own limit (a connection beyond it is closed at accept): the kept connections and
    /// the evicted ones it has not closed yet.
    static let acceptLimit: UInt32 = 64
    /// How long a connection has for a whole request head (request line and headers), from its start or
    /// from its previous answer; then it is closed (slowloris: one header line every few seconds).
    static let headDeadline: Duration = .seconds(2)

    private let core: ListenerCore
    /// The port the listener is bound to (the ephemeral one when asked for 0).
    public let port: UInt16

    /// Binds host:port (0 = an ephemeral port) and answers GET on exactly `path`: each such request's full
    /// URL ("http://127.0.0.1:PORT" or "http://[::1]:PORT" + the request target exactly as received, query
    /// included, not decoded) is handed to `deliver`, whose page is the answer. Delivery is async and may take
    /// seconds (the broker exchanges the code before answering).
    public static func open(
        host: LoopbackHost, port: UInt16, path: String,
        deliver: @escaping @Sendable (String) async -> LoopbackPage
    ) throws(LoopbackError) -> LoopbackListener {
        try open(host: host, port: port, path: path, idleTimeoutSeconds: 10, deliver: deliver)
    }

    /// `open` whose sweeper and deliveries are items of `work`, the owner's (run in its `ServiceGroup`, which
    /// cancels and waits for them when it stops), instead of a group of the listener's own. Throws when
    /// `work` refuses the sweeper (it is full or stopping).
    public static func open(
        host: LoopbackHost, port: UInt16, path: String, work: WorkGroup<LoopbackWork>,
        deliver: @escaping @Sendable (String) async -> LoopbackPage
    ) throws(LoopbackError) -> LoopbackListener {
        try open(host: host, port: port, path: path, idleTimeoutSeconds: 10, work: work, deliver: deliver)
    }

    /// `open` with the idle timeout as a parameter (the tests shorten it).
    package static func open(
        host: LoopbackHost, port: UInt16, path: String, idleTimeoutSeconds: UInt32,
        work: WorkGroup<LoopbackWork>? = nil, deliver: @escaping @Sendable (String) async -> LoopbackPage
    ) throws(LoopbackError) -> LoopbackListener {
        let pathBytes = Array(path.utf8)
        guard pathBytes.first == UInt8(ascii: "/"), pathBytes.allSatisfy(isTargetByte),
            !pathBytes.contains(UInt8(ascii: "?")), !pathBytes.contains(UInt8(ascii: "#"))
        else {
            throw .failed("the loopback redirect path must be an absolute path without a query or fragment")
        }
        return try LoopbackListener(
            host: host, port: port, path: pathBytes, idleTimeoutSeconds: idleTimeoutSeconds,
            work: work ?? WorkGroup(limit: workLimit), deliver: deliver)
    }

    /// The work items one listener may have at once: its sweeper and a delivery per suspended connection
    /// (no more than libmicrohttpd accepts).
    public static let workLimit = Int(acceptLimit) + 1

    private init(
        host: LoopbackHost, port: UInt16, path: [UInt8], idleTimeoutSeconds: UInt32, work: WorkGroup<LoopbackWork>,
        deliver: @escaping @Sendable (String) async -> LoopbackPage
    ) throws(LoopbackError) {
        try loadLibrary()
        let core = ListenerCore(
            path: path, connections: ConnectionTable(capacity: Self.connectionLimit, headDeadline: Self.headDeadline),
            work: work, deliver: deliver)
        let cls = Unmanaged.passUnretained(core).toOpaque()
        var error: Int32 = 0
        let started = bl_lmhd_start_loopback(
            host.rawValue, port, Self.acceptLimit, idleTimeoutSeconds, Self.memoryLimit, loopbackAccessHandler, cls,
            loopbackCompletedHandler, cls, loopbackTargetHandler, cls, loopbackConnectionHandler, cls, &error)
        guard let started else {
            if port != 0, addressInUse(host: host, port: port) { throw .portInUse(port) }
            throw .failed("cannot listen on the loopback address \(host.urlHost) port \(port)")
        }
        let bound = bl_lmhd_bound_port(started)
        // ::1 is bound without dual stack (IPV6_V6ONLY); refuse anything else.
        if host == .ipv6, ipv6Only(bl_lmhd_listen_fd(started)) != true {
            bl_lmhd_stop_daemon(started)
            throw .failed("cannot listen on \(host.urlHost) with IPV6_V6ONLY")
        }
        // The Host a browser sends for this listener (RFC 8252 §7.3 names the literal; localhost is how a
        // user types it). A page of another origin (DNS rebinding) sends its own name and is refused.
        // (A browser leaves out port 80, the default: a listener fixed on it takes the bare names too.)
        let names = ["127.0.0.1", "[::1]", "localhost"]
        let hosts = names.map { "\($0):\(bound)" } + (bound == 80 ? names : [])
        core.hosts.withLock { $0 = hosts.map { Array($0.utf8) } }
        core.origin.withLock { $0 = "http://\(host.urlHost):\(bound)" }
        core.daemon.withLock { $0 = Int(bitPattern: started) }
        guard core.startSweeping() else {
            core.close()
            throw .failed("too many loopback listeners are open, or the broker is stopping")
        }
        self.core = core
        self.port = bound
    }

    /// Stops listening; idempotent; also on deinit. From outside a delivery it returns once the listening
    /// socket and every connection are closed and the polling thread has ended (deliveries in flight are
    /// abandoned: their connections closed unanswered, their pages discarded). From inside a delivery (the
    /// attempt ends while its callback is handled) it returns at once, and the listener stops as soon as that
    /// delivery's page has been written. Never waits for `deliver`.
    public func close() { core.close() }

    /// Whether the current task runs one of this listener's deliveries (or was started by one): `close()`
    /// then returns at once. From anywhere else it waits for the listener to stop, so an owner that must not
    /// wait runs it as a work item.
    public var closesAtOnce: Bool { ListenerCore.currentDelivery?.core == ObjectIdentifier(core) }

    deinit { close() }

    /// How many connections were closed for want of a request head in time, or to make room (for tests).
    package var evictions: Int { core.connections.withLock { $0.evictions } }

    /// The listening socket's address and, for IPv6, whether it is IPV6_V6ONLY (for tests).
    package func listeningAddress() -> (address: String, ipv6Only: Bool?)? {
        core.daemon.withLock { pointer -> (String, Bool?)? in
            guard let running = OpaquePointer(bitPattern: pointer) else { return nil }
            let fd = bl_lmhd_listen_fd(running)
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let got = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            guard got == 0 else { return nil }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            if storage.ss_family == sa_family_t(AF_INET) {
                var address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) }.sin_addr
                guard inet_ntop(AF_INET, &address, &text, socklen_t(text.count)) != nil else { return nil }
                return (cString(text), nil)
            }
            var address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }.sin6_addr
            guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return nil }
            return (cString(text), ipv6Only(fd))
        }
    }
}

/// A work item of a loopback listener: its sweeper (request 0) or the delivery of one request.
public struct LoopbackWork: Hashable, Sendable {
    let listener: ObjectIdentifier
    let request: Int
}

/// What the C callbacks reach through `cls`: the listener holds it, and each
/// delivery task holds it until it has finished; it owns the daemon.
private final class ListenerCore: Sendable {
    /// How long stopping lets delivered pages be written.
    static let drainLimit: Duration = .seconds(2)

    /// Which delivery a task runs for (inherited by the tasks it starts), so
    /// that `close()` from inside a delivery waits for that delivery's page.
    @TaskLocal static var currentDelivery: DeliveryMark?

    struct DeliveryMark: Sendable {
        let core: ObjectIdentifier
        let id: Int
    }

    let path: [UInt8]
    let deliver: @Sendable (String) async -> LoopbackPage
    /// "http://127.0.0.1:PORT", set once the port is known (before any request can be delivered).
    let origin = Mutex("")
    /// The Host header values accepted ("127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT"), set with `origin`.
    let hosts = Mutex<[[UInt8]]>([])
    /// The connections and their head deadlines. A socket is shut down only under this lock and only
    /// while it is in the table: libmicrohttpd reports a connection closed (which removes it) before it
    /// closes the socket, so the number is never another file's.
    let connections: Mutex<ConnectionTable>
    /// Where the sweeper and the deliveries run (the owner's group, or one of the listener's own): a
    /// delivery for each suspended connection, so no more than libmicrohttpd accepts. The sweeper is
    /// cancelled by `stop()`; deliveries are not (a code exchange must not be cut off): the group's owner
    /// cancels and waits for them when it stops.
    let work: WorkGroup<LoopbackWork>
    /// The sweeper's work item (request ids count from 1).
    var sweeperID: LoopbackWork { LoopbackWork(listener: ObjectIdentifier(self), request: 0) }
    /// The daemon pointer's bit pattern, 0 once stopped. Held while stopping,
    /// so a second `stop()` returns only after the first has finished.
    let daemon = Mutex(0)
    let state = Mutex(State())
    let nextID = Atomic<Int>(0)
    /// Pages delivered whose request has not completed yet (stopping lets them be written).
    let unsentPages = Atomic<Int>(0)

    struct State {
        var closed = false
        /// The delivery after whose page the listener stops (`close()` from inside it).
        var stopAfter: Int?
        /// Requests whose delivery runs: the suspended connection's bit pattern, by request id.
        var suspended: [Int: Int] = [:]
        /// Pages delivered, waiting for the polling thread, by request id.
        var answers: [Int: LoopbackPage] = [:]
    }

    init(
        path: [UInt8], connections: ConnectionTable, work: WorkGroup<LoopbackWork>,
        deliver: @escaping @Sendable (String) async -> LoopbackPage
    ) {
        self.path = path
        self.work = work
        self.connections = Mutex(connections)
        self.deliver = deliver
    }

    /// A connection was accepted (polling thread): evicts what must go to keep it.
    func connectionOpened(_ connection: OpaquePointer) {
        let socket = bl_lmhd_connection_fd(connection)
        connections.withLock { table in
            for evicted in table.opened(Int(bitPattern: connection), socket: socket, at: .now) { shutDown(evicted) }
        }
    }

    func connectionClosed(_ connection: OpaquePointer) {
        connections.withLock { $0.closed(Int(bitPattern: connection)) }
    }

    /// Whether the request has exactly one Host header, naming this listener (polling thread).
    func hostIsOurs(_ connection: OpaquePointer) -> Bool {
        guard bl_lmhd_header_count(connection, "Host") == 1,
            let value = bl_lmhd_lookup_connection_value(connection, .HEADER_KIND, "Host")
        else { return false }
        let bytes = UnsafeBufferPointer(start: value, count: strlen(value)).map { asciiLowercased(UInt8(bitPattern: $0)) }
        return hosts.withLock { $0.contains(bytes) }
    }

    /// Runs until `stop()`: shuts down each connection when it passes its head deadline. It sleeps until
    /// the earliest deadline, or for a whole deadline when no connection waits: a connection that starts
    /// waiting later has a later deadline than either.
    func startSweeping() -> Bool {
        work.submit(sweeperID) { [self] in
            let clock = ContinuousClock()
            while !Task.isCancelled {
                let next = connections.withLock { table in
                    let now = clock.now
                    for evicted in table.expired(at: now) { shutDown(evicted) }
                    return table.nextDeadline ?? now + table.headDeadline
                }
                do { try await clock.sleep(until: next) } catch { return }
            }
        }
    }

    /// Suspends the connection and hands the URL to `deliver` in a work item of its own (polling thread);
    /// false (the connection is closed unanswered) when the listener is closed or its work is full.
    func startDelivery(_ connection: OpaquePointer, request: RequestContext, target: [UInt8]) -> Bool {
        // The origin is set as soon as the daemon has told its port, before `open` returns: a request in that
        // window cannot be a redirect (nobody knows the port yet) and is closed unanswered.
        let origin = origin.withLock { $0 }
        guard !origin.isEmpty else { return false }
        let id = request.id
        let url = origin + String(decoding: target, as: UTF8.self)
        let mark = DeliveryMark(core: ObjectIdentifier(self), id: id)
        return state.withLock { state -> Bool in
            guard !state.closed else { return false }
            // Started under the lock `finish` takes: it finds the connection suspended.
            let started = work.submit(LoopbackWork(listener: ObjectIdentifier(self), request: id)) { [self] in
                let page = await Self.$currentDelivery.withValue(mark) { await deliver(url) }
                finish(id, page)
            }
            guard started else { return false }
            bl_lmhd_suspend_connection(connection)
            state.suspended[id] = Int(bitPattern: connection)
            return true
        }
    }

    /// A delivery returned: store its page and resume its connection, unless it was abandoned; stop
    /// the listener after it if `close()` was called from inside it.
    func finish(_ id: Int, _ page: LoopbackPage) {
        let stopNow = state.withLock { state -> Bool in
            guard let connection = state.suspended.removeValue(forKey: id) else { return false }
            state.answers[id] = page
            unsentPages.add(1, ordering: .releasing)
            bl_lmhd_resume_connection(OpaquePointer(bitPattern: connection))
            return state.stopAfter == id
        }
        if stopNow { stop() }
    }

    /// The page of a resumed request, or nil if it was abandoned by `close()` (polling thread).
    func takeAnswer(_ id: Int) -> LoopbackPage? {
        state.withLock { $0.answers.removeValue(forKey: id) }
    }

    func close() {
        let inside = Self.currentDelivery.flatMap { $0.core == ObjectIdentifier(self) ? $0.id : nil }
        let stopNow = state.withLock { state -> Bool in
            if state.stopAfter != nil { return false }  // already closed from inside a delivery
            state.closed = true
            // Inside a delivery still running: keep it, abandon the others, stop after its page.
            let keep = inside.flatMap { state.suspended[$0] != nil ? $0 : nil }
            for (id, connection) in state.suspended where id != keep {
                bl_lmhd_resume_connection(OpaquePointer(bitPattern: connection))
                state.suspended[id] = nil
            }
            state.stopAfter = keep
            return keep == nil
        }
        if stopNow { stop() }
    }

    /// Lets delivered pages be written (at most `drainLimit`), then stops the daemon: closes the listening
    /// socket and every connection and joins the polling thread. Never called on the polling thread.
    private func stop() {
        work.cancel(sweeperID)
        daemon.withLock { pointer in
            guard let running = OpaquePointer(bitPattern: pointer) else { return }
            pointer = 0
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: Self.drainLimit)
            while unsentPages.load(ordering: .acquiring) > 0, clock.now < deadline {
                usleep(1000)
            }
            bl_lmhd_stop_daemon(running)
        }
    }
}

/// One request, from its request line to its completion: created by the
/// target callback, released by the completion callback, and touched only on
/// libmicrohttpd's polling thread.
private final class RequestContext {
    enum Phase { case new, delivering, answeredDelivery, done }
    let id: Int
    /// The request target exactly as received (nil if it was not valid text).
    let target: [UInt8]?
    var phase = Phase.new

    init(id: Int, target: [UInt8]?) {
        self.id = id
        self.target = target
    }
}

/// Loads libmicrohttpd the first time a listener opens (the daemon does not link it: GnuTLS and the rest stay
/// unmapped until an OAuth sign-in with a loopback redirect needs a listener); later calls answer the first result.
private func loadLibrary() throws(LoopbackError) {
    var error = [CChar](repeating: 0, count: 512)
    guard bl_lmhd_load(&error, error.count) != 0 else { return }
    throw loadFailure(cString(error))
}

private func loadFailure(_ why: String) -> LoopbackError {
    .failed("libmicrohttpd (libmicrohttpd12) could not be loaded: \(why); install it")
}

extension LoopbackListener {
    /// What `open` throws when the library cannot be loaded, for another soname (the tests name a missing one):
    /// nil if it loads.
    package static func loadError(soname: String) -> LoopbackError? {
        var error = [CChar](repeating: 0, count: 512)
        guard bl_library_open(soname, &error, error.count) == nil else { return nil }
        return loadFailure(cString(error))
    }
}

/// Closes both directions of a connection's socket (not the descriptor, which libmicrohttpd owns): its
/// polling thread then reads the end of the stream and closes the connection.
private func shutDown(_ socket: Int32) {
    guard socket >= 0 else { return }
    _ = Glibc.shutdown(socket, Int32(SHUT_RDWR))
}

private func asciiLowercased(_ byte: UInt8) -> UInt8 {
    (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
}

/// A request-target byte we hand over unchanged: printable ASCII, no space.
/// (Browsers percent-encode everything else; anything else is refused.)
private func isTargetByte(_ byte: UInt8) -> Bool { byte > 0x20 && byte < 0x7F }

private func cString(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Whether the socket has IPV6_V6ONLY set (nil if it cannot be read).
private func ipv6Only(_ fd: Int32) -> Bool? {
    var value: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    guard fd >= 0, getsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &value, &length) == 0 else { return nil }
    return value != 0
}

/// Whether binding host:port fails with EADDRINUSE (why libmicrohttpd did not
/// start: it reports no errno). Uses SO_REUSEADDR as libmicrohttpd does, so a
/// connection of ours in TIME_WAIT does not count.
private func addressInUse(host: LoopbackHost, port: UInt16) -> Bool {
    let family = host == .ipv4 ? AF_INET : AF_INET6
    let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { Glibc.close(fd) }
    var one: Int32 = 1
    _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    let result: Int32
    if host == .ipv4 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        _ = inet_pton(AF_INET, host.rawValue, &address.sin_addr)
        result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    } else {
        _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = port.bigEndian
        _ = inet_pton(AF_INET6, host.rawValue, &address.sin6_addr)
        result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
            }
        }
    }
    return result != 0 && errno == EADDRINUSE
}

/// The security headers of every answer of ours (RFC 8252 §8.3 leaves the
/// page to the app: no caching, no referrer, no script, no sniffing).
private let pageHeaders: [(String, String)] = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
]

private func queuePage(_ connection: OpaquePointer, _ page: LoopbackPage) -> MHD_Result {
    var body = page.html()
    let response = body.withUnsafeMutableBytes { raw in
        bl_lmhd_create_response_from_buffer(raw.count, raw.baseAddress, .RESPMEM_MUST_COPY)
    }
    guard let response else { return .NO }
    for (name, value) in pageHeaders { _ = bl_lmhd_add_response_header(response, name, value) }
    if page.status == 405 { _ = bl_lmhd_add_response_header(response, "Allow", "GET") }
    let status = (200..<600).contains(page.status) ? UInt32(page.status) : 500
    let result = bl_lmhd_queue_response(connection, status, response)
    bl_lmhd_destroy_response(response)
    return result
}

/// Called with the request target exactly as received, before libmicrohttpd
/// splits and decodes it; what it returns is the request's context.
private let loopbackTargetHandler: bl_mhd_uri_log_handler = { cls, uri, _ in
    guard let cls else { return nil }
    let core = Unmanaged<ListenerCore>.fromOpaque(cls).takeUnretainedValue()
    var target: [UInt8]?
    if let uri {
        let bytes = Array(UnsafeBufferPointer(start: uri, count: strlen(uri)).map { UInt8(bitPattern: $0) })
        if bytes.allSatisfy(isTargetByte) { target = bytes }
    }
    let request = RequestContext(id: core.nextID.add(1, ordering: .relaxed).newValue, target: target)
    return Unmanaged.passRetained(request).toOpaque()
}

private let loopbackAccessHandler: bl_mhd_access_handler = {
    cls, connection, _, method, _, _, uploadDataSize, requestContext in
    guard let cls, let connection, let requestContext, let pointer = requestContext.pointee else { return .NO }
    let core = Unmanaged<ListenerCore>.fromOpaque(cls).takeUnretainedValue()
    let request = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
    switch request.phase {
    case .new:
        request.phase = .done
        core.connections.withLock { $0.headRead(Int(bitPattern: connection)) }
        // Before anything else, and consulting nothing: a request for another host (a page that rebound
        // its name to 127.0.0.1), or with no Host (HTTP/1.0), is not a browser's redirect to us.
        guard core.hostIsOurs(connection) else { return queuePage(connection, .badRequest) }
        guard let method, strcmp(method, "GET") == 0 else { return queuePage(connection, .methodNotAllowed) }
        guard let target = request.target else { return queuePage(connection, .badRequest) }
        let pathPart = target.prefix { $0 != UInt8(ascii: "?") }
        guard pathPart.elementsEqual(core.path) else { return queuePage(connection, .notFound) }
        // A redirect has no body: refuse one rather than read it.
        let hasBody: Bool =
            if bl_lmhd_lookup_connection_value(connection, .HEADER_KIND, "Transfer-Encoding") != nil {
                true
            } else if let length = bl_lmhd_lookup_connection_value(connection, .HEADER_KIND, "Content-Length") {
                strcmp(length, "0") != 0
            } else {
                false
            }
        if hasBody {
            return queuePage(connection, .badRequest)
        }
        guard core.startDelivery(connection, request: request, target: target) else { return .NO }
        request.phase = .delivering
        return .YES
    case .delivering:
        // Resumed: by a finished delivery (its page is there), or by close() (none: close the connection).
        guard let page = core.takeAnswer(request.id) else { return .NO }
        request.phase = .answeredDelivery
        return queuePage(connection, page)
    case .answeredDelivery, .done:
        // A body arriving after the answer was queued: discard it.
        uploadDataSize?.pointee = 0
        return .YES
    }
}

private let loopbackCompletedHandler: bl_mhd_completed_handler = { cls, connection, requestContext, _ in
    guard let cls else { return }
    let core = Unmanaged<ListenerCore>.fromOpaque(cls).takeUnretainedValue()
    if let connection {
        core.connections.withLock { $0.requestCompleted(Int(bitPattern: connection), at: .now) }
    }
    guard let requestContext, let pointer = requestContext.pointee else { return }
    let request = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
    requestContext.pointee = nil
    if request.phase == .answeredDelivery { core.unsentPages.subtract(1, ordering: .releasing) }
}

/// Each connection as libmicrohttpd accepts and closes it (polling thread, or the thread stopping the daemon).
private let loopbackConnectionHandler: bl_mhd_connection_handler = { cls, connection, _, code in
    guard let cls, let connection else { return }
    let core = Unmanaged<ListenerCore>.fromOpaque(cls).takeUnretainedValue()
    switch code {
    case .CONNECTION_NOTIFY_STARTED: core.connectionOpened(connection)
    case .CONNECTION_NOTIFY_CLOSED: core.connectionClosed(connection)
    @unknown default: break
    }
}
