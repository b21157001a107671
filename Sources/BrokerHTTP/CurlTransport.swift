import BrokerCore
import BrowserLoginProtocol
import CCurl
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
public final class CurlTransport: HTTPTransport {
    /// Configuration of the transport. Requests carry their own timeouts,
    /// size limit and CA file.
    public struct Configuration: Sendable, Equatable {
        /// Where proxies come from.
        public enum Proxy: Sendable, Equatable {
            /// Never use a proxy, whatever the environment says.
            case none
            /// libcurl's own reading of `https_proxy`, `http_proxy` and
            /// `all_proxy`. Loopback addresses and `noProxy` never go through
            /// a proxy (this replaces the environment's `no_proxy`, so pass
            /// its entries in `noProxy` when they matter).
            case environment
            /// This proxy URL (`http://host:port`), for every non-excluded host.
            case url(String)
        }

        /// Default `.environment`: a broker on a network that only reaches
        /// the internet through a proxy still works, and an https login
        /// server stays end-to-end TLS through the proxy's CONNECT tunnel.
        /// Loopback (the only place plain http is allowed) is never proxied,
        /// so a development server's traffic never leaves the machine.
        public var proxy: Proxy
        /// Host names or addresses never sent through a proxy, besides loopback.
        public var noProxy: [String]
        /// How many transfers may run at once (one worker queue and easy handle each).
        public var maximumConcurrentTransfers: Int

        public init(proxy: Proxy = .environment, noProxy: [String] = [], maximumConcurrentTransfers: Int = 8) {
            self.proxy = proxy
            self.noProxy = noProxy
            self.maximumConcurrentTransfers = maximumConcurrentTransfers
        }
    }

    public let configuration: Configuration
    private let workers: [Worker]
    /// Transfers queued or running per worker.
    private let load: Mutex<[Int]>

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        let count = max(1, configuration.maximumConcurrentTransfers)
        workers = (0..<count).map { Worker(index: $0) }
        load = Mutex(Array(repeating: 0, count: count))
    }

    public func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        let plan = try TransferPlan(request)
        let index = load.withLock { counts in
            let least = counts.indices.min { counts[$0] < counts[$1] }!
            counts[least] += 1
            return least
        }
        defer { load.withLock { $0[index] -= 1 } }
        let worker = workers[index]
        let configuration = configuration
        let cancellation = CancellationFlag()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<HTTPResponse, HTTPTransportError>, Never>) in
                worker.queue.async {
                    continuation.resume(
                        returning: worker.perform(plan, configuration: configuration, cancellation: cancellation))
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
        return try result.get()
    }
}

/// A checked request, ready for libcurl.
struct TransferPlan: Sendable {
    enum Method: String, Sendable { case GET, HEAD, POST, PUT, PATCH, DELETE }

    let request: HTTPRequest
    let method: Method
    /// `host[:port]`, for messages (never the path: it may hold an attempt id).
    let authority: String
    /// Header lines for `CURLOPT_HTTPHEADER`.
    let headerLines: [String]
    let body: [UInt8]?

    init(_ request: HTTPRequest) throws(HTTPTransportError) {
        guard let method = Method(rawValue: request.method) else {
            throw .invalidRequest("the method must be GET, HEAD, POST, PUT, PATCH or DELETE")
        }
        guard let parts = URLParts(splitting: request.url), ["http", "https"].contains(parts.scheme.lowercased()),
            let authority = parts.authority, !authority.isEmpty
        else {
            throw .invalidRequest("the URL must be an absolute http or https URL")
        }
        guard !parts.hasUserinfo, parts.fragment == nil else {
            throw .invalidRequest("the URL must have no userinfo and no fragment")
        }
        guard request.timeoutMilliseconds > 0, request.connectTimeoutMilliseconds > 0 else {
            throw .invalidRequest("timeouts must be positive")
        }
        guard request.maximumResponseBytes > 0 else {
            throw .invalidRequest("the response size limit must be positive")
        }
        if let caFile = request.caFile, caFile.isEmpty || caFile.utf8.contains(0) {
            throw .invalidRequest("the CA file name is empty or invalid")
        }
        var lines: [String] = []
        var hasContentType = false
        for header in request.headers {
            guard TransferPlan.isToken(header.name) else {
                throw .invalidRequest("a header name is not an HTTP token")
            }
            guard TransferPlan.isFieldValue(header.value) else {
                throw .invalidRequest("the value of header '\(header.name)' has a control character")
            }
            if header.name.lowercased() == "content-type" { hasContentType = true }
            // libcurl's syntax: "Name;" sends an empty header, "Name:" would remove it.
            lines.append(header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)")
        }
        switch method {
        case .POST, .PUT, .PATCH:
            body = request.body ?? []
        case .DELETE:
            body = request.body
        case .GET, .HEAD:
            guard request.body == nil else { throw .invalidRequest("a \(method.rawValue) request has no body") }
            body = nil
        }
        // No `Expect: 100-continue` round trip, and no form content type
        // invented by libcurl for a body the caller did not label.
        lines.append("Expect:")
        if body != nil && !hasContentType { lines.append("Content-Type:") }
        self.request = request
        self.method = method
        self.authority = authority
        self.headerLines = lines
    }

