import CCurl
import Synchronization

// Every call into libcurl in the project goes through this file: the broker's
// transport (BrokerHTTP) and the scripted browser (ScriptedBrowser) both send
// their requests with `CurlSession`.

/// `curl_global_init` exactly once per process, before the first handle.
let curlGlobalInit: CURLcode = bl_curl_global_init_all()

/// One header of an answer, name as the server sent it.
public struct CurlHeader: Sendable, Equatable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// One transfer, as libcurl is told it. Checking a request (methods,
/// header syntax, URL shape) is the caller's business.
public struct CurlRequest: Sendable {
    public var method: String
    public var url: String
    /// Sent as given; an empty value is sent as an empty header (libcurl's `Name;`).
    public var headers: [(name: String, value: String)]
    /// Headers libcurl adds on its own that are not to be sent (e.g. the form
    /// `Content-Type` it invents for a body).
    public var suppressedHeaders: [String]
    /// nil: no body (a `POST` without one is sent with no `Content-Length`).
    public var body: [UInt8]?
    public var timeoutMilliseconds: Int
    public var connectTimeoutMilliseconds: Int
    /// Answers larger than this fail with `tooLarge`; nil: no limit.
    public var maximumResponseBytes: Int?
    /// A PEM file of CAs to trust instead of the system's.
    public var caFile: String?
    /// A fresh connection, closed afterwards (`CURLOPT_FRESH_CONNECT`,
    /// `CURLOPT_FORBID_REUSE`): libcurl then never re-sends the request
    /// after finding a reused connection dead.
    public var freshConnection: Bool
    /// Which proxy, if any, carries the transfer. Loopback URLs never use one.
    public var proxy: CurlProxy

    public init(
        method: String, url: String, headers: [(name: String, value: String)] = [], suppressedHeaders: [String] = [],
        body: [UInt8]? = nil,
        timeoutMilliseconds: Int = 60_000, connectTimeoutMilliseconds: Int = 10_000, maximumResponseBytes: Int? = nil,
        caFile: String? = nil, freshConnection: Bool = false, proxy: CurlProxy = .environment
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.suppressedHeaders = suppressedHeaders
        self.body = body
        self.timeoutMilliseconds = timeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.maximumResponseBytes = maximumResponseBytes
        self.caFile = caFile
        self.freshConnection = freshConnection
        self.proxy = proxy
    }
}

/// Which proxy carries a transfer to a host that is not loopback.
public enum CurlProxy: Sendable, Equatable {
    /// libcurl's own choice from the environment, as the `curl` program makes
    /// it: `http_proxy` (lower case only) for http URLs, `https_proxy` or
    /// `HTTPS_PROXY` for https, else `all_proxy` or `ALL_PROXY`; none for a
    /// host that `no_proxy` (or `NO_PROXY`) lists.
    case environment
    /// No proxy, whatever the environment says.
    case direct
    /// This proxy (`http://host:port`, `socks5h://host:port`, …). A host that
    /// `no_proxy` (or `NO_PROXY`) lists still goes direct, as with curl.
    case url(String)
}

/// Loopback hosts never go through a proxy: plain http is only allowed to
/// them, and a proxy could not reach the user's own machine anyway.
public enum CurlLoopback {
    /// Whether `url`'s host is loopback: `localhost` (or a name under
    /// `.localhost`), an IPv4 address in 127.0.0.0/8 or `::1`. The host is
    /// read by libcurl's own URL parser, so what it checks is what libcurl
    /// connects to (`127.1` and `0x7f.0.0.1` are 127.0.0.1 to both).
    public static func contains(url: String) -> Bool {
        guard let host = host(of: url) else { return false }
        return isLoopback(host: host)
    }

    /// `host` as libcurl's URL parser gives it (an IPv6 address in brackets).
    public static func isLoopback(host: String) -> Bool {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if name == "[::1]" || name == "[0:0:0:0:0:0:0:1]" { return true }
        if name.hasPrefix("[::ffff:127.") { return true }
        let octets = name.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// The host of `url` by libcurl's URL parser; nil when it cannot parse it.
    public static func host(of url: String) -> String? {
        guard curlGlobalInit == CURLE_OK, let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, url, 0) == CURLUE_OK else { return nil }
        var host: UnsafeMutablePointer<CChar>? = nil
        guard curl_url_get(handle, CURLUPART_HOST, &host, 0) == CURLUE_OK, let host else { return nil }
        defer { curl_free(host) }
        return String(cString: host)
    }
}

