import BrokerCore
import BrokerRPC
import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// The JSON-RPC method table of RPC.md: checks params, applies client
/// binding, calls the engine and turns its answers into results and errors.
public struct MethodTable: Sendable {
    let engine: BrokerEngine
    let logger: Logger

    public init(engine: BrokerEngine, logger: Logger) {
        self.engine = engine
        self.logger = logger
    }

    public func handle(_ context: RPCRequestContext, _ method: String, _ params: JSONValue?) async throws(RPCError)
        -> JSONValue
    {
        do {
            return try await dispatch(context, method, params)
        } catch let error as RPCError {
            throw error
        } catch let error as BrokerError {
            throw Self.rpcError(error)
        } catch let error as InvalidAppRequest {
            throw RPCError.invalidParams(error.message)
        } catch let error as DatabaseError where error.isStorageFault {
            logger.warning(
                "the state directory cannot be written",
                ["rpc.method": method, "path": engine.stateDirectory, "error": "\(error)"])
            throw Self.rpcError(.storageUnavailable(directory: engine.stateDirectory, cause: error.cause))
        } catch {
            logger.error(
                "internal error", ["rpc.method": method, "rpc.connection": "\(context.connectionID)", "error": "\(error)"])
            throw RPCError.internalError("internal error; the broker's log has the details (rpc.method=\(method))")
        }
    }

    /// The RPC server's fast path (`RPCFastHandler`): `session.get` for a
    /// configured client without `Peers=`, answered from the engine's session
    /// board on the connection's I/O queue. Anything else (other methods, other
    /// params, errors, bound clients) returns nil and takes `handle`, which
    /// gives the same answer for these calls.
    public func handleFast(_ context: RPCRequestContext, _ method: String, _ params: JSONValue?) -> [UInt8]? {
        guard method == "session.get", case .object(let members)? = params, members.count == 1,
            case .string(let client)? = members["client"], let config = engine.config(for: client),
            config.peers.isEmpty, let entry = engine.sessionBoard.entry(client)
        else { return nil }
        return entry.bytes
    }

    /// `events.subscribe` calls one connection may have active at once.
    static let maxSubscriptionsPerConnection = 32

    static func rpcError(_ error: BrokerError) -> RPCError {
        var data: [String: JSONValue] = ["code": .string(error.code.rawValue)]
        if let id = error.attemptId { data["attemptId"] = .string(id) }
        if let code = error.serverCode { data["serverCode"] = .string(code) }
        if let retry = error.retryAfterSeconds { data["retryAfterSeconds"] = .integer(Int64(retry)) }
        return RPCError(code: .applicationError, message: error.message, data: .object(data))
    }

    func encode(_ value: some Encodable) throws -> JSONValue { try JSONValue(encoding: value) }

    /// Whether this connection's peer may use `client` (Peers=).
    func mayUse(_ client: String, _ context: RPCRequestContext) async -> Bool {
        guard let config = engine.config(for: client) else { return true }
        return PeerBinding.mayUse(config, pid: context.peer.pid)
    }

    func requireUse(_ client: String, _ context: RPCRequestContext) async throws {
        guard await mayUse(client, context) else {
            throw BrokerError(
                .clientForbidden,
                "this program may not use the client '\(client)'; its client file's Peers= does not name it")
        }
    }