    static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { b in
                isAlphaNumeric(b) || "!#$%&'*+-.^_`|~".utf8.contains(b)
            }
    }

    static func isFieldValue(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }

    private static func isAlphaNumeric(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
    }
}

/// One serial queue and the easy handle it owns.
///
/// `@unchecked Sendable` is safe because `handle` is read and written only
/// inside `perform`, which runs only on `queue` (serial): one thread at a
/// time, never concurrently. `queue` and `index` are immutable.
final class Worker: @unchecked Sendable {
    let queue: DispatchQueue
    private var handle: EasyHandle?

    init(index: Int) {
        queue = DispatchQueue(label: "browser-login.http.\(index)")
    }

    /// Runs one transfer. Only on `queue`.
    func perform(_ plan: TransferPlan, configuration: CurlTransport.Configuration, cancellation: CancellationFlag)
        -> Result<HTTPResponse, HTTPTransportError>
    {
        dispatchPrecondition(condition: .onQueue(queue))
        if cancellation.isCancelled { return .failure(.notSent("the request was cancelled before it was sent")) }
        if handle == nil { handle = EasyHandle() }
        guard let handle else { return .failure(.notSent("libcurl could not start a transfer")) }
        handle.reset()
        let sink = TransferSink(limit: plan.request.maximumResponseBytes, cancellation: cancellation)
        let headers = HeaderList()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let code: CURLcode = withExtendedLifetime(sink) {
            errorBuffer.withUnsafeMutableBytes { errorBytes in
                guard configure(handle, plan, configuration, sink: sink, headers: headers),
                    handle.set(CURLOPT_ERRORBUFFER, pointer: errorBytes.baseAddress)
                else { return CURLE_BAD_FUNCTION_ARGUMENT }
                let code = handle.perform()
                // Nothing in the handle may point at this call's memory afterwards.
                _ = handle.set(CURLOPT_ERRORBUFFER, pointer: nil)
                _ = handle.set(CURLOPT_WRITEDATA, pointer: nil)
                _ = handle.set(CURLOPT_HEADERDATA, pointer: nil)
                _ = handle.set(CURLOPT_XFERINFODATA, pointer: nil)
                _ = handle.set(CURLOPT_HTTPHEADER, list: nil)
                return code
            }
        }
        if code == CURLE_OK {
            let status = handle.info(CURLINFO_RESPONSE_CODE)
            return .success(HTTPResponse(status: status, headers: sink.headers, body: sink.body))
        }
        if code == CURLE_FILESIZE_EXCEEDED || (code == CURLE_WRITE_ERROR && sink.tooLarge) {
            return .failure(.responseTooLarge)
        }
        let reachedTransfer =
            handle.info(offset: CURLINFO_PRETRANSFER_TIME_T) > 0 || handle.info(CURLINFO_REQUEST_SIZE) > 0
        let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return .failure(
            TransferFailure.classify(
                code: code, reachedTransfer: reachedTransfer, authority: plan.authority, detail: detail))
    }

