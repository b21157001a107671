import BrokerRPC
@_exported import BrowserLoginAPI
@_exported import BrowserLoginProtocol
import Foundation
import SystemSupport

/// The broker's API (docs/rpc.md) for Swift apps: every method of the socket
/// as an `async` call that throws one error type, `BrowserLoginError`.
///
/// ```swift
/// let broker = BrowserLoginClient()
/// if try await broker.session("com.example.notes").status != .signedIn {
///     _ = try await broker.start("com.example.notes")
///     _ = try await broker.wait("com.example.notes", timeout: .seconds(600))
/// }
/// let me = try await broker.request("com.example.notes", method: "GET", path: "/api/me")
/// ```
///
/// Calls never wait for each other: each runs on a connection of its own
/// (kept for the next calls) on a thread of its own, so a five-minute
/// `wait` goes on while other calls come and go, and no call ever blocks one
/// of Swift's cooperative threads. One client serves a whole app.
public final class BrowserLoginClient: Sendable {
    /// The socket this client talks to; nil when none could be found (every call then throws `NO_SOCKET`).
    public let socketPath: String?
    private let pool: ConnectionPool

    /// A client of the broker at `socketPath`, else `$BROWSER_LOGIN_SOCKET`
    /// (when set and not empty), else `$XDG_RUNTIME_DIR/browser-login/broker.sock`.
    /// Nothing connects until the first call.
    public init(socketPath: String? = nil) {
        let path = UserPaths(environment: ProcessInfo.processInfo.environment).brokerSocket(option: socketPath)
        self.socketPath = path
        pool = ConnectionPool(path: path)
    }

    // MARK: The broker and its clients

    /// The broker's version, protocol and keyring state (`broker.info`).
    public func info() async throws(BrowserLoginError) -> BrokerInfo {
        try await call(.brokerInfo, nil as ClientParams?)
    }

    /// The clients this program may use (`clients.list`).
    public func clients() async throws(BrowserLoginError) -> [ClientSummary] {
        try await call(.clientsList, nil as ClientParams?)
    }

    // MARK: Sign-in

    /// Starts a sign-in (`login.start`): opens the browser on the login page
    /// unless `openBrowser` is false (the attempt's `authorizeUrl` is then the
    /// link to show). A client with a waiting attempt gets that attempt back.
    /// `flow` `.device` signs in on another device (the attempt carries `device`).
    /// `activationToken`, an xdg-activation token (Wayland) or startup id
    /// (X11) from the app's toolkit, lets the browser window come to the front.
    /// `addAccount` signs one more account in beside the signed-in ones (a
    /// client whose file says `Accounts=multiple`); `loginHint` fills in the
    /// sign-in page's address field.
    public func start(
        _ client: String, openBrowser: Bool = true, switchAccount: Bool = false, flow: LoginFlow? = nil,
        ephemeral: Bool = false, activationToken: String? = nil, addAccount: Bool = false, loginHint: String? = nil
    ) async throws(BrowserLoginError) -> AttemptView {
        try await call(
            .loginStart,
            LoginStartParams(
                client: client, ephemeral: ephemeral ? true : nil, openBrowser: openBrowser,
                switchAccount: switchAccount ? true : nil, flow: flow?.rawValue, activationToken: activationToken,
                addAccount: addAccount ? true : nil, loginHint: loginHint))
    }

    /// Reopens the login page of a waiting attempt (`login.resume`), with
    /// focus as `start` gives it.
    public func resume(_ attemptId: String, openBrowser: Bool = true, activationToken: String? = nil)
        async throws(BrowserLoginError) -> AttemptView
    {
        try await call(
            .loginResume,
            LoginResumeParams(attemptId: attemptId, openBrowser: openBrowser, activationToken: activationToken))
    }

    /// Delivers a callback URL as the browser opened it (`login.finish`; the URL handler's job).
    public func finish(url: String) async throws(BrowserLoginError) -> AttemptView {
        try await call(.loginFinish, LoginFinishParams(url: url))
    }

