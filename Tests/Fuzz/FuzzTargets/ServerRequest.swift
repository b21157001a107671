import BrowserLoginProtocol
import Foundation
import LoginServer
import Synchronization

/// The reference server's request handling, through `LoginRequestHandler`
/// (routing, the common rules, every route's body decoding, cookie, header,
/// query and path use), with no socket: libmicrohttpd's own parsing is C and
/// out of scope; what it hands over is built from the input.
///
/// An input is an HTTP/1.1-like text: `METHOD TARGET` on the first line,
/// `Name: value` header lines, an empty line, then the body. Cookies come
/// from `Cookie` headers, the query from the target (both split as
/// libmicrohttpd does). Placeholders reach a live fixture, so that the fuzzer
/// gets past "no such attempt": `@A` a pending attempt opened in this browser,
/// `@K` its recovery key, `@V` its code verifier, `@C` its binding cookie
/// (`name=value`), `@S` a browser session cookie value, `@B` a completed
/// attempt, `@Q` its recovery key, `@T`/`@R` the session's access/refresh token.
public enum ServerRequestFuzzing {
    static let origin = "http://127.0.0.1:8080"
    /// Inputs before the server (and its in-memory database) is made afresh.
    static let recycleEvery = 20_000

    private static let state = Mutex<(fixture: Fixture?, runs: Int)>((nil, 0))

    static func run(_ bytes: [UInt8]) {
        let fixture = state.withLock { state -> Fixture in
            state.runs += 1
            if state.fixture == nil || state.runs % recycleEvery == 0 { state.fixture = Fixture.make() }
            return state.fixture!
        }
        _ = fixture.handler.handle(request(bytes, fixture.placeholders))
    }