    private func configure(
        _ handle: EasyHandle, _ plan: TransferPlan, _ configuration: CurlTransport.Configuration,
        sink: TransferSink, headers: HeaderList
    ) -> Bool {
        let request = plan.request
        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        var ok =
            handle.set(CURLOPT_URL, request.url)
            && handle.set(CURLOPT_PROTOCOLS_STR, "http,https")
            && handle.set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
            && handle.set(CURLOPT_FOLLOWLOCATION, 0)
            && handle.set(CURLOPT_NOSIGNAL, 1)
            && handle.set(CURLOPT_TIMEOUT_MS, request.timeoutMilliseconds)
            && handle.set(CURLOPT_CONNECTTIMEOUT_MS, min(request.connectTimeoutMilliseconds, request.timeoutMilliseconds))
            && handle.set(CURLOPT_SSL_VERIFYPEER, 1)
            && handle.set(CURLOPT_SSL_VERIFYHOST, 2)
            && handle.set(CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
            && handle.set(CURLOPT_MAXFILESIZE_LARGE, offset: Int64(request.maximumResponseBytes))
            && handle.set(CURLOPT_WRITEFUNCTION, callback: writeBodyCallback)
            && handle.set(CURLOPT_WRITEDATA, pointer: sinkPointer)
            && handle.set(CURLOPT_HEADERFUNCTION, callback: writeHeaderCallback)
            && handle.set(CURLOPT_HEADERDATA, pointer: sinkPointer)
            && handle.set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
            && handle.setProgress(progressCallback)
            && handle.set(CURLOPT_XFERINFODATA, pointer: sinkPointer)
            && handle.set(CURLOPT_NOPROGRESS, 0)
        if let caFile = request.caFile { ok = ok && handle.set(CURLOPT_CAINFO, caFile) }
        if request.changesState {
            ok = ok && handle.set(CURLOPT_FRESH_CONNECT, 1) && handle.set(CURLOPT_FORBID_REUSE, 1)
        }
        let noProxy = (["127.0.0.1", "localhost", "::1"] + configuration.noProxy).joined(separator: ",")
        switch configuration.proxy {
        case .none: ok = ok && handle.set(CURLOPT_PROXY, "")
        case .environment: ok = ok && handle.set(CURLOPT_NOPROXY, noProxy)
        case .url(let url): ok = ok && handle.set(CURLOPT_PROXY, url) && handle.set(CURLOPT_NOPROXY, noProxy)
        }
        switch plan.method {
        case .GET: ok = ok && handle.set(CURLOPT_HTTPGET, 1)
        case .HEAD: ok = ok && handle.set(CURLOPT_NOBODY, 1)
        case .POST: ok = ok && handle.set(CURLOPT_POST, 1)
        case .PUT, .PATCH, .DELETE: ok = ok && handle.set(CURLOPT_CUSTOMREQUEST, plan.method.rawValue)
        }
        if let body = plan.body { ok = ok && handle.setBody(body) }
        for line in plan.headerLines { ok = ok && headers.append(line) }
        return ok && handle.set(CURLOPT_HTTPHEADER, list: headers.raw)
    }
}

/// Turns a failed transfer into `notSent` or `noAnswer`.
enum TransferFailure {
    /// Codes that are only produced before a request byte is written:
    /// name resolution, TCP connect, proxy setup and the TLS handshake.
    static let beforeSending: Set<UInt32> = [
        CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_SSL_CONNECT_ERROR,
        CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
        CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_CRL_BADFILE,
        CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_PROXY,
        CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED, CURLE_INTERFACE_FAILED, CURLE_FAILED_INIT,
    ].reduce(into: []) { $0.insert($1.rawValue) }

    static let tls: Set<UInt32> = [
        CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
        CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
        CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED,
    ].reduce(into: []) { $0.insert($1.rawValue) }

    static let malformedRequest: Set<UInt32> = [
        CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT, CURLE_BAD_FUNCTION_ARGUMENT, CURLE_NOT_BUILT_IN,
        CURLE_UNKNOWN_OPTION,
    ].reduce(into: []) { $0.insert($1.rawValue) }

    /// `reachedTransfer`: libcurl got past connecting (its pre-transfer
    /// timer ran) or counted request bytes. Without either, no request
    /// byte was written, whatever the code (e.g. a timeout in the TLS
    /// handshake).
    static func classify(code: CURLcode, reachedTransfer: Bool, authority: String, detail: String)
        -> HTTPTransportError
    {
        let raw = code.rawValue
        if malformedRequest.contains(raw) {
            return .invalidRequest("libcurl refused the request (\(curlText(code)))")
        }
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
