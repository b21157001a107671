import BrowserLoginProtocol
import Foundation
import SQLiteSupport
import Synchronization

/// The request handler of the reference server: routing, the common rules
/// of docs/protocol.md §4 and the helpers the routes share. Called concurrently
/// from libmicrohttpd's connection threads; every piece of state it holds is
/// immutable, or behind a mutex (the store, the rate limiter).
final class LoginService: Sendable {
    static let maximumBody = 64 * 1024
    static let maximumWrongCodes = 5
    static let sessionCookie = "__Host-bl_session"

    let configuration: ServerConfiguration
    let clients: [String: ClientRegistration]
    let issuer: String
    let store: Store
    let secret: [UInt8]
    let clock: ServerClock
    let mailer: any MailSender
    /// The test account bases; `reloadTestAccounts` replaces them (SIGHUP).
    private let testAccountBases: Mutex<[EmailAddress]>
    var testAccounts: [EmailAddress] { testAccountBases.withLock { $0 } }
    /// The upstream OpenID providers of the hosted page (UpstreamSignIn.swift).
    let upstream: UpstreamProviders

    init(
        configuration: ServerConfiguration, issuer: String, store: Store, secret: [UInt8], clock: @escaping ServerClock,
        mailer: any MailSender
    ) {
        self.configuration = configuration
        self.clients = Dictionary(configuration.clients.map { ($0.clientId, $0) }, uniquingKeysWith: { a, _ in a })
        self.issuer = issuer
        self.store = store
        self.secret = secret
        self.clock = clock
        self.mailer = mailer
        self.testAccountBases = Mutex(configuration.testAccounts.compactMap(EmailAddress.init))
        self.upstream = UpstreamProviders(configuration.upstreamProviders, clock: clock)
    }

    /// Takes the test account bases of a reloaded (validated) configuration.
    /// Sessions of a base no longer listed end on their next request.
    func reloadTestAccounts(_ bases: [String]) {
        testAccountBases.withLock { $0 = bases.compactMap(EmailAddress.init) }
    }

    // MARK: Routing

    func handle(_ incoming: HTTPServerRequest) -> HTTPServerResponse {
        var request = incoming
        // Behind a trusted reverse proxy, the client is the last hop it appended.
        if configuration.trustForwardedFor, let forwarded = request.header("x-forwarded-for"),
            let last = forwarded.split(separator: ",").last?.trimmingCharacters(in: .whitespaces), !last.isEmpty
        {
            request.remoteAddress = last
        }
        let started = clock()
        let base = configuration.basePath
        var route = "unknown"
        var response: HTTPServerResponse
        // Referrer-Policy on every answer but those of the native routes and the API.
        var browserFacing = true
        do throws(APIError) {
            if request.path.hasPrefix(base + "/native/") {
                browserFacing = false
                let rest = String(request.path.dropFirst(base.count + "/native/".count))
                response = try native(request, rest, &route)
            } else if request.path.hasPrefix(base + "/browser/") {
                let rest = String(request.path.dropFirst(base.count + "/browser/".count))
                response = try browser(request, rest, &route)
            } else if request.path.hasPrefix("/api/") {
                browserFacing = false
                response = try demoAPI(request, String(request.path.dropFirst("/api/".count)), &route)
            } else if request.path == base + "/health" {
                route = "health"
                try requireMethod(request, "GET")
                response = json(200, ["ok": true])
            } else {
                throw APIError(.notFound, "no such route")
            }
        } catch {
            response = errorResponse(error)
        }
        response.headers.append(("Cache-Control", "no-store"))
        response.headers.append(("X-Content-Type-Options", "nosniff"))
        if browserFacing { response.headers.append(("Referrer-Policy", "no-referrer")) }
        Log.info(
            "request",
            [
                "http.method": request.method, "http.route": route, "http.status": "\(response.status)",
                "duration.ms": "\(clock() - started)",
            ])
        return response
    }

    private func native(_ request: HTTPServerRequest, _ rest: String, _ route: inout String) throws(APIError)
        -> HTTPServerResponse
    {
        // §4: a native route refuses browsers, before anything else.
        for name in ["cookie", "origin", "sec-fetch-site"] where request.hasHeader(name) {
            route = "native"
            throw APIError(.nativeOnly, "native routes refuse requests with Cookie, Origin or Sec-Fetch-Site")
        }
        let (key, id) = Self.routeKey(rest)
        let name: String
        let handle: (HTTPServerRequest) throws(APIError) -> HTTPServerResponse
        switch key {
        case "attempts": (name, handle) = ("create", create)
        case "session": (name, handle) = ("session", nativeSession)
        case "sessions/refresh": (name, handle) = ("refresh", refresh)
        case "sessions/revoke": (name, handle) = ("revoke", revoke)
        case "attempts/*/exchange": (name, handle) = ("exchange", { r throws(APIError) in try self.exchange(r, attemptId: id) })
        case "attempts/*/status": (name, handle) = ("status", { r throws(APIError) in try self.status(r, attemptId: id) })
        case "attempts/*/cancel": (name, handle) = ("cancel", { r throws(APIError) in try self.cancel(r, attemptId: id) })
        case "attempts/*/acknowledge":
            (name, handle) = ("acknowledge", { r throws(APIError) in try self.acknowledge(r, attemptId: id) })
        default: throw APIError(.notFound, "no such native route")
        }
        route = "native." + name
        // GET for the session; every other native route is a POST of JSON, at most 64 KiB.
        try requireMethod(request, name == "session" ? "GET" : "POST")
        if name != "session" { try requireJSONBody(request) }
        return try handle(request)
    }

