import BrokerCore
import BrowserLoginProtocol
import CCurl
import CurlSupport
import Dispatch
import Synchronization

/// An `HTTPTransport` over libcurl easy handles.
///
/// - Follows no redirect (a 3xx is returned as it is), has no cookie engine,
///   speaks only `http` and `https`, verifies TLS peers and host names
///   against the system CAs or the request's `caFile`.
/// - Never repeats a request: requests that change state go out on a fresh
///   connection that is closed afterwards (`CURLOPT_FRESH_CONNECT`,
///   `CURLOPT_FORBID_REUSE`), so libcurl never re-sends one after finding a
///   reused connection dead. Safe requests may reuse a connection.
/// - Runs each transfer on one of a fixed number of worker queues, never on
///   the caller's thread. Each worker owns one easy handle and runs one
///   transfer at a time; a request waits for a free worker (that wait does
///   not count against its timeout).
/// - Cancelling the sending task aborts its transfer (within about a
///   second): `notSent` if no request byte had been written, else `noAnswer`.
/// - Proxies: without a `proxyLookup`, libcurl takes them from the
///   environment as the `curl` program does (`http_proxy`, `https_proxy`,
///   `all_proxy`, `no_proxy`, see `CurlProxy.environment`). With one, the
///   lookup names the proxy of each request's origin (the user's `no_proxy`
///   still applies). Loopback hosts never go through a proxy either way.
public final class CurlTransport: HTTPTransport {
    /// The proxy for an origin (`https://host:port`, never a path): a proxy
    /// URL, or nil for none. Called on a worker's thread before each transfer
    /// to a host that is not loopback, so it may block briefly (and should cache).
    public typealias ProxyLookup = @Sendable (_ origin: String) -> String?

    /// Configuration of the transport. Requests carry their own timeouts,
    /// size limit and CA file; proxies come from the environment or the lookup.
    public struct Configuration: Sendable, Equatable {
        /// How many transfers may run at once (one worker queue and easy handle each).
        public var maximumConcurrentTransfers: Int

        public init(maximumConcurrentTransfers: Int = 8) { self.maximumConcurrentTransfers = maximumConcurrentTransfers }
    }

    public let configuration: Configuration
    private let workers: [Worker]
    /// Transfers queued or running per worker.
    private let load: Mutex<[Int]>

    /// `proxyLookup`: nil leaves proxies to the environment (libcurl's reading of it).
    public init(configuration: Configuration = Configuration(), proxyLookup: ProxyLookup? = nil) {
        self.configuration = configuration
        let count = max(1, configuration.maximumConcurrentTransfers)
        workers = (0..<count).map { Worker(index: $0, proxyLookup: proxyLookup) }
        load = Mutex(Array(repeating: 0, count: count))
    }

    public func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        try await send(request, proxy: nil)
    }

    /// `send` with this request's proxy decided by the caller (the broker, for
    /// the HTTP helper): nil leaves it to the transport's lookup or the environment.
    public func send(_ request: HTTPRequest, proxy: CurlProxy?) async throws(HTTPTransportError) -> HTTPResponse {
        let cancellation = CancellationFlag()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<HTTPResponse, HTTPTransportError>, Never>) in
                start(request, proxy: proxy, cancellation: cancellation) { continuation.resume(returning: $0) }
            }
        } onCancel: {
            cancellation.cancel()
        }
        return try result.get()
    }

    /// `send` for a caller that is not a task (the HTTP helper's read loop):
    /// the transfer is queued on a worker and `completion` runs once, on that
    /// worker's thread, with its result (on the caller's, at once, when the
    /// request is refused before any transfer). `cancellation` aborts it as a
    /// cancelled task does `send`'s.
    public func start(
        _ request: HTTPRequest, proxy: CurlProxy?, cancellation: CancellationFlag,
        completion: @escaping @Sendable (Result<HTTPResponse, HTTPTransportError>) -> Void
    ) {
        var checked: TransferPlan
        do throws(HTTPTransportError) { checked = try TransferPlan(request) } catch {
            completion(.failure(error))
            return
        }
        checked.proxy = proxy
        let plan = checked
        let index = load.withLock { counts in
            let least = counts.indices.min { counts[$0] < counts[$1] }!
            counts[least] += 1
            return least
        }
        let worker = workers[index]
        worker.queue.async { [self] in
            let result = worker.perform(plan, cancellation: cancellation)
            load.withLock { $0[index] -= 1 }
            completion(result)
        }
    }
}