    /// Cancels an attempt (`login.cancel`).
    public func cancel(_ attemptId: String) async throws(BrowserLoginError) -> AttemptView {
        try await call(.loginCancel, AttemptParams(attemptId: attemptId))
    }

    /// An attempt as it is now (`login.status`); with `reconcile`, waiting
    /// and uncertain attempts are checked with their server first.
    public func status(_ attemptId: String, reconcile: Bool = true) async throws(BrowserLoginError) -> AttemptView {
        try await call(.loginStatus, LoginStatusParams(attemptId: attemptId, reconcile: reconcile))
    }

    /// Clears a finished or reconciled attempt (`login.acknowledge`).
    public func acknowledge(_ attemptId: String) async throws(BrowserLoginError) -> AttemptView {
        try await call(.loginAcknowledge, AttemptParams(attemptId: attemptId))
    }

    /// Attempts, newest first (`login.list`, at most 1000): of one client, in some states.
    public func attempts(client: String? = nil, states: [AttemptState]? = nil) async throws(BrowserLoginError)
        -> [AttemptView]
    {
        try await call(.loginList, LoginListParams(client: client, states: states))
    }

    // MARK: Sessions

    /// A client's public session (`session.get`): its current account's, or
    /// that of `account` (an `accountKey`).
    public func session(_ client: String, account: String? = nil) async throws(BrowserLoginError) -> SessionView {
        try await call(.sessionGet, ClientParams(client: client, account: account))
    }

    /// The client's accounts (`session.list`): the current one first, then
    /// the most recently used.
    public func accounts(_ client: String) async throws(BrowserLoginError) -> [SessionView] {
        try await call(.sessionList, SessionListParams(client: client))
    }

    /// Makes `account` (an `accountKey`) the client's current account (`session.use`).
    public func use(_ client: String, account: String) async throws(BrowserLoginError) -> SessionView {
        try await call(.sessionUse, SessionUseParams(client: client, account: account))
    }