    func dispatch(_ context: RPCRequestContext, _ method: String, _ raw: JSONValue?) async throws -> JSONValue {
        switch method {
        case "broker.info":
            _ = try Params(raw, allowed: [])
            return try encode(await engine.info())

        case "clients.list":
            _ = try Params(raw, allowed: [])
            let pid = context.peer.pid
            return try encode(await engine.clientList { PeerBinding.mayUse($0, pid: pid) })

        case "login.start":
            let p = try Params(raw, allowed: ["client", "ephemeral", "openBrowser", "switchAccount"])
            let client = try p.string("client")
            try await requireUse(client, context)
            return try encode(
                await engine.start(
                    client: client, ephemeral: try p.bool("ephemeral") ?? false,
                    openBrowser: try p.bool("openBrowser") ?? true, switchAccount: try p.bool("switchAccount") ?? false))

        case "login.resume":
            let p = try Params(raw, allowed: ["attemptId", "openBrowser"])
            let id = try p.string("attemptId")
            try await requireUse(try await engine.attemptClient(id), context)
            return try encode(await engine.resume(attemptId: id, openBrowser: try p.bool("openBrowser") ?? true))

        case "login.finish":
            let p = try Params(raw, allowed: ["url"])
            return try encode(await engine.finish(url: try p.string("url")))

        case "login.cancel":
            let p = try Params(raw, allowed: ["attemptId"])
            let id = try p.string("attemptId")
            try await requireUse(try await engine.attemptClient(id), context)
            return try encode(await engine.cancel(attemptId: id))

        case "login.status":
            let p = try Params(raw, allowed: ["attemptId", "reconcile"])
            let id = try p.string("attemptId")
            try await requireUse(try await engine.attemptClient(id), context)
            return try encode(await engine.status(attemptId: id, reconcile: try p.bool("reconcile") ?? true))

        case "login.acknowledge":
            let p = try Params(raw, allowed: ["attemptId"])
            let id = try p.string("attemptId")
            try await requireUse(try await engine.attemptClient(id), context)
            return try encode(await engine.acknowledge(attemptId: id))

        case "login.list":
            let p = try Params(raw, allowed: ["client", "states"])
            let client = try p.optionalString("client")
            if let client { try await requireUse(client, context) }
            var states: [AttemptState]?
            if let names = try p.stringArray("states") {
                states = try names.map { name in
                    guard let state = AttemptState(rawValue: name) else {
                        throw RPCError.invalidParams("unknown state '\(name)' in 'states'")
                    }
                    return state
                }
            }
            let pid = context.peer.pid
            let configs = await engine.clientConfigs()
            return try encode(
                try await engine.list(client: client, states: states) { id in
                    configs[id].map { PeerBinding.mayUse($0, pid: pid) } ?? true
                })

        case "session.get":
            let p = try Params(raw, allowed: ["client"])
            let client = try p.string("client")
            try await requireUse(client, context)
            let view = try await engine.session(client: client)
            if let json = engine.sessionBoard.entry(client)?.json { return json }
            return try encode(view)

        case "session.wait":
            let p = try Params(raw, allowed: ["client", "timeoutMs"])
            let client = try p.string("client")
            let timeout = try p.int("timeoutMs") ?? 5000
            guard (0...300_000).contains(timeout) else {
                throw RPCError.invalidParams("'timeoutMs' must be 0 to 300000")
            }
            try await requireUse(client, context)
            guard let view = try await engine.waitForSession(client: client, timeoutMilliseconds: timeout) else {
                throw BrokerError(
                    .waitTimeout, "the client did not become signed in within \(timeout) ms; start a sign-in, or wait longer")
            }
            return try encode(view)

        case "session.signOut":
            let p = try Params(raw, allowed: ["client"])
            let client = try p.string("client")
            try await requireUse(client, context)
            return try encode(await engine.signOut(client: client))

        case "events.subscribe":
            let p = try Params(raw, allowed: ["clients"])
            let clients = try p.stringArray("clients")
            if let clients { for c in clients { try await requireUse(c, context) } }
            let connection = context.connection
            guard connection.holdCount < Self.maxSubscriptionsPerConnection else {
                throw BrokerError(
                    .busy,
                    "this connection has \(Self.maxSubscriptionsPerConnection) event subscriptions already; one subscription without 'clients' receives every client's events"
                )
            }
            let configs = await engine.clientConfigs()
            let pid = context.peer.pid
            let id = try await engine.subscribe(
                connection: connection.id, clients: clients,
                mayUse: { client in configs[client].map { PeerBinding.mayUse($0, pid: pid) } ?? true },
                send: { event in
                    let notification: (String, JSONValue?) =
                        switch event {
                        case .attemptChanged(let view): ("login.changed", try? JSONValue(encoding: ["attempt": view]))
                        case .sessionChanged(let view): ("session.changed", try? JSONValue(encoding: ["session": view]))
                        }
                    if let params = notification.1 { connection.notify(method: notification.0, params: params) }
                })
            // Held: a subscribed connection is never closed to make room for others.
            connection.hold()
            let engine = self.engine
            connection.onClose { Task { await engine.connectionClosed(connection.id) } }
            return ["subscription": .string(id)]

        case "events.unsubscribe":
            let p = try Params(raw, allowed: ["subscription"])
            let id = try p.string("subscription")
            guard await engine.unsubscribe(id, connection: context.connectionID) else {
                throw RPCError.invalidParams("no subscription '\(id)' on this connection")
            }
            context.connection.release()
            return .object([:])

        case "http.request":
            let p = try Params(
                raw, allowed: ["client", "method", "path", "query", "headers", "body", "bodyBase64", "timeoutMs"])
            let request = try Self.appRequest(p)
            try await requireUse(request.client, context)
            return Self.encode(try await engine.appRequest(request))

        default:
            throw RPCError.methodNotFound(method)
        }
    }
}

