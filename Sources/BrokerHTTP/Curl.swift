import BrokerCore
import BrowserLoginProtocol
import CCurl
import Synchronization

// Every call into libcurl goes through this file.

/// `curl_global_init` exactly once per process, before the first handle.
private let curlGlobalInit: CURLcode = bl_curl_global_init_all()

/// One libcurl easy handle. Exactly one owner: the `Worker` that made it,
/// which uses it only on its own serial queue and frees it in `deinit`.
/// Kept across requests (`curl_easy_reset` keeps the connection cache) so
/// that safe requests can reuse a connection.
final class EasyHandle {
    let raw: OpaquePointer

    init?() {
        guard curlGlobalInit == CURLE_OK, let handle = curl_easy_init() else { return nil }
        raw = OpaquePointer(handle)
    }

    deinit { curl_easy_cleanup(UnsafeMutableRawPointer(raw)) }

    private var pointer: UnsafeMutableRawPointer { UnsafeMutableRawPointer(raw) }

    func reset() { curl_easy_reset(pointer) }

    func set(_ option: CURLoption, _ value: Int) -> Bool {
        bl_curl_setopt_long(pointer, option, value) == CURLE_OK
    }
    /// libcurl copies string options (since 7.17), so `value` may go away after the call.
    func set(_ option: CURLoption, _ value: String) -> Bool {
        bl_curl_setopt_string(pointer, option, value) == CURLE_OK
    }
    func set(_ option: CURLoption, pointer value: UnsafeMutableRawPointer?) -> Bool {
        bl_curl_setopt_pointer(pointer, option, value) == CURLE_OK
    }
    func set(_ option: CURLoption, list: OpaquePointer?) -> Bool {
        bl_curl_setopt_slist(pointer, option, UnsafeMutablePointer(list)) == CURLE_OK
    }
    func set(_ option: CURLoption, offset value: Int64) -> Bool {
        bl_curl_setopt_off(pointer, option, curl_off_t(value)) == CURLE_OK
    }
    func setProgress(_ callback: bl_curl_xferinfo_callback) -> Bool {
        bl_curl_setopt_xferinfofn(pointer, callback) == CURLE_OK
    }
    func set(_ option: CURLoption, callback: bl_curl_write_callback) -> Bool {
        bl_curl_setopt_writefn(pointer, option, callback) == CURLE_OK
    }
    /// `CURLOPT_COPYPOSTFIELDS`: libcurl copies the body, so it need not outlive the call.
    func setBody(_ body: [UInt8]) -> Bool {
        guard set(CURLOPT_POSTFIELDSIZE_LARGE, offset: Int64(body.count)) else { return false }
        if body.isEmpty { return set(CURLOPT_COPYPOSTFIELDS, "") }
        return body.withUnsafeBytes { raw in
            bl_curl_setopt_pointer(pointer, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: raw.baseAddress))
                == CURLE_OK
        }
    }

    func perform() -> CURLcode { curl_easy_perform(pointer) }

    func info(_ item: CURLINFO) -> Int {
        var value = 0
        return bl_curl_getinfo_long(pointer, item, &value) == CURLE_OK ? value : 0
    }
    func info(offset item: CURLINFO) -> Int64 {
        var value: curl_off_t = 0
        return bl_curl_getinfo_off(pointer, item, &value) == CURLE_OK ? Int64(value) : 0
    }
}

/// A `curl_slist` with one owner that frees it.
final class HeaderList {
    private(set) var raw: OpaquePointer? = nil

    /// False when libcurl could not allocate the entry.
    func append(_ line: String) -> Bool {
        guard let next = curl_slist_append(UnsafeMutablePointer(raw), line) else { return false }
        raw = OpaquePointer(next)
        return true
    }

    deinit { curl_slist_free_all(UnsafeMutablePointer(raw)) }
}

/// Collects one transfer's answer. Lives on the worker's queue for the
/// duration of one `curl_easy_perform`; the callbacks reach it through the
/// user-data pointer.
final class TransferSink {
    let limit: Int
    let cancellation: CancellationFlag
    var body: [UInt8] = []
    var headers: [HTTPHeader] = []
    var tooLarge = false

    init(limit: Int, cancellation: CancellationFlag) {
        self.limit = limit
        self.cancellation = cancellation
    }

    func receiveBody(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        if body.count + bytes.count > limit {
            tooLarge = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    /// One header line as libcurl hands it over (CRLF included). A status
    /// line starts a new response (after a `100 Continue` or a proxy's
    /// CONNECT answer), so only the final response's headers are kept.
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
            // An obsolete folded continuation of the previous header.
            if !headers.isEmpty {
                headers[headers.count - 1].value += " " + line.trimmingSpaces()
            }
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = String(line[..<colon])
        let value = String(line[line.index(after: colon)...]).trimmingSpaces()
        headers.append(HTTPHeader(name, value))
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}

let writeBodyCallback: bl_curl_write_callback = { data, size, count, user in
    guard let user else { return 0 }
    let sink = Unmanaged<TransferSink>.fromOpaque(user).takeUnretainedValue()
    let total = size * count
    guard total > 0, let data else { return 0 }
    let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: total)
    return sink.receiveBody(bytes) ? total : 0
}

let writeHeaderCallback: bl_curl_write_callback = { data, size, count, user in
    guard let user else { return 0 }
    let sink = Unmanaged<TransferSink>.fromOpaque(user).takeUnretainedValue()
    let total = size * count
    guard let data else { return total }
    sink.receiveHeaderLine(
        UnsafeBufferPointer(start: UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: total))
    return total
}

/// Set when the task that sent a request is cancelled; libcurl's progress
/// callback then aborts the transfer (within about a second).
final class CancellationFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func cancel() { flag.store(true, ordering: .relaxed) }
    var isCancelled: Bool { flag.load(ordering: .relaxed) }
}

let progressCallback: bl_curl_xferinfo_callback = { user, _, _, _, _ in
    guard let user else { return 0 }
    return Unmanaged<TransferSink>.fromOpaque(user).takeUnretainedValue().cancellation.isCancelled ? 1 : 0
}

/// libcurl's generic text for a code (static strings: no URL, no header, no body).
func curlText(_ code: CURLcode) -> String {
    String(cString: curl_easy_strerror(code))
}