/// A checked request, ready for libcurl.
struct TransferPlan: Sendable {
    enum Method: String, Sendable { case GET, HEAD, POST, PUT, PATCH, DELETE }

    let transfer: CurlRequest
    /// `host[:port]`, for messages (never the path: it may hold an attempt id).
    let authority: String
    /// `scheme://host[:port]`, what a proxy lookup is asked about.
    let origin: String
    /// Chosen by the caller; nil: the transport's lookup, or the environment.
    var proxy: CurlProxy?

    init(_ request: HTTPRequest) throws(HTTPTransportError) {
        guard let method = Method(rawValue: request.method) else {
            throw .invalidRequest("the method must be GET, HEAD, POST, PUT, PATCH or DELETE")
        }
        guard let parts = URLParts(splitting: request.url), ["http", "https"].contains(parts.scheme.lowercased()),
            let authority = parts.authority, !authority.isEmpty
        else { throw .invalidRequest("the URL must be an absolute http or https URL") }
        guard !parts.hasUserinfo, parts.fragment == nil else {
            throw .invalidRequest("the URL must have no userinfo and no fragment")
        }
        guard request.timeoutMilliseconds > 0, request.connectTimeoutMilliseconds > 0 else {
            throw .invalidRequest("timeouts must be positive")
        }
        guard request.maximumResponseBytes > 0 else { throw .invalidRequest("the response size limit must be positive") }
        if let caFile = request.caFile, caFile.isEmpty || caFile.utf8.contains(0) {
            throw .invalidRequest("the CA file name is empty or invalid")
        }
        for header in request.headers {
            guard TransferPlan.isToken(header.name) else { throw .invalidRequest("a header name is not an HTTP token") }
            guard TransferPlan.isFieldValue(header.value) else {
                throw .invalidRequest("the value of header '\(header.name)' has a control character")
            }
        }
        let body: [UInt8]?
        switch method {
        case .POST, .PUT, .PATCH: body = request.body ?? []
        case .DELETE: body = request.body
        case .GET, .HEAD:
            guard request.body == nil else { throw .invalidRequest("a \(method.rawValue) request has no body") }
            body = nil
        }
        // No form content type invented by libcurl for a body the caller did not label.
        let unlabelled = body != nil && !request.headers.contains { $0.name.lowercased() == "content-type" }
        transfer = CurlRequest(
            method: method.rawValue, url: request.url, headers: request.headers.map { ($0.name, $0.value) },
            suppressedHeaders: unlabelled ? ["Content-Type"] : [], body: body,
            timeoutMilliseconds: request.timeoutMilliseconds,
            connectTimeoutMilliseconds: request.connectTimeoutMilliseconds,
            maximumResponseBytes: request.maximumResponseBytes, caFile: request.caFile,
            freshConnection: request.changesState)
        self.authority = authority
        origin = parts.scheme.lowercased() + "://" + authority
    }

    static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { b in
                isAlphaNumeric(b) || "!#$%&'*+-.^_`|~".utf8.contains(b)
            }
    }

    static func isFieldValue(_ text: String) -> Bool { text.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) } }

    private static func isAlphaNumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }
}

/// One serial queue and the libcurl session it owns.
///
/// `@unchecked Sendable` is safe because `session` is read and written only
/// inside `perform`, which runs only on `queue` (serial): one thread at a
/// time, never concurrently. `queue` is immutable.
final class Worker: @unchecked Sendable {
    let queue: DispatchQueue
    let proxyLookup: CurlTransport.ProxyLookup?
    private var session: CurlSession?

    init(index: Int, proxyLookup: CurlTransport.ProxyLookup?) {
        queue = DispatchQueue(label: "browser-login.http.\(index)")
        self.proxyLookup = proxyLookup
    }