/// What one transfer came to.
public enum CurlOutcome: Sendable {
    /// An HTTP answer (any status): only the final response's headers, in order.
    case answered(status: Int, headers: [CurlHeader], body: [UInt8])
    /// The answer was larger than `maximumResponseBytes`.
    case tooLarge
    /// libcurl failed. `reachedTransfer`: it got past connecting (its
    /// pre-transfer timer ran) or counted request bytes; without either, no
    /// request byte was written. `detail`: libcurl's error buffer (no URL path, no body).
    case failed(code: CURLcode, reachedTransfer: Bool, detail: String)
}

/// Set when the task that sent a request is cancelled; libcurl's progress
/// callback then aborts the transfer (within about a second).
public final class CancellationFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    public init() {}
    public func cancel() { flag.store(true, ordering: .relaxed) }
    public var isCancelled: Bool { flag.load(ordering: .relaxed) }
}

/// libcurl's generic text for a code (static strings: no URL, no header, no body).
public func curlText(_ code: CURLcode) -> String { String(cString: curl_easy_strerror(code)) }

/// One libcurl easy handle and its cookie jar. Not Sendable: exactly one
/// owner uses it, one transfer at a time, and it is freed with the owner.
/// Kept across requests (`curl_easy_reset` keeps the connection cache and
/// the cookies), so that requests without `freshConnection` may reuse a connection.
public final class CurlSession {
    private let raw: UnsafeMutableRawPointer
    private let cookies: Bool

    /// nil when libcurl cannot be initialised or has no memory for a handle.
    /// `cookies`: the handle's in-memory cookie engine (`CURLOPT_COOKIEFILE ""`)
    /// keeps cookies across requests, never read from or written to a file.
    public init?(cookies: Bool = false) {
        guard curlGlobalInit == CURLE_OK, let handle = curl_easy_init() else { return nil }
        raw = handle
        self.cookies = cookies
    }

    deinit { curl_easy_cleanup(raw) }

    /// Runs one transfer on the calling thread. Follows no redirect (a 3xx is
    /// answered as it is), speaks only `http` and `https`, verifies TLS peers
    /// and host names (TLS 1.2 at least), sends no `Expect: 100-continue`.
    public func perform(_ request: CurlRequest, cancellation: CancellationFlag? = nil) -> CurlOutcome {
        curl_easy_reset(raw)
        let sink = TransferSink(limit: request.maximumResponseBytes, cancellation: cancellation)
        let headers = HeaderList()
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let code: CURLcode = withExtendedLifetime(sink) {
            errorBuffer.withUnsafeMutableBytes { errorBytes in
                guard configure(request, sink: sink, headers: headers),
                    bl_curl_setopt_pointer(raw, CURLOPT_ERRORBUFFER, errorBytes.baseAddress) == CURLE_OK
                else { return CURLE_BAD_FUNCTION_ARGUMENT }
                let code = curl_easy_perform(raw)
                // Nothing in the handle may point at this call's memory afterwards.
                for option in [CURLOPT_ERRORBUFFER, CURLOPT_WRITEDATA, CURLOPT_HEADERDATA, CURLOPT_XFERINFODATA] {
                    _ = bl_curl_setopt_pointer(raw, option, nil)
                }
                _ = bl_curl_setopt_slist(raw, CURLOPT_HTTPHEADER, nil)
                return code
            }
        }
        if code == CURLE_OK { return .answered(status: info(CURLINFO_RESPONSE_CODE), headers: sink.headers, body: sink.body) }
        if code == CURLE_FILESIZE_EXCEEDED || (code == CURLE_WRITE_ERROR && sink.tooLarge) { return .tooLarge }
        var started: curl_off_t = 0
        _ = bl_curl_getinfo_off(raw, CURLINFO_PRETRANSFER_TIME_T, &started)
        let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return .failed(code: code, reachedTransfer: started > 0 || info(CURLINFO_REQUEST_SIZE) > 0, detail: detail)
    }

