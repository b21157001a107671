import CMicroHTTPD
import Foundation
import Synchronization

/// One HTTP request as libmicrohttpd parsed it. Header names are lower case.
public struct HTTPServerRequest: Sendable {
    public var method: String
    /// The path, without the query (libmicrohttpd has percent-decoded it).
    public var path: String
    public var query: [String: String]
    public var headers: [(name: String, value: String)]
    public var cookies: [String: String]
    public var body: [UInt8]
    /// True when the body was longer than the limit (its bytes were dropped).
    public var bodyTooLarge: Bool
    public var remoteAddress: String
    /// The query arguments named more than once (`query` keeps the first):
    /// a redirect from an upstream provider with a repeated parameter is refused.
    public var repeatedQueryNames: Set<String> = []

    /// A request as the listener hands it over: header names in lower case,
    /// the path percent-decoded, the first of each cookie and query argument.
    public init(
        method: String, path: String, query: [String: String] = [:], headers: [(name: String, value: String)] = [],
        cookies: [String: String] = [:], body: [UInt8] = [], bodyTooLarge: Bool = false, remoteAddress: String = "127.0.0.1"
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers.map { ($0.name.lowercased(), $0.value) }
        self.cookies = cookies
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.remoteAddress = remoteAddress
    }

    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name == lower }?.value
    }

    public func hasHeader(_ name: String) -> Bool { header(name) != nil }
}

/// One HTTP response.
public struct HTTPServerResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why the HTTP listener did not start.
public enum HTTPServerError: Error, Sendable, CustomStringConvertible {
    case badAddress(String)
    case tlsUnsupported
    case startFailed(address: String, port: Int)

    public var description: String {
        switch self {
        case .badAddress(let a): "the listen address '\(a)' is not an IPv4 or IPv6 literal"
        case .tlsUnsupported: "this libmicrohttpd was built without TLS support"
        case .startFailed(let a, let p):
            "cannot listen on \(a):\(p) (address in use, or permission denied)"
        }
    }
}

/// One request, from the access handler's first call to the completion
/// callback: owned by libmicrohttpd's per-request pointer and touched only by
/// the polling thread its connection belongs to. The answer is made on a
/// handler thread while the connection is suspended, and reaches the polling
/// thread through `answer`.
private final class PendingRequest {
    enum Phase {
        /// Headers and body arriving.
        case receiving
        /// Being answered, in place or on a handler thread (the request counts in the listener's `RequestGate`).
        case answering
    }
    var body: [UInt8] = []
    var tooLarge = false
    var phase = Phase.receiving
    let answer = AnswerSlot()
}

/// Where a handler thread leaves its answer for the polling thread.
private final class AnswerSlot: Sendable {
    private let response = Mutex<HTTPServerResponse?>(nil)
    func put(_ value: HTTPServerResponse) { response.withLock { $0 = value } }
    func take() -> HTTPServerResponse? { response.withLock { $0.take() } }
}

/// Counts the requests being answered, so `stop()` can wait for them:
/// libmicrohttpd must not be stopped with a connection suspended, and a
/// request in flight gets its answer. Once closed, a request that arrives
/// is answered 503 at once.
private final class RequestGate: Sendable {
    private let state = Mutex((open: true, inFlight: 0))
    private let drained = DispatchSemaphore(value: 0)

    /// Counts one request in; false once closed.
    func enter() -> Bool {
        state.withLock { state in
            guard state.open else { return false }
            state.inFlight += 1
            return true
        }
    }

    /// Counts one request out (its connection has finished with it).
    func leave() {
        let last = state.withLock { state in
            state.inFlight -= 1
            return !state.open && state.inFlight == 0
        }
        if last { drained.signal() }
    }

    /// Closes the gate and returns when every request counted in has left.
    func close() {
        let waiting = state.withLock { state in
            state.open = false
            return state.inFlight
        }
        if waiting > 0 { drained.wait() }
    }
}

/// Collects headers, cookies and query arguments through the C iterator.
private final class ValueCollector {
    var headers: [(name: String, value: String)] = []
    var cookies: [String: String] = [:]
    var query: [String: String] = [:]
    var repeatedQuery: Set<String> = []
}