extension MethodTable {
    /// Checks `http.request` params (RPC.md); every refusal is `-32602`.
    static func appRequest(_ p: Params) throws -> AppRequest {
        let client = try p.string("client")
        let method = try p.string("method")
        guard AppRequestRules.methods.contains(method) else {
            throw RPCError.invalidParams("'method' must be one of GET, HEAD, POST, PUT, PATCH, DELETE")
        }
        let path = try p.string("path")
        if let problem = AppRequestRules.pathProblem(path) { throw RPCError.invalidParams(problem) }
        var query: [(String, String)] = []
        if let q = p.object["query"], q != .null {
            guard let object = q.objectValue else { throw RPCError.invalidParams("'query' must be an object of strings") }
            for key in object.keys.sorted() {
                guard let value = object[key]?.stringValue else {
                    throw RPCError.invalidParams("'query' must be an object of strings")
                }
                query.append((key, value))
            }
        }
        var headers: [HTTPHeader] = []
        if let h = p.object["headers"], h != .null {
            guard let object = h.objectValue else { throw RPCError.invalidParams("'headers' must be an object of strings") }
            for key in object.keys.sorted() {
                guard let value = object[key]?.stringValue else {
                    throw RPCError.invalidParams("'headers' must be an object of strings")
                }
                if let problem = AppRequestRules.headerProblem(name: key, value: value) {
                    throw RPCError.invalidParams(problem)
                }
                headers.append(HTTPHeader(key, value))
            }
        }
        let text = try p.optionalString("body")
        let base64 = try p.optionalString("bodyBase64")
        if text != nil && base64 != nil { throw RPCError.invalidParams("give 'body' or 'bodyBase64', not both") }
        var body: [UInt8]?
        if let text { body = Array(text.utf8) }
        if let base64 {
            guard let data = Data(base64Encoded: base64) else { throw RPCError.invalidParams("'bodyBase64' is not base64") }
            body = Array(data)
        }
        if let body, body.count > AppRequestRules.maximumRequestBody {
            throw RPCError.invalidParams("the request body is larger than 1 MiB")
        }
        let timeout = try p.int("timeoutMs") ?? AppRequestRules.defaultTimeout
        guard (1...AppRequestRules.maximumTimeout).contains(timeout) else {
            throw RPCError.invalidParams("'timeoutMs' must be 1 to 120000")
        }
        return AppRequest(
            client: client, method: method, path: path, query: query, headers: headers, body: body,
            timeoutMilliseconds: timeout)
    }

    /// `{status, headers, body | bodyBase64}`: text bodies as text, others in base64.
    static func encode(_ response: AppResponse) -> JSONValue {
        var headers: [String: JSONValue] = [:]
        for header in response.headers {
            let name = header.name.lowercased()
            if let existing = headers[name]?.stringValue {
                headers[name] = .string(existing + ", " + header.value)
            } else {
                headers[name] = .string(header.value)
            }
        }
        var result: [String: JSONValue] = ["status": .integer(Int64(response.status)), "headers": .object(headers)]
        let type = headers["content-type"]?.stringValue?.lowercased() ?? ""
        let textual =
            type.hasPrefix("text/") || type.contains("json") || type.contains("xml")
            || type.contains("x-www-form-urlencoded") || (type.isEmpty && response.body.isEmpty)
        if textual, let text = String(validating: response.body, as: UTF8.self) {
            result["body"] = .string(text)
        } else {
            result["bodyBase64"] = .string(Data(response.body).base64EncodedString())
        }
        return .object(result)
    }
}

/// Named params of one call, checked strictly: positional params and
/// unknown names are `-32602`.
struct Params {
    let object: [String: JSONValue]

    init(_ raw: JSONValue?, allowed: Set<String>) throws(RPCError) {
        switch raw {
        case nil, .null?: object = [:]
        case .object(let o)?: object = o
        default: throw RPCError.invalidParams("params must be an object of named parameters")
        }
        for key in object.keys.sorted() where !allowed.contains(key) {
            throw RPCError.invalidParams("unknown parameter '\(key)'")
        }
    }

    func optionalString(_ key: String) throws(RPCError) -> String? {
        guard let value = object[key], value != .null else { return nil }
        guard let s = value.stringValue else { throw RPCError.invalidParams("'\(key)' must be a string") }
        return s
    }

    func string(_ key: String) throws(RPCError) -> String {
        guard let s = try optionalString(key) else { throw RPCError.invalidParams("'\(key)' is required") }
        return s
    }

    func bool(_ key: String) throws(RPCError) -> Bool? {
        guard let value = object[key], value != .null else { return nil }
        guard let b = value.boolValue else { throw RPCError.invalidParams("'\(key)' must be true or false") }
        return b
    }

    func int(_ key: String) throws(RPCError) -> Int? {
        guard let value = object[key], value != .null else { return nil }
        guard let i = value.intValue else { throw RPCError.invalidParams("'\(key)' must be an integer") }
        return Int(i)
    }

    func stringArray(_ key: String) throws(RPCError) -> [String]? {
        guard let value = object[key], value != .null else { return nil }
        guard let items = value.arrayValue else { throw RPCError.invalidParams("'\(key)' must be an array of strings") }
        var out: [String] = []
        for item in items {
            guard let s = item.stringValue else { throw RPCError.invalidParams("'\(key)' must be an array of strings") }
            out.append(s)
        }
        return out
    }
}