    private func info(_ item: CURLINFO) -> Int {
        var value = 0
        return bl_curl_getinfo_long(raw, item, &value) == CURLE_OK ? value : 0
    }

    private func set(_ option: CURLoption, _ value: Int) -> Bool { bl_curl_setopt_long(raw, option, value) == CURLE_OK }
    /// libcurl copies string options (since 7.17), so `value` may go away after the call.
    private func set(_ option: CURLoption, _ value: String) -> Bool { bl_curl_setopt_string(raw, option, value) == CURLE_OK }

    private func configure(_ request: CurlRequest, sink: TransferSink, headers: HeaderList) -> Bool {
        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        var ok =
            set(CURLOPT_URL, request.url)
            && set(CURLOPT_PROTOCOLS_STR, "http,https")
            && set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
            && set(CURLOPT_FOLLOWLOCATION, 0)
            && set(CURLOPT_NOSIGNAL, 1)
            && set(CURLOPT_TIMEOUT_MS, request.timeoutMilliseconds)
            && set(CURLOPT_CONNECTTIMEOUT_MS, min(request.connectTimeoutMilliseconds, request.timeoutMilliseconds))
            && set(CURLOPT_SSL_VERIFYPEER, 1)
            && set(CURLOPT_SSL_VERIFYHOST, 2)
            && set(CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
            && bl_curl_setopt_writefn(raw, CURLOPT_WRITEFUNCTION, writeBodyCallback) == CURLE_OK
            && bl_curl_setopt_pointer(raw, CURLOPT_WRITEDATA, sinkPointer) == CURLE_OK
            && bl_curl_setopt_writefn(raw, CURLOPT_HEADERFUNCTION, writeHeaderCallback) == CURLE_OK
            && bl_curl_setopt_pointer(raw, CURLOPT_HEADERDATA, sinkPointer) == CURLE_OK
            && set(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
            && configureProxy(request)
        if let limit = request.maximumResponseBytes {
            ok = ok && bl_curl_setopt_off(raw, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limit)) == CURLE_OK
        }
        if sink.cancellation != nil {
            ok =
                ok && bl_curl_setopt_xferinfofn(raw, progressCallback) == CURLE_OK
                && bl_curl_setopt_pointer(raw, CURLOPT_XFERINFODATA, sinkPointer) == CURLE_OK
                && set(CURLOPT_NOPROGRESS, 0)
        }
        if let caFile = request.caFile { ok = ok && set(CURLOPT_CAINFO, caFile) }
        if request.freshConnection { ok = ok && set(CURLOPT_FRESH_CONNECT, 1) && set(CURLOPT_FORBID_REUSE, 1) }
        if cookies { ok = ok && set(CURLOPT_COOKIEFILE, "") }
        switch (request.method, request.body) {
        case ("GET", _): ok = ok && set(CURLOPT_HTTPGET, 1)
        case ("HEAD", _): ok = ok && set(CURLOPT_NOBODY, 1)
        case ("POST", _?): ok = ok && set(CURLOPT_POST, 1)
        default: ok = ok && set(CURLOPT_CUSTOMREQUEST, request.method)
        }
        if let body = request.body { ok = ok && setBody(body) }
        for (name, value) in request.headers {
            // libcurl's syntax: "Name;" sends an empty header, "Name:" would remove it.
            ok = ok && headers.append(value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        // No `Expect: 100-continue` round trip.
        for name in request.suppressedHeaders + ["Expect"] { ok = ok && headers.append(name + ":") }
        return ok && bl_curl_setopt_slist(raw, CURLOPT_HTTPHEADER, headers.raw) == CURLE_OK
    }

    /// A proxy, if any (an https server stays end-to-end TLS through CONNECT).
    /// `CURLOPT_NOPROXY` is never set, so the user's `no_proxy` keeps its
    /// meaning; loopback is kept off proxies by an empty `CURLOPT_PROXY`
    /// instead, which tells libcurl to use none whatever the environment says.
    private func configureProxy(_ request: CurlRequest) -> Bool {
        if CurlLoopback.contains(url: request.url) { return set(CURLOPT_PROXY, "") }
        switch request.proxy {
        case .environment: return true
        case .direct: return set(CURLOPT_PROXY, "")
        case .url(let proxy): return set(CURLOPT_PROXY, proxy)
        }
    }

    /// `CURLOPT_COPYPOSTFIELDS`: libcurl copies the body, so it need not outlive the call.
    private func setBody(_ body: [UInt8]) -> Bool {
        guard bl_curl_setopt_off(raw, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)) == CURLE_OK else { return false }
        if body.isEmpty { return set(CURLOPT_COPYPOSTFIELDS, "") }
        return body.withUnsafeBytes {
            bl_curl_setopt_pointer(raw, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress))
                == CURLE_OK
        }
    }
}

/// A `curl_slist` with one owner that frees it.
private final class HeaderList {
    private(set) var raw: UnsafeMutablePointer<curl_slist>? = nil