/// An HTTP listener on libmicrohttpd: a few polling threads (its thread pool,
/// epoll) read and write every connection; each request, once its body is in,
/// is answered on a handler thread (`HandlerThreads`) while its connection is
/// suspended, then resumed to be written. So a slow request (a mail, an
/// upstream provider, the test-only exchange delay) never holds up others,
/// and no thread is made per connection. A request the owner's
/// `answersInPlace` accepts (one short transaction, nothing to wait for) is
/// answered on the polling thread that read it instead: two thread
/// hand-overs fewer. The handler is called concurrently from handler and
/// polling threads.
public final class HTTPServer: Sendable {
    public typealias Handler = @Sendable (HTTPServerRequest) -> HTTPServerResponse
    /// Says whether a request, once in, may be answered on the polling thread
    /// that read it (no hand-over to a handler thread and back): only for a
    /// request whose answer needs no wait beyond a short, bounded one.
    public typealias InPlace = @Sendable (HTTPServerRequest) -> Bool

    /// The daemon pointer's bit pattern, set once in `init` and cleared by `stop()`.
    private let daemon = Atomic<Int>(0)
    public let port: Int

    /// The polling threads when none are asked for: one a CPU, at most 4 (they
    /// only read and write; the answers are made on handler threads).
    public static var defaultPollingThreads: Int { min(4, max(1, ProcessInfo.processInfo.activeProcessorCount)) }

    /// Starts listening. `tls` is (key PEM, certificate PEM). `pollingThreads`:
    /// libmicrohttpd's threads (0: `defaultPollingThreads`); the handler
    /// threads number at most `connectionLimit`. A request `answersInPlace`
    /// accepts is answered by `handler` on the polling thread itself.
    public init(
        address: String, port: Int, tls: (key: String, certificate: String)?, maximumBody: Int,
        connectionLimit: Int = 256, timeoutSeconds: Int = 30, pollingThreads: Int = 0,
        answersInPlace: InPlace? = nil, handler: @escaping Handler
    ) throws(HTTPServerError) {
        var error: Int32 = 0
        let box = Unmanaged.passRetained(
            HandlerBox(
                handler: handler, answersInPlace: answersInPlace, maximumBody: maximumBody,
                threads: HandlerThreads(maximum: connectionLimit)))
        let polling = pollingThreads > 0 ? pollingThreads : Self.defaultPollingThreads
        let started = bl_mhd_start_pool(
            address, UInt16(port), tls?.key, tls?.certificate, UInt32(connectionLimit), UInt32(timeoutSeconds),
            UInt32(polling), accessHandler, box.toOpaque(), completedHandler, box.toOpaque(), &error)
        guard let started else {
            box.release()
            switch UInt32(error) {
            case BL_MHD_BAD_ADDRESS.rawValue: throw .badAddress(address)
            case BL_MHD_NO_TLS.rawValue: throw .tlsUnsupported
            default: throw .startFailed(address: address, port: port)
            }
        }
        self.box = box.takeUnretainedValue()
        self.port = Int(bl_mhd_bound_port(started))
        daemon.store(Int(bitPattern: started), ordering: .releasing)
    }

    /// What the C callbacks reach through `cls`; retained once for the
    /// daemon in `init`, released after the daemon stops.
    private let box: HandlerBox

    /// The handler threads now (busy and idle), for tests.
    var handlerThreadCount: Int { box.threads.counts.threads }

    /// Stops listening: waits for the requests being answered to be written
    /// (one arriving meanwhile is answered 503), closes every connection,
    /// joins the polling threads and ends the handler threads.
    public func stop() {
        guard let running = OpaquePointer(bitPattern: daemon.exchange(0, ordering: .acquiringAndReleasing)) else { return }
        box.gate.close()
        MHD_stop_daemon(running)
        box.threads.stop()
        Unmanaged.passUnretained(box).release()
    }

    deinit { stop() }
}

/// What the C callbacks reach through their `cls` pointer.
private final class HandlerBox: Sendable {
    let handler: HTTPServer.Handler
    let answersInPlace: HTTPServer.InPlace?
    let maximumBody: Int
    let threads: HandlerThreads
    let gate = RequestGate()
    init(
        handler: @escaping HTTPServer.Handler, answersInPlace: HTTPServer.InPlace?, maximumBody: Int,
        threads: HandlerThreads
    ) {
        self.handler = handler
        self.answersInPlace = answersInPlace
        self.maximumBody = maximumBody
        self.threads = threads
    }
}

private let collectValue: MHD_KeyValueIterator = { cls, kind, key, value in
    guard let cls, let key else { return .YES }
    let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
    let name = String(cString: key)
    let text = value.map { String(cString: $0) } ?? ""
    switch kind {
    case .HEADER_KIND: collector.headers.append((name.lowercased(), text))
    case .COOKIE_KIND: if collector.cookies[name] == nil { collector.cookies[name] = text }
    case .GET_ARGUMENT_KIND:
        if collector.query[name] == nil { collector.query[name] = text } else { collector.repeatedQuery.insert(name) }
    default: break
    }
    return .YES
}