    /// Runs one transfer. Only on `queue`.
    func perform(_ plan: TransferPlan, cancellation: CancellationFlag) -> Result<HTTPResponse, HTTPTransportError> {
        dispatchPrecondition(condition: .onQueue(queue))
        if cancellation.isCancelled { return .failure(.notSent("the request was cancelled before it was sent")) }
        if session == nil { session = CurlSession() }
        guard let session else { return .failure(.notSent("libcurl could not start a transfer")) }
        var transfer = plan.transfer
        if let proxy = plan.proxy {
            transfer.proxy = proxy
        } else if let proxyLookup, !CurlLoopback.contains(url: transfer.url) {
            transfer.proxy = proxyLookup(plan.origin).map { .url($0) } ?? .direct
        }
        switch session.perform(transfer, cancellation: cancellation) {
        case .answered(let status, let headers, let body):
            return .success(HTTPResponse(status: status, headers: headers.map { HTTPHeader($0.name, $0.value) }, body: body))
        case .tooLarge:
            return .failure(.responseTooLarge)
        case .failed(let code, let reachedTransfer, let detail):
            return .failure(
                TransferFailure.classify(
                    code: code, reachedTransfer: reachedTransfer, authority: plan.authority, detail: detail))
        }
    }
}

/// Turns a failed transfer into `notSent` or `noAnswer`.
enum TransferFailure {
    /// The TLS handshake's codes: produced before a request byte is written.
    static let tls = Set(
        [
            CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
            CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
            CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED,
        ].map(\.rawValue))

    /// The other codes only produced before a request byte is written (proxy
    /// and engine setup; name resolution and TCP connect are told apart first).
    static let beforeSending = Set(
        [
            CURLE_COULDNT_RESOLVE_PROXY, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED,
            CURLE_SSL_ENGINE_INITFAILED, CURLE_PROXY, CURLE_INTERFACE_FAILED, CURLE_FAILED_INIT,
        ].map(\.rawValue))

    static let malformedRequest = Set(
        [
            CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT, CURLE_BAD_FUNCTION_ARGUMENT, CURLE_NOT_BUILT_IN,
            CURLE_UNKNOWN_OPTION,
        ].map(\.rawValue))

    /// `reachedTransfer`: libcurl got past connecting (its pre-transfer
    /// timer ran) or counted request bytes. Without either, no request
    /// byte was written, whatever the code (e.g. a timeout in the TLS
    /// handshake).
    static func classify(code: CURLcode, reachedTransfer: Bool, authority: String, detail: String)
        -> HTTPTransportError
    {
        let raw = code.rawValue
        if malformedRequest.contains(raw) { return .invalidRequest("libcurl refused the request (\(curlText(code)))") }
        if tls.contains(raw) {
            let why = detail.isEmpty ? curlText(code) : detail
            if raw == CURLE_SSL_CACERT_BADFILE.rawValue {
                return .notSent("the CA file could not be read; check the client's CA file setting")
            }
            return .notSent("the TLS handshake with \(authority) failed (\(why)); check the server's certificate and the CA file")
        }
        if raw == CURLE_COULDNT_RESOLVE_HOST.rawValue {
            return .notSent("could not resolve \(authority); check the server address and the network")
        }
        if raw == CURLE_COULDNT_CONNECT.rawValue {
            return .notSent("could not connect to \(authority); check that the server is running and reachable")
        }
        if beforeSending.contains(raw) {
            return .notSent("the connection to \(authority) could not be set up (\(curlText(code)))")
        }
        if raw == CURLE_ABORTED_BY_CALLBACK.rawValue {
            return reachedTransfer
                ? .noAnswer("the request to \(authority) was cancelled after sending; it may have been processed")
                : .notSent("the request to \(authority) was cancelled before it was sent")
        }
        if raw == CURLE_OPERATION_TIMEDOUT.rawValue {
            return reachedTransfer
                ? .noAnswer("\(authority) did not answer in time; the request may have been processed")
                : .notSent("the connection to \(authority) timed out before the request was sent")
        }
        guard reachedTransfer else {
            return .notSent("the connection to \(authority) failed before the request was sent (\(curlText(code)))")
        }
        switch raw {
        case CURLE_GOT_NOTHING.rawValue:
            return .noAnswer("\(authority) closed the connection without answering; the request may have been processed")
        case CURLE_PARTIAL_FILE.rawValue:
            return .noAnswer("the answer from \(authority) was cut off; the request may have been processed")
        default:
            return .noAnswer(
                "the connection to \(authority) failed after sending (\(curlText(code))); the request may have been processed")
        }
    }
}