    /// The native routes whose whole work is one short SQLite transaction
    /// (no mail, no upstream provider, no test delay).
    static let routesAnsweredInPlace: Set<String> = [
        "attempts", "attempts/*/exchange", "attempts/*/status", "attempts/*/cancel", "attempts/*/acknowledge",
    ]

    /// True when `request` may be answered on the HTTP polling thread that
    /// read it (`HTTPServer`'s `answersInPlace`): a POST to a route of
    /// `routesAnsweredInPlace`, on SQLite, with the writer idle at this
    /// moment, so the transaction runs at once (at worst after one batch of
    /// another thread's that started in between, a few milliseconds). Every
    /// other request, and these when the writer is busy, goes to a handler
    /// thread: a polling thread never waits for a queue of transactions, a
    /// mail, a provider or PostgreSQL.
    func answersInPlace(_ request: HTTPServerRequest) -> Bool {
        isShortTransaction(request) && store.writerIsIdle
    }

    /// True when `request` is a POST to a route of `routesAnsweredInPlace`
    /// (and, for an exchange, no test delay is configured).
    func isShortTransaction(_ request: HTTPServerRequest) -> Bool {
        let prefix = configuration.basePath + "/native/"
        guard request.method == "POST", request.path.hasPrefix(prefix) else { return false }
        let (key, _) = Self.routeKey(String(request.path.dropFirst(prefix.count)))
        guard Self.routesAnsweredInPlace.contains(key) else { return false }
        return key != "attempts/*/exchange" || configuration.testExchangeDelayMillis == 0
    }

    /// The route of `rest` with a non-empty attempt id (`attempts/<id>[/…]`)
    /// written as `*`, and that id.
    static func routeKey(_ rest: String) -> (key: String, attemptId: String) {
        var segments = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard (2...3).contains(segments.count), segments[0] == "attempts", !segments[1].isEmpty else { return (rest, "") }
        let id = segments[1]
        segments[1] = "*"
        return (segments.joined(separator: "/"), id)
    }

    func requireJSONBody(_ request: HTTPServerRequest) throws(APIError) {
        if request.bodyTooLarge { throw APIError(.payloadTooLarge, "the body is larger than 64 KiB") }
        let type = (request.header("content-type") ?? "").split(separator: ";").first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        guard type == "application/json" else {
            throw APIError(.invalidRequest, "send the body as Content-Type: application/json")
        }
    }

    func requireMethod(_ request: HTTPServerRequest, _ methods: String...) throws(APIError) {
        guard methods.contains(request.method) else {
            var error = APIError(.methodNotAllowed, "this route answers \(methods.joined(separator: ", "))")
            error.extraHeaders = [("Allow", methods.joined(separator: ", "))]
            throw error
        }
    }

    // MARK: Helpers

    func decode<T: Decodable>(_ type: T.Type, _ request: HTTPServerRequest) throws(APIError) -> T {
        do {
            return try StrictJSON.decode(T.self, from: Data(request.body))
        } catch {
            throw APIError(.invalidRequest, error.description)
        }
    }

    /// The members of a strict JSON object body, to tell the forms of revoke apart.
    func objectMembers(_ request: HTTPServerRequest) throws(APIError) -> [String: Any] {
        let data = Data(request.body)
        do { try StrictJSON.validateObject(data) } catch { throw APIError(.invalidRequest, error.description) }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw APIError(.invalidRequest, "the body is not one JSON object")
        }
        return object
    }

    func json<T: Encodable>(_ status: Int, _ value: T, headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        let body = (try? ProtocolJSON.encode(value)) ?? Array("{}".utf8)
        return HTTPServerResponse(
            status: status, headers: [("Content-Type", "application/json")] + headers, body: body)
    }

    func errorResponse(_ error: APIError) -> HTTPServerResponse {
        var response = json(error.code.httpStatus, ErrorBody(code: error.code, message: error.message))
        if let retry = error.retryAfterSeconds { response.headers.append(("Retry-After", "\(retry)")) }
        response.headers += error.extraHeaders
        return response
    }

    /// Takes a token from the bucket for `key`, or throws 429 RATE_LIMITED.
    /// The buckets are the store's: on PostgreSQL they hold across instances.
    func limit(_ kind: String, _ key: String, _ limit: RateLimit, message: String = "too many requests; retry later")
        throws(APIError)
    {
        if let retry = try store.takeRateToken(kind + ":" + key, limit: limit, now: clock()) {
            throw APIError(.rateLimited, message, retryAfterSeconds: retry)
        }
    }

    func randomToken(bytes: Int) throws(APIError) -> String {
        do { return try Crypto.randomToken(bytes: bytes) } catch {
            Log.error("randomness unavailable")
            throw APIError(.internalError, "the server could not complete the request")
        }
    }

    /// HMAC-SHA-256 under the server secret, base64url: lets the server
    /// repeat a refresh successor or a callback code without storing it.
    func derive(_ purpose: String, _ parts: String...) -> String {
        let message = ([purpose] + parts).joined(separator: "\u{0}")
        return Base64URL.encode(Crypto.hmacSHA256(key: secret, message: Array(message.utf8)))
    }

    func tokenPair(sessionId: String, generation: Int64) -> (access: String, refresh: String) {
        (derive("access-token", sessionId, "\(generation)"), derive("refresh-token", sessionId, "\(generation)"))
    }
}