/// Called by a polling thread: first when the head is in, then with each
/// piece of the body, then once more with none (the request is complete:
/// it is answered in place when `answersInPlace` says so, else handed to a
/// handler thread and the connection suspended), and, after the connection
/// is resumed, once more to queue the answer.
private let accessHandler: bl_mhd_access_handler = {
    cls, connection, url, method, _, uploadData, uploadDataSize, requestContext in
    guard let cls, let connection, let requestContext, let uploadDataSize else { return .NO }
    let box = Unmanaged<HandlerBox>.fromOpaque(cls).takeUnretainedValue()
    guard let pendingPointer = requestContext.pointee else {
        requestContext.pointee = Unmanaged.passRetained(PendingRequest()).toOpaque()
        return .YES
    }
    let pending = Unmanaged<PendingRequest>.fromOpaque(pendingPointer).takeUnretainedValue()
    if pending.phase == .answering {
        // Resumed: the handler thread has left the answer.
        guard let response = pending.answer.take() else { return .NO }
        return queue(response, on: connection)
    }
    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        if !pending.tooLarge, let uploadData {
            if pending.body.count + count > box.maximumBody {
                pending.tooLarge = true
                pending.body = []
            } else {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
                    pending.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: count))
                }
            }
        }
        uploadDataSize.pointee = 0
        return .YES
    }

    let collector = ValueCollector()
    let collectorPointer = Unmanaged.passUnretained(collector).toOpaque()
    withExtendedLifetime(collector) {
        for kind in [MHD_ValueKind.HEADER_KIND, .COOKIE_KIND, .GET_ARGUMENT_KIND] {
            _ = MHD_get_connection_values(connection, kind, collectValue, collectorPointer)
        }
    }
    var addressBuffer = [CChar](repeating: 0, count: 64)
    let remote: String =
        bl_mhd_client_address(connection, &addressBuffer, addressBuffer.count) == 0
        ? String(decoding: addressBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "unknown"
    var request = HTTPServerRequest(
        method: method.map { String(cString: $0) } ?? "GET", path: url.map { String(cString: $0) } ?? "/",
        query: collector.query, headers: collector.headers, cookies: collector.cookies, body: pending.body,
        bodyTooLarge: pending.tooLarge, remoteAddress: remote)
    request.repeatedQueryNames = collector.repeatedQuery
    pending.body = []

    guard box.gate.enter() else {
        // Stopping: nothing new is started.
        return queue(
            HTTPServerResponse(status: 503, headers: [("Cache-Control", "no-store"), ("Retry-After", "1")]), on: connection)
    }
    pending.phase = .answering
    if let inPlace = box.answersInPlace, inPlace(request) {
        // Answered here: no hand-over to a handler thread, no suspend and resume.
        return queue(box.handler(request), on: connection)
    }
    // Suspended before the job can resume it; resumed only by the job, after its answer is in.
    MHD_suspend_connection(connection)
    let answer = pending.answer
    let handler = box.handler
    let suspended = Int(bitPattern: connection)
    let complete = request
    box.threads.submit {
        answer.put(handler(complete))
        MHD_resume_connection(OpaquePointer(bitPattern: suspended))
    }
    return .YES
}

/// Queues `response` on `connection` (in the access handler).
private func queue(_ response: HTTPServerResponse, on connection: OpaquePointer) -> MHD_Result {
    var body = response.body
    let mhdResponse = body.withUnsafeMutableBytes { raw in
        MHD_create_response_from_buffer(raw.count, raw.baseAddress, .RESPMEM_MUST_COPY)
    }
    guard let mhdResponse else { return .NO }
    for (name, value) in response.headers { _ = MHD_add_response_header(mhdResponse, name, value) }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    MHD_destroy_response(mhdResponse)
    return result
}

/// The request is over (answered, or its connection closed or timed out): a
/// request handed to a handler thread leaves the gate here, so `stop()` waits
/// until its answer has been written.
private let completedHandler: bl_mhd_completed_handler = { cls, _, requestContext, _ in
    guard let cls, let requestContext, let pointer = requestContext.pointee else { return }
    let pending = Unmanaged<PendingRequest>.fromOpaque(pointer).takeRetainedValue()
    requestContext.pointee = nil
    if pending.phase == .answering { Unmanaged<HandlerBox>.fromOpaque(cls).takeUnretainedValue().gate.leave() }
}
