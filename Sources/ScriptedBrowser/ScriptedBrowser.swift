import BrowserLoginProtocol
import CurlSupport
import Foundation
import Synchronization

/// The browser session a scripted browser is signed in with, as the
/// reference server's `GET {base}/browser/session` reports it.
public struct BrowserSessionInfo: Codable, Sendable, Equatable {
    /// The public id (`expectedSessionId`), never the cookie secret.
    public var sessionId: String
    public var account: Account
    public var authMethod: String
    public var expiresAt: Timestamp
    /// On a finished sign-in only: whether it created the user (absent from `GET browser/session`).
    public var isNewUser: Bool?
}

/// A user agent that plays a real browser on the reference server's hosted
/// page (docs/protocol.md §6): it keeps cookies in memory (libcurl's cookie
/// engine, one profile per instance), loads the authorize URL (which sets
/// the attempt's binding cookie), signs in through the same JSON routes the
/// page's script uses, describes the attempt, reads the browser session's
/// public id and authorizes with `Origin` and `Sec-Fetch-Site: same-origin`
/// as a browser's `fetch` would. It never follows redirects and never opens
/// the callback URL: it returns it, for the caller to deliver.
///
/// Thread-safe: calls are serialised on the instance.
public final class ScriptedBrowser: Sendable {
    /// The server origin (the issuer), sent as `Origin` on state-changing requests.
    public let serverOrigin: String
    /// The base path of the browser routes, e.g. `/browser-login`.
    public let basePath: String
    private let caFile: String?
    private let session: Mutex<CurlSession>

    /// - Parameters:
    ///   - serverOrigin: e.g. `http://127.0.0.1:43123` (no trailing slash).
    ///   - basePath: the server's base path (the high-level calls take it from the authorize URL instead).
    ///   - caFile: a PEM file of CAs to trust for https, e.g. a test CA.
    public init(serverOrigin: String, basePath: String = "/browser-login", caFile: String? = nil) throws {
        self.serverOrigin = serverOrigin
        self.basePath = basePath
        self.caFile = caFile
        session = Mutex(try CurlSession.make(cookies: true))
    }

    // MARK: The whole flow

    /// Loads `authorizeURL`, signs in with `email` and `code` (a test
    /// account's `000000`, or the emailed code) unless already signed in
    /// (always, for an attempt created with `prompt: "login"`), and approves: `continue` on a confirm attempt (as the user pressing
    /// Continue), `automatic` on an automatic one. Answers the callback URL.
    public func signInAndAuthorize(authorizeURL: String, email: String, code: String) throws -> String {
        try signInAndAuthorize(authorizeURL: authorizeURL, email: email, code: { code })
    }

    /// As above, asking `code` for the code after the sign-in email was
    /// requested (e.g. read it from the server's outbox).
    /// With `acceptingLoginHint`, an attempt that has a `loginHint` is signed
    /// in with that address instead of `email`, as a user who keeps the
    /// address the page filled in.
    public func signInAndAuthorize(
        authorizeURL: String, email: String, acceptingLoginHint: Bool = false, code: () throws -> String
    ) throws -> String {
        let target = try AuthorizeTarget(authorizeURL)
        try loadPage(authorizeURL)
        let attempt = try describe(attemptId: target.attemptId, basePath: target.basePath)
        let email = acceptingLoginHint ? attempt.loginHint ?? email : email
        var session = try currentSession(basePath: target.basePath)
        // `prompt: "login"` (PROTOCOL.md §5.1): as the page, a fresh sign-in replaces the browser's session.
        if session == nil || attempt.prompt == "login" {
            try startSignIn(email: email, basePath: target.basePath)
            session = try verifySignIn(email: email, code: try code(), basePath: target.basePath)
        }
        guard let session else { throw ScriptedBrowserError.malformedAnswer(status: 200, detail: "no session") }
        return try authorize(
            attemptId: target.attemptId, decision: attempt.policy == .automatic ? .automatic : .continue,
            expectedSessionId: session.sessionId, basePath: target.basePath)
    }

    /// Loads `authorizeURL` and presses Cancel: answers the
    /// `error=access_denied` callback URL (the server cancels the attempt).
    public func decline(authorizeURL: String) throws -> String {
        let target = try AuthorizeTarget(authorizeURL)
        try loadPage(authorizeURL)
        return try decline(attemptId: target.attemptId, basePath: target.basePath)
    }

    // MARK: Steps

    /// `GET` the hosted page (sets the binding cookie on the attempt's first load). Answers the HTML.
    @discardableResult
    public func loadPage(_ authorizeURL: String) throws -> String { try ok("GET", authorizeURL, stateChanging: false).text }

    /// `GET {base}/browser/attempts/{id}`.
    public func describe(attemptId: String, basePath: String? = nil) throws -> DescribeResponse {
        try ok("GET", url(basePath, "/browser/attempts/" + attemptId), stateChanging: false).decode(DescribeResponse.self)
    }

    /// `GET {base}/browser/session`: nil when not signed in (401 LOGIN_REQUIRED).
    public func currentSession(basePath: String? = nil) throws -> BrowserSessionInfo? {
        let answer = try send("GET", url(basePath, "/browser/session"), body: nil, stateChanging: false)
        if answer.status == 401 && answer.errorCode == "LOGIN_REQUIRED" { return nil }
        guard answer.status == 200 else { throw refused(answer) }
        return try answer.decode(BrowserSessionInfo.self)
    }

