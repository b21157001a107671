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

/// The body being received for one request; owned by libmicrohttpd's
/// per-request pointer from the first call of the access handler until the
/// completion callback, and touched only by that connection's thread.
private final class PendingRequest {
    var body: [UInt8] = []
    var tooLarge = false
}

/// Collects headers, cookies and query arguments through the C iterator.
private final class ValueCollector {
    var headers: [(name: String, value: String)] = []
    var cookies: [String: String] = [:]
    var query: [String: String] = [:]
    var repeatedQuery: Set<String> = []
}

/// An HTTP listener on libmicrohttpd with one thread per connection, so a
/// slow request (or the test-only exchange delay) never holds up others.
/// The handler is called concurrently from connection threads.
public final class HTTPServer: Sendable {
    public typealias Handler = @Sendable (HTTPServerRequest) -> HTTPServerResponse

    /// The daemon pointer's bit pattern, set once in `init` and cleared by `stop()`.
    private let daemon = Atomic<Int>(0)
    public let port: Int

    /// Starts listening. `tls` is (key PEM, certificate PEM).
    public init(
        address: String, port: Int, tls: (key: String, certificate: String)?, maximumBody: Int,
        connectionLimit: Int = 256, timeoutSeconds: Int = 30, handler: @escaping Handler
    ) throws(HTTPServerError) {
        var error: Int32 = 0
        let box = Unmanaged.passRetained(HandlerBox(handler: handler, maximumBody: maximumBody))
        let started = bl_mhd_start(
            address, UInt16(port), tls?.key, tls?.certificate, UInt32(connectionLimit), UInt32(timeoutSeconds),
            accessHandler, box.toOpaque(), completedHandler, nil, &error)
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

    /// Stops listening and waits for the connection threads to finish.
    public func stop() {
        guard let running = OpaquePointer(bitPattern: daemon.exchange(0, ordering: .acquiringAndReleasing)) else { return }
        MHD_stop_daemon(running)
        Unmanaged.passUnretained(box).release()
    }

    deinit { stop() }
}

/// What the C callbacks reach through their `cls` pointer.
private final class HandlerBox: Sendable {
    let handler: HTTPServer.Handler
    let maximumBody: Int
    init(handler: @escaping HTTPServer.Handler, maximumBody: Int) {
        self.handler = handler
        self.maximumBody = maximumBody
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

private let accessHandler: bl_mhd_access_handler = {
    cls, connection, url, method, _, uploadData, uploadDataSize, requestContext in
    guard let cls, let connection, let requestContext, let uploadDataSize else { return .NO }
    let box = Unmanaged<HandlerBox>.fromOpaque(cls).takeUnretainedValue()
    guard let pendingPointer = requestContext.pointee else {
        requestContext.pointee = Unmanaged.passRetained(PendingRequest()).toOpaque()
        return .YES
    }
    let pending = Unmanaged<PendingRequest>.fromOpaque(pendingPointer).takeUnretainedValue()
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
    let response = box.handler(request)

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

private let completedHandler: bl_mhd_completed_handler = { _, _, requestContext, _ in
    guard let requestContext, let pointer = requestContext.pointee else { return }
    Unmanaged<PendingRequest>.fromOpaque(pointer).release()
    requestContext.pointee = nil
}