    /// Waits until `client` is signed in and answers its session; throws
    /// `WAIT_TIMEOUT` when `timeout` passes first. Any length: beyond the
    /// broker's 300 s per call, it asks again.
    public func wait(_ client: String, timeout: Duration, account: String? = nil) async throws(BrowserLoginError)
        -> SessionView
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            let chunk = min(max(deadline - ContinuousClock.now, .zero), .milliseconds(SessionWaitParams.maximumTimeoutMs))
            do {
                return try await call(
                    .sessionWait, SessionWaitParams(client: client, timeoutMs: milliseconds(chunk), account: account),
                    timeout: chunk + ConnectionPool.answerMargin)
            } catch  where error.code == .waitTimeout && deadline > ContinuousClock.now {
                continue
            }
        }
    }

    /// Signs a client out (`session.signOut`): at once here, and revoked at
    /// the server. `revokedAtServer` false: the provider cannot be told.
    public func signOut(_ client: String, account: String? = nil) async throws(BrowserLoginError) -> SessionView {
        try await call(.sessionSignOut, ClientParams(client: client, account: account))
    }

    // MARK: The app's API

    /// Calls the client's API with its session (`http.request`): the broker
    /// adds the token, which never reaches this process. `path` is an
    /// absolute path without a query (`query` is encoded by the broker);
    /// `headers` may not include `Authorization`, `Cookie` or `Host`. Any
    /// HTTP status is an answer, not an error; `NOT_SIGNED_IN` without a session.
    /// `account` (an `accountKey`) sends it as that account rather than the current one.
    public func request(
        _ client: String, method: String, path: String, query: [String: String]? = nil,
        headers: [String: String]? = nil, body: [UInt8]? = nil, timeout: Duration? = nil, account: String? = nil
    ) async throws(BrowserLoginError) -> HTTPResponse {
        var params = Self.requestParams(client, method, path, query, headers, body, timeout)
        params.account = account
        let result: HTTPResponseResult = try await call(
            .httpRequest, params,
            timeout: (timeout ?? .seconds(30)) + ConnectionPool.answerMargin)
        return try HTTPResponse(result)
    }

    /// The params of `http.request`: a UTF-8 body as text, any other in base64.
    package static func requestParams(
        _ client: String, _ method: String, _ path: String, _ query: [String: String]?, _ headers: [String: String]?,
        _ body: [UInt8]?, _ timeout: Duration?
    ) -> HTTPRequestParams {
        var text: String?
        var base64: String?
        if let body {
            if let utf8 = String(validating: body, as: UTF8.self) {
                text = utf8
            } else {
                base64 = Data(body).base64EncodedString()
            }
        }
        return HTTPRequestParams(
            client: client, method: method, path: path, query: query, headers: headers, body: text, bodyBase64: base64,
            timeoutMs: timeout.map(milliseconds))
    }

    // MARK: Calls

    /// Calls `method` and answers its raw result: for the project's CLI, whose
    /// `--json` prints the broker's answer exactly.
    package func call(_ method: RPCMethod, params: JSONValue?, timeout: Duration = .seconds(130))
        async throws(BrowserLoginError) -> JSONValue
    {
        let pool = self.pool
        return try await runBlocking { pool.call(method.rawValue, params, timeout: timeout) }
    }

    /// Calls `method` with typed params and answers its typed result.
    package func call<Params: Encodable, Result: Decodable>(
        _ method: RPCMethod, _ params: Params?, timeout: Duration = .seconds(130)
    ) async throws(BrowserLoginError) -> Result {
        let value = try await call(method, params: try encode(params), timeout: timeout)
        do { return try value.decode(Result.self) } catch { throw .unreadable(error) }
    }

    private func encode<Params: Encodable>(_ params: Params?) throws(BrowserLoginError) -> JSONValue? {
        guard let params else { return nil }
        do { return try JSONValue(encoding: params) } catch {
            throw BrowserLoginError(.protocolError, "the call's params could not be encoded: \(error)")
        }
    }

    /// A new connection of its own (for subscriptions), opened off the cooperative pool.
    func openConnection() async throws(BrowserLoginError) -> Connection {
        let pool = self.pool
        return try await runBlocking { () -> Swift.Result<Connection, BrowserLoginError> in
            do throws(BrowserLoginError) { return .success(try pool.open()) } catch { return .failure(error) }
        }
    }
}

/// How a sign-in happens (`flow` of `login.start`, docs/providers.md).
public enum LoginFlow: String, Sendable {
    /// Through the system browser (an authorization code and a callback).
    case browser
    /// On another device: the attempt shows an address and a code (RFC 8628).
    case device
}

/// The answer of the app's API to `request`.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    /// Lower-case names; a repeated header's values joined with `, `.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    package init(_ result: HTTPResponseResult) throws(BrowserLoginError) {
        var bytes = Array((result.body ?? "").utf8)
        if let base64 = result.bodyBase64 {
            guard let data = Data(base64Encoded: base64) else {
                throw BrowserLoginError(.protocolError, "the broker's answer has a body that is not base64")
            }
            bytes = Array(data)
        }
        self.init(status: result.status, headers: result.headers, body: bytes)
    }

    /// A 2xx status.
    public var isSuccess: Bool { (200..<300).contains(status) }

    /// The body as UTF-8 text (nil when it is not).
    public var text: String? { String(validating: body, as: UTF8.self) }

    /// The body decoded from JSON.
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        try JSONDecoder().decode(type, from: Data(body))
    }
}

/// Whole milliseconds of a duration, at least 0 (the `timeoutMs` of the API).
package func milliseconds(_ duration: Duration) -> Int {
    let (seconds, attoseconds) = duration.components
    return max(0, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
}
