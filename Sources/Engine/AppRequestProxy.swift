import BrokerCore
import BrowserLoginProtocol

/// An `http.request` call after its params were checked.
public struct AppRequest: Sendable {
    public var client: String
    /// The account whose session is used (an `accountKey`); nil: the current one.
    public var account: String? = nil
    public var method: String
    public var path: String
    public var query: [(String, String)]
    public var headers: [HTTPHeader]
    public var body: [UInt8]?
    public var timeoutMilliseconds: Int

    package init(
        client: String, account: String? = nil, method: String, path: String, query: [(String, String)],
        headers: [HTTPHeader], body: [UInt8]?, timeoutMilliseconds: Int
    ) {
        self.client = client
        self.account = account
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.timeoutMilliseconds = timeoutMilliseconds
    }
}

/// The checks of docs/rpc.md `http.request` that need no state: method, path,
/// query, headers, sizes. Each refusal is a `-32602` message.
public enum AppRequestRules {
    public static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    public static let refusedHeaders: Set<String> = [
        "authorization", "cookie", "host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
        "trailer", "expect", "forwarded", "dpop",
    ]
    public static let maximumRequestBody = 1 << 20
    public static let maximumResponseBody = 8 << 20
    public static let defaultTimeout = 30_000
    public static let maximumTimeout = 120_000

    /// Nil when the path is acceptable, else why not.
    public static func pathProblem(_ path: String) -> String? {
        guard path.hasPrefix("/") else { return "'path' must be an absolute path starting with '/'" }
        if path.hasPrefix("//") { return "'path' may not start with '//'" }
        for scalar in path.unicodeScalars {
            if scalar.value < 0x21 || scalar.value == 0x7F || scalar.value > 0x7E {
                return "'path' may not contain spaces, control or non-ASCII characters (percent-encode them)"
            }
            if scalar == "\\" || scalar == "#" || scalar == "?" {
                return "'path' may not contain '\\\\', '#' or '?' (put the query in 'query')"
            }
        }
        let lower = path.lowercased()
        if lower.contains("%2e") || lower.contains("%2f") || lower.contains("%5c") {
            return "'path' may not contain %2e, %2f or %5c"
        }
        for segment in path.split(separator: "/", omittingEmptySubsequences: false) where segment == ".." || segment == "." {
            return "'path' may not contain '.' or '..' segments"
        }
        if path.contains(":") && path.split(separator: "/").first?.contains(":") == true {
            return "'path' may not carry a scheme"
        }
        return nil
    }

    public static func isToken(_ name: String) -> Bool {
        !name.isEmpty
            && name.unicodeScalars.allSatisfy { s in
                (s.value >= 0x30 && s.value <= 0x39) || (s.value >= 0x41 && s.value <= 0x5A)
                    || (s.value >= 0x61 && s.value <= 0x7A) || "!#$%&'*+-.^_`|~".unicodeScalars.contains(s)
            }
    }

    /// Nil when the header may be sent, else why not.
    public static func headerProblem(name: String, value: String) -> String? {
        guard isToken(name) else { return "header name '\(name)' is not a token" }
        let lower = name.lowercased()
        if refusedHeaders.contains(lower) || lower.hasPrefix("proxy-") {
            return "the header '\(name)' may not be set by the caller"
        }
        if value.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F }) {
            return "the value of '\(name)' contains control characters"
        }
        return nil
    }

    /// The query string, encoded by the broker.
    public static func encodeQuery(_ query: [(String, String)]) -> String {
        query.map { percentEncode($0.0) + "=" + percentEncode($0.1) }.joined(separator: "&")
    }
}

/// A refusal of an `http.request` call that the RPC side answers as invalid params (`-32602`).
public struct InvalidAppRequest: Error, Sendable {
    public let message: String
}

/// `http.request` (docs/rpc.md): the app's request to its own API with the
/// session's bearer token, which never leaves the broker. Holds no state: it
/// runs on the engine's actor and asks the session keeper for the token.
struct AppRequestProxy: Sendable {
    /// The transport for the app's own API.
    let transport: any HTTPTransport

    func send(_ request: AppRequest, client: ClientConfig, engine: isolated BrokerEngine) async throws -> HTTPResponse {
        var url = client.apiOrigin.serialized + request.path
        if !request.query.isEmpty { url += "?" + AppRequestRules.encodeQuery(request.query) }
        // Parse the built URL again: its origin must be the API origin.
        guard let parts = URLParts(splitting: url), let authority = parts.authority,
            (try? Origin(parts.scheme + "://" + authority)) == client.apiOrigin, parts.fragment == nil
        else {
            throw InvalidAppRequest(message: "the request URL does not stay on the client's API origin")
        }
        if engine.server(client.id).reservesAppPath(request.path, client: client) {
            throw InvalidAppRequest(
                message: "paths under the login server's base path (\(client.basePath)) belong to the broker, not the app")
        }
        let slot = try engine.sessions.slot(client.id, account: request.account)
        var secrets = try await engine.currentSession(slot)
        if request.account != nil { engine.sessions.used(slot) }
        if try engine.sessions.tokenNeedsRefresh(slot, secrets) {
            secrets = try await engine.refreshSession(slot, current: secrets)
        }
        let server = engine.server(client.id)
        func authorization() throws -> [HTTPHeader] {
            try server.authorizationHeaders(secrets.session, method: request.method, url: url)
        }
        var response = try await send(request, client: client, url: url, authorization: try authorization())
        if server.wantsFreshNonce(response, url: url) {
            // DPoP (RFC 9449 §9): refused before processing for want of the nonce now kept.
            response = try await send(request, client: client, url: url, authorization: try authorization())
        }
        if server.rejectsAccessToken(response) {
            // The request was not processed: refresh and send it once more.
            secrets = try await engine.refreshSession(slot, current: secrets)
            response = try await send(request, client: client, url: url, authorization: try authorization())
        }
        if let ending = server.endsSession(response) {
            try await engine.sessions.end(
                slot, status: ending.status, reason: ending.reason, generation: secrets.generation)
        }
        response.headers.removeAll { $0.name.lowercased() == "set-cookie" }
        return response
    }

    private func send(_ request: AppRequest, client: ClientConfig, url: String, authorization: [HTTPHeader])
        async throws -> HTTPResponse
    {
        let headers = request.headers + authorization
        let http = HTTPRequest(
            method: request.method, url: url, headers: headers, body: request.body,
            timeoutMilliseconds: request.timeoutMilliseconds,
            connectTimeoutMilliseconds: min(10_000, request.timeoutMilliseconds),
            maximumResponseBytes: AppRequestRules.maximumResponseBody, caFile: client.caFile,
            changesState: !(request.method == "GET" || request.method == "HEAD"))
        do {
            return try await transport.send(http)
        } catch {
            switch error {
            case .responseTooLarge:
                throw BrokerError(
                    .responseTooLarge,
                    "the API's answer is larger than \(AppRequestRules.maximumResponseBody) bytes; request less (paging)")
            case .notSent(let m):
                throw BrokerError(.serverUnreachable, "the app's API could not be reached (\(m)); nothing was sent")
            case .noAnswer(let m):
                throw BrokerError(
                    .serverUnreachable,
                    "the app's API did not answer (\(m)); the request may have been processed, so it was not repeated")
            case .invalidRequest(let m):
                throw InvalidAppRequest(message: "the request could not be built: \(m)")
            }
        }
    }
}