    /// The request an input describes.
    static func request(_ bytes: [UInt8], _ placeholders: [(String, String)]) -> HTTPServerRequest {
        let split = bytes.firstRange(of: Array("\n\n".utf8)) ?? bytes.endIndex..<bytes.endIndex
        var head = String(decoding: bytes[..<split.lowerBound], as: UTF8.self).replacingOccurrences(of: "\0", with: "")
        var body = Array(bytes[split.upperBound...])
        for (key, value) in placeholders {
            head = head.replacingOccurrences(of: key, with: value)
            body = replacing(Array(key.utf8), with: Array(value.utf8), in: body)
        }
        var lines = head.split(separator: "\n", omittingEmptySubsequences: false).map {
            $0.hasSuffix("\r") ? $0.dropLast() : $0
        }
        let requestLine = lines.isEmpty ? "" : lines.removeFirst()
        let words = requestLine.split(separator: " ", maxSplits: 2)
        let method = words.first.map(String.init) ?? "GET"
        let target = words.count > 1 ? String(words[1]) : "/"
        let (rawPath, rawQuery) =
            target.firstIndex(of: "?").map { (target[..<$0], target[target.index(after: $0)...]) }
            ?? (target[...], "")
        var headers: [(name: String, value: String)] = []
        var cookies: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers.append((name, value))
            guard name.lowercased() == "cookie" else { continue }
            for pair in value.split(separator: ";") {
                let (cookie, cookieValue) = splitPair(pair.trimmingCharacters(in: .whitespaces)[...])
                if !cookie.isEmpty, cookies[cookie] == nil { cookies[cookie] = cookieValue }
            }
        }
        var query: [String: String] = [:]
        for pair in rawQuery.split(separator: "&") {
            let (name, value) = splitPair(pair)
            if query[decode(name, plus: true)] == nil { query[decode(name, plus: true)] = decode(value, plus: true) }
        }
        return HTTPServerRequest(
            method: method, path: decode(String(rawPath), plus: false), query: query, headers: headers, cookies: cookies,
            body: body.count > LoginRequestHandler.maximumBody ? [] : body,
            bodyTooLarge: body.count > LoginRequestHandler.maximumBody)
    }

    /// Replaces byte for byte (the body's other bytes stay as they are, valid UTF-8 or not).
    private static func replacing(_ key: [UInt8], with value: [UInt8], in bytes: [UInt8]) -> [UInt8] {
        guard bytes.firstRange(of: key) != nil else { return bytes }
        var out: [UInt8] = []
        var rest = bytes[...]
        while let range = rest.firstRange(of: key) {
            out += rest[..<range.lowerBound] + value
            rest = rest[range.upperBound...]
        }
        return out + rest
    }

    private static func splitPair(_ text: Substring) -> (String, String) {
        guard let eq = text.firstIndex(of: "=") else { return (String(text), "") }
        return (String(text[..<eq]), String(text[text.index(after: eq)...]))
    }

    /// Percent-decoding as libmicrohttpd does it: a malformed escape stays as
    /// written; `+` is a space in query arguments; a decoded NUL ends the text.
    static func decode(_ text: String, plus: Bool) -> String {
        var out: [UInt8] = []
        let bytes = Array(text.utf8)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count, let hi = hexValue(bytes[i + 1]),
                let lo = hexValue(bytes[i + 2])
            {
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(plus && bytes[i] == UInt8(ascii: "+") ? UInt8(ascii: " ") : bytes[i])
                i += 1
            }
        }
        return String(decoding: out.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// A server with one pending attempt, one completed attempt and a browser session.
    struct Fixture: Sendable {
        let handler: LoginRequestHandler
        let placeholders: [(String, String)]

        static func make() -> Fixture {
            var configuration = ServerConfiguration()
            configuration.port = 0
            configuration.databasePath = ":memory:"
            configuration.testAccounts = ["dev@example.com"]
            configuration.clients = [
                ClientRegistration(
                    clientId: "com.example.notes", appName: "Notes",
                    returnUrls: [try! ReturnURL("com.example.notes:/callback")], policy: .confirm),
                ClientRegistration(
                    clientId: "web.example", appName: "Web", returnUrls: [try! ReturnURL("https://app.example.com/cb")],
                    policy: .automatic),
            ]
            // Limits that never run out, so the fuzzer always reaches the routes.
            configuration.rateLimits.create = RateLimit(burst: 1 << 40, perMinute: 1 << 40)
            configuration.rateLimits.exchange = RateLimit(burst: 1 << 40, perMinute: 1 << 40)
            configuration.rateLimits.codeEntry = RateLimit(burst: 1 << 40, perMinute: 1 << 40)
            Log.configure(level: .error) { _ in }
            // A fixed clock: the fixture's attempts and session never expire.
            let now = Timestamp.now().millisecondsSince1970
            let handler = try! LoginRequestHandler(
                configuration: configuration, issuer: origin, clock: { now }, mailer: DiscardMail())

            func send(_ method: String, _ path: String, _ body: String? = nil, _ headers: [(String, String)] = [])
                -> HTTPServerResponse
            {
                var all = headers.map { (name: $0.0, value: $0.1) }
                if body != nil { all.append((name: "Content-Type", value: "application/json")) }
                let query = path.split(separator: "?").dropFirst().first.map { splitPair($0) }
                return handler.handle(
                    HTTPServerRequest(
                        method: method, path: String(path.split(separator: "?")[0]),
                        query: query.map { [$0.0: $0.1] } ?? [:], headers: all,
                        cookies: Dictionary(
                            headers.filter { $0.0 == "Cookie" }.map { splitPair($0.1[...]) }, uniquingKeysWith: { a, _ in a }),
                        body: Array((body ?? "").utf8)))
            }
            func json(_ response: HTTPServerResponse) -> [String: Any] {
                (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
            }
            let base = configuration.basePath
            func create() -> (id: String, verifier: ProofSecret, recovery: ProofSecret) {
                let verifier = try! ProofSecret.generate()
                let recovery = try! ProofSecret.generate()
                let body = try! JSONEncoder().encode(
                    CreateAttemptRequest(
                        clientId: "com.example.notes", returnUrl: "com.example.notes:/callback",
                        codeChallenge: verifier.challenge, recoveryChallenge: recovery.challenge))
                let answer = json(send("POST", base + "/native/attempts", String(decoding: body, as: UTF8.self)))
                return (answer["attemptId"] as! String, verifier, recovery)
            }
            func bind(_ id: String) -> String {
                let page = send("GET", base + "/browser/login?attempt=" + id)
                let cookie = page.headers.first { $0.name == "Set-Cookie" }!.value
                return String(cookie.split(separator: ";")[0])
            }
            let browser = [("Origin", origin), ("Sec-Fetch-Site", "same-origin")]
            let signIn = send(
                "POST", base + "/browser/signin/verify", #"{"email":"dev+bltest@example.com","code":"000000"}"#, browser)
            let sessionCookie = String(signIn.headers.first { $0.name == "Set-Cookie" }!.value.split(separator: ";")[0])
            let sessionId = json(signIn)["sessionId"] as! String

            let pending = create()
            let pendingCookie = bind(pending.id)
            let done = create()
            let doneCookie = bind(done.id)
            let authorized = json(
                send(
                    "POST", base + "/browser/attempts/\(done.id)/authorize",
                    #"{"decision":"continue","expectedSessionId":"\#(sessionId)"}"#,
                    browser + [("Cookie", sessionCookie), ("Cookie", doneCookie)]))
            let callback = try! Callback(parsing: authorized["callbackUrl"] as! String)
            guard case .code(let code) = callback.outcome else { fatalError("no code in the fixture's callback") }
            let issued = try! JSONDecoder().decode(
                ExchangeResponse.self,
                from: Data(
                    send(
                        "POST", base + "/native/attempts/\(done.id)/exchange",
                        #"{"code":"\#(code)","codeVerifier":"\#(done.verifier.value)"}"#
                    ).body))
            return Fixture(
                handler: handler,
                placeholders: [
                    ("@A", pending.id), ("@K", pending.recovery.value), ("@V", pending.verifier.value),
                    ("@C", pendingCookie), ("@S", String(sessionCookie.split(separator: "=", maxSplits: 1)[1])),
                    ("@B", done.id), ("@Q", done.recovery.value), ("@T", issued.session.accessToken),
                    ("@R", issued.session.refreshToken ?? ""),
                ])
        }
    }

    struct DiscardMail: MailSender {
        func send(_ message: MailMessage) throws {}
    }
}