    /// `POST {base}/browser/signin/start {"email"}`: the server emails a code.
    public func startSignIn(email: String, basePath: String? = nil) throws {
        try ok("POST", url(basePath, "/browser/signin/start"), json: ["email": email])
    }

    /// `POST {base}/browser/signin/verify {"email","code"}`: sets the session cookie.
    @discardableResult
    public func verifySignIn(email: String, code: String, basePath: String? = nil) throws -> BrowserSessionInfo {
        try ok("POST", url(basePath, "/browser/signin/verify"), json: ["email": email, "code": code])
            .decode(BrowserSessionInfo.self)
    }

    /// `POST {base}/browser/signin/verify {"email","code","invite"}`: signs up with an invitation token.
    @discardableResult
    public func verifySignIn(email: String, code: String, invite: String, basePath: String? = nil) throws
        -> BrowserSessionInfo
    {
        try ok("POST", url(basePath, "/browser/signin/verify"), json: ["email": email, "code": code, "invite": invite])
            .decode(BrowserSessionInfo.self)
    }

    /// `POST {base}/browser/attempts/{id}/authorize`: answers the callback URL.
    public func authorize(
        attemptId: String, decision: AuthorizeDecision, expectedSessionId: String, basePath: String? = nil
    ) throws -> String {
        let body = try JSONEncoder().encode(AuthorizeRequest(decision: decision, expectedSessionId: expectedSessionId))
        return try ok("POST", url(basePath, "/browser/attempts/" + attemptId + "/authorize"), body: [UInt8](body))
            .decode(AuthorizeResponse.self).callbackUrl
    }

    /// `POST {base}/browser/attempts/{id}/decline`: answers the access_denied callback URL.
    public func decline(attemptId: String, basePath: String? = nil) throws -> String {
        try ok("POST", url(basePath, "/browser/attempts/" + attemptId + "/decline"), json: [:])
            .decode(AuthorizeResponse.self).callbackUrl
    }

    /// `POST {base}/browser/signout`: ends the browser session (and the native sessions issued from it).
    public func signOut(basePath: String? = nil) throws { try ok("POST", url(basePath, "/browser/signout"), json: [:]) }

    /// Any request with this browser's cookies. `stateChanging` adds
    /// `Origin` and `Sec-Fetch-Site: same-origin`, as a page's `fetch` does.
    public func request(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        stateChanging: Bool = true
    ) throws -> HTTPAnswer {
        let all = headers + (stateChanging ? [("Origin", serverOrigin), ("Sec-Fetch-Site", "same-origin")] : [])
        return try session.withLock { session throws(ScriptedBrowserError) in
            try session.answer(method: method, url: url, headers: all, body: body, caFile: caFile)
        }
    }

    // MARK: Internals

    private func url(_ basePath: String?, _ path: String) -> String { serverOrigin + (basePath ?? self.basePath) + path }

    /// Sends `json` (or `body`) and answers the answer when it is a 200, else throws `refused`.
    @discardableResult
    private func ok(
        _ method: String, _ url: String, json: [String: String]? = nil, body: [UInt8]? = nil, stateChanging: Bool = true
    ) throws -> HTTPAnswer {
        let body = try json.map { [UInt8](try JSONSerialization.data(withJSONObject: $0)) } ?? body
        let answer = try send(method, url, body: body, stateChanging: stateChanging)
        guard answer.status == 200 else { throw refused(answer) }
        return answer
    }

    private func send(_ method: String, _ url: String, body: [UInt8]?, stateChanging: Bool = true) throws -> HTTPAnswer {
        var headers: [(String, String)] = [("Accept", "application/json, text/html")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        return try request(method, url, headers: headers, body: body, stateChanging: stateChanging)
    }

    private func refused(_ answer: HTTPAnswer) -> ScriptedBrowserError {
        let detail = answer.errorBody.flatMap { body in body.message.map { (code: body.code, message: $0) } }
        return .refused(status: answer.status, code: detail?.code, message: detail?.message ?? "")
    }
}

/// The attempt id and base path of a reference-server authorize URL
/// (`{origin}{basePath}/browser/login?attempt=<id>`).
struct AuthorizeTarget {
    var attemptId: String
    var basePath: String

    init(_ authorizeURL: String) throws {
        guard let parts = URLParts(splitting: authorizeURL), let query = parts.query,
            parts.path.hasSuffix("/browser/login")
        else { throw ScriptedBrowserError.malformedAnswer(status: 0, detail: "not an authorize URL of the reference server") }
        basePath = String(parts.path.dropLast("/browser/login".count))
        let pairs = query.split(separator: "&").map { $0.split(separator: "=", maxSplits: 1) }
        guard let pair = pairs.first(where: { $0.first == "attempt" && $0.count == 2 }),
            let id = percentDecode(pair[1])
        else { throw ScriptedBrowserError.malformedAnswer(status: 0, detail: "the authorize URL has no attempt") }
        attemptId = id
    }
}
