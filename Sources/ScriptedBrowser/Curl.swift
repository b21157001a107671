import CCurl
import Foundation

/// An HTTP answer: status, headers (names lower case, in order) and body.
public struct HTTPAnswer: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// The first header named `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name == lower }?.value
    }

    /// All headers named `name` (e.g. every `Set-Cookie`).
    public func headers(_ name: String) -> [String] {
        let lower = name.lowercased()
        return headers.filter { $0.name == lower }.map(\.value)
    }

    public var text: String { String(decoding: body, as: UTF8.self) }

    /// Decodes the body as JSON.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        do { return try JSONDecoder().decode(T.self, from: Data(body)) } catch {
            throw ScriptedBrowserError.malformedAnswer(status: status, detail: "\(type) expected")
        }
    }

    /// The protocol error code of an error body, if it is one.
    public var errorCode: String? {
        struct Body: Decodable {
            struct Detail: Decodable { var code: String }
            var error: Detail
        }
        return (try? JSONDecoder().decode(Body.self, from: Data(body)))?.error.code
    }
}

/// Why a scripted browser step failed.
public enum ScriptedBrowserError: Error, Sendable, CustomStringConvertible {
    /// libcurl could not complete the request.
    case transport(String)
    /// The server answered an error (`code` from its error body, when there is one).
    case refused(status: Int, code: String?, message: String)
    /// The answer was not what the protocol promises.
    case malformedAnswer(status: Int, detail: String)

    public var description: String {
        switch self {
        case .transport(let detail): "transport error: \(detail)"
        case .refused(let status, let code, let message): "HTTP \(status) \(code ?? "-"): \(message)"
        case .malformedAnswer(let status, let detail): "malformed answer (HTTP \(status)): \(detail)"
        }
    }

    /// The protocol error code, for `.refused`.
    public var code: String? {
        if case .refused(_, let code, _) = self { return code }
        return nil
    }
}

/// Collects one answer's header lines and body from libcurl's callbacks.
private final class AnswerCollector {
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
}

private let collectBody: bl_curl_write_callback = { data, size, count, user in
    guard let data, let user else { return 0 }
    let collector = Unmanaged<AnswerCollector>.fromOpaque(user).takeUnretainedValue()
    let length = size * count
    data.withMemoryRebound(to: UInt8.self, capacity: length) {
        collector.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}

private let collectHeader: bl_curl_write_callback = { data, size, count, user in
    guard let data, let user else { return 0 }
    let collector = Unmanaged<AnswerCollector>.fromOpaque(user).takeUnretainedValue()
    let length = size * count
    let line = data.withMemoryRebound(to: UInt8.self, capacity: length) {
        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
    }.trimmingCharacters(in: .whitespacesAndNewlines)
    if line.hasPrefix("HTTP/") {
        collector.headers = []  // a new status line (e.g. after 100 Continue) starts over
    } else if let colon = line.firstIndex(of: ":") {
        collector.headers.append(
            (line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
    }
    return length
}

/// One libcurl easy handle. Not Sendable: its owner serialises its use.
/// With `cookies` on, the handle's in-memory cookie engine
/// (`CURLOPT_COOKIEFILE ""`) keeps cookies across requests, like a browser
/// profile; it never reads or writes a cookie file. Redirects are never followed.
final class CurlHandle {
    private static let globalInit: Bool = curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK

    private let handle: UnsafeMutableRawPointer
    private let cookies: Bool
    private let caFile: String?

    init(cookies: Bool, caFile: String?) throws(ScriptedBrowserError) {
        guard Self.globalInit, let handle = curl_easy_init() else { throw .transport("curl_easy_init failed") }
        self.handle = handle
        self.cookies = cookies
        self.caFile = caFile
    }

    deinit { curl_easy_cleanup(handle) }

    func perform(method: String, url: String, headers: [(String, String)], body: [UInt8]?) throws(ScriptedBrowserError)
        -> HTTPAnswer
    {
        curl_easy_reset(handle)
        _ = bl_curl_setopt_string(handle, CURLOPT_URL, url)
        _ = bl_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = bl_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = bl_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = bl_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, 60_000)
        _ = bl_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, 10_000)
        if cookies { _ = bl_curl_setopt_string(handle, CURLOPT_COOKIEFILE, "") }
        if let caFile { _ = bl_curl_setopt_string(handle, CURLOPT_CAINFO, caFile) }
        if method == "GET" {
            _ = bl_curl_setopt_long(handle, CURLOPT_HTTPGET, 1)
        } else {
            _ = bl_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method)
        }
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for (name, value) in headers { list = curl_slist_append(list, "\(name): \(value)") }
        list = curl_slist_append(list, "Expect:")
        defer { curl_slist_free_all(list) }
        _ = bl_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, list)

        let collector = AnswerCollector()
        let user = Unmanaged.passUnretained(collector).toOpaque()
        _ = bl_curl_setopt_writefn(handle, CURLOPT_WRITEFUNCTION, collectBody)
        _ = bl_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, user)
        _ = bl_curl_setopt_writefn(handle, CURLOPT_HEADERFUNCTION, collectHeader)
        _ = bl_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, user)

        // A trailing NUL keeps the pointer valid for an empty body too.
        var payload = (body ?? []) + [0]
        let rc: CURLcode = withExtendedLifetime(collector) {
            payload.withUnsafeMutableBytes { raw in
                if let body {
                    _ = bl_curl_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
                    _ = bl_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, raw.baseAddress)
                }
                return curl_easy_perform(handle)
            }
        }
        guard rc == CURLE_OK else { throw .transport(String(cString: curl_easy_strerror(rc))) }
        var status = 0
        _ = bl_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return HTTPAnswer(status: status, headers: collector.headers, body: collector.body)
    }
}

/// One-shot HTTP requests with exactly the headers given: no cookie engine,
/// no redirects. For tests that must send what a browser or a native host
/// would (or would not) send.
public enum RawHTTP {
    public static func send(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, caFile: String? = nil
    ) throws(ScriptedBrowserError) -> HTTPAnswer {
        try CurlHandle(cookies: false, caFile: caFile).perform(method: method, url: url, headers: headers, body: body)
    }

    /// POSTs `json` with `Content-Type: application/json`.
    public static func postJSON(
        _ url: String, _ json: String, headers: [(String, String)] = [], caFile: String? = nil
    ) throws(ScriptedBrowserError) -> HTTPAnswer {
        try send(
            "POST", url, headers: [("Content-Type", "application/json")] + headers, body: Array(json.utf8), caFile: caFile)
    }
}