    /// False when libcurl could not allocate the entry.
    func append(_ line: String) -> Bool {
        guard let next = curl_slist_append(raw, line) else { return false }
        raw = next
        return true
    }

    deinit { curl_slist_free_all(raw) }
}

/// Collects one transfer's answer. Lives for the duration of one
/// `curl_easy_perform`; the callbacks reach it through the user-data pointer.
final class TransferSink {
    let limit: Int?
    let cancellation: CancellationFlag?
    var body: [UInt8] = []
    var headers: [CurlHeader] = []
    var tooLarge = false

    init(limit: Int?, cancellation: CancellationFlag?) {
        self.limit = limit
        self.cancellation = cancellation
    }

    func receiveBody(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        if let limit, body.count + bytes.count > limit {
            tooLarge = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    /// One header line as libcurl hands it over (CRLF included). A status
    /// line starts a new response (after a `100 Continue` or a proxy's
    /// CONNECT answer), so only the final response's headers are kept.
    ///
    /// A line that starts with a space or a tab is an obsolete line folding
    /// (`obs-fold`, RFC 9112 §5.2): a user agent replaces it with one space
    /// and keeps the text as part of the previous header's value.
    func receiveHeaderLine(_ bytes: UnsafeBufferPointer<UInt8>) {
        var end = bytes.count
        while end > 0, bytes[end - 1] == 10 || bytes[end - 1] == 13 { end -= 1 }
        let line = String(decoding: UnsafeBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            headers.removeAll()
            return
        }
        if line.isEmpty { return }
        if line.first == " " || line.first == "\t" {
            let more = line.trimmingSpaces()
            if !headers.isEmpty, !more.isEmpty {
                let last = headers.count - 1
                headers[last].value = headers[last].value.isEmpty ? more : headers[last].value + " " + more
            }
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        headers.append(CurlHeader(String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces()))
    }
}

extension String {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace, RFC 9110 §5.6.3).
    public func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}

/// The sink behind a callback's user-data pointer.
private func transferSink(_ user: UnsafeMutableRawPointer?) -> TransferSink? {
    user.map { Unmanaged<TransferSink>.fromOpaque($0).takeUnretainedValue() }
}

private func bytes(_ data: UnsafeMutablePointer<CChar>, _ count: Int) -> UnsafeBufferPointer<UInt8> {
    UnsafeBufferPointer(start: UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: count)
}

private let writeBodyCallback: bl_curl_write_callback = { data, size, count, user in
    let total = size * count
    guard let sink = transferSink(user), total > 0, let data else { return 0 }
    return sink.receiveBody(bytes(data, total)) ? total : 0
}

private let writeHeaderCallback: bl_curl_write_callback = { data, size, count, user in
    guard let sink = transferSink(user) else { return 0 }
    if let data { sink.receiveHeaderLine(bytes(data, size * count)) }
    return size * count
}

private let progressCallback: bl_curl_xferinfo_callback = { user, _, _, _, _ in
    transferSink(user)?.cancellation?.isCancelled == true ? 1 : 0
}
