import CurlSupport
import Foundation

/// An HTTP answer: status, headers (names lower case, in order) and body.
public struct HTTPAnswer: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// The first header named `name` (case-insensitive).
    public func header(_ name: String) -> String? { headers(name).first }

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
    public var errorCode: String? { errorBody?.code }

    /// The `error` object of a protocol error body (docs/protocol.md).
    var errorBody: (code: String, message: String?)? {
        struct Body: Decodable {
            struct Detail: Decodable {
                var code: String
                var message: String?
            }
            var error: Detail
        }
        return (try? JSONDecoder().decode(Body.self, from: Data(body))).map { ($0.error.code, $0.error.message) }
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

extension CurlSession {
    /// A session for the scripted browser: with `cookies`, a browser profile's cookie jar in memory.
    static func make(cookies: Bool) throws(ScriptedBrowserError) -> CurlSession {
        guard let session = CurlSession(cookies: cookies) else { throw .transport("curl_easy_init failed") }
        return session
    }

    /// One request (redirects never followed); answer header names in lower case.
    func answer(method: String, url: String, headers: [(String, String)], body: [UInt8]?, caFile: String?)
        throws(ScriptedBrowserError) -> HTTPAnswer
    {
        let headers = headers.map { (name: $0.0, value: $0.1) }
        switch perform(CurlRequest(method: method, url: url, headers: headers, body: body, caFile: caFile)) {
        case .answered(let status, let headers, let body):
            return HTTPAnswer(status: status, headers: headers.map { ($0.name.lowercased(), $0.value) }, body: body)
        case .tooLarge: throw .transport("the answer is too large")
        // libcurl's own words say which step failed and why (the errno):
        // "Failed to connect to 127.0.0.1 port 8080 after 3 ms: Connection refused".
        case .failed(let code, _, let detail): throw .transport(detail.isEmpty ? curlText(code) : "\(curlText(code)) (\(detail))")
        }
    }
}

/// One-shot HTTP requests with exactly the headers given: no cookie engine,
/// no redirects. For tests that must send what a browser or a native host
/// would (or would not) send.
public enum RawHTTP {
    public static func send(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, caFile: String? = nil
    ) throws(ScriptedBrowserError) -> HTTPAnswer {
        try CurlSession.make(cookies: false).answer(method: method, url: url, headers: headers, body: body, caFile: caFile)
    }

    /// POSTs `json` with `Content-Type: application/json`.
    public static func postJSON(
        _ url: String, _ json: String, headers: [(String, String)] = [], caFile: String? = nil
    ) throws(ScriptedBrowserError) -> HTTPAnswer {
        try send(
            "POST", url, headers: [("Content-Type", "application/json")] + headers, body: Array(json.utf8), caFile: caFile)
    }
}
