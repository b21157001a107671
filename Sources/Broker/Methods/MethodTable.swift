import BrokerCore
import BrokerRPC
import SQLiteSupport

/// The handler of one JSON-RPC method of docs/rpc.md: decodes its typed
/// params, checks that the peer may use the client concerned (`Peers=`),
/// calls the engine and encodes its typed result.
struct MethodHandler: Sendable {
    /// The names of its params; any other is `-32602`.
    let parameters: Set<String>
    let handle: @Sendable (MethodCall) async throws -> JSONValue

    init(_ parameters: Set<String> = [], _ handle: @escaping @Sendable (MethodCall) async throws -> JSONValue) {
        self.parameters = parameters
        self.handle = handle
    }
}

/// The process that made a call, from the socket's `SO_PEERCRED` or the
/// bus's `GetConnectionCredentials`: what `Peers=` is checked against.
struct CallerPeer: Sendable, Hashable {
    var pid: Int32
    var uid: UInt32
}

/// One call of a method: its caller, its params, and the engine; `socket`
/// is the socket request's context (nil over D-Bus, whose `Subscribe` is
/// the bus's own, BusAPI.swift).
struct MethodCall: Sendable {
    let peer: CallerPeer
    let socket: RPCRequestContext?
    let params: Params
    let engine: BrokerEngine

    /// The socket request's context, for the methods that only exist on the socket (`events.*`).
    func requireSocket(_ method: RPCMethod) throws -> RPCRequestContext {
        guard let socket else { throw RPCError.methodNotFound(method.rawValue) }
        return socket
    }

    /// Checks this connection's peer may use `client` (Peers=); an unknown client is the engine's to refuse.
    func requireUse(_ client: String) throws {
        if let config = engine.config(for: client), !PeerBinding.mayUse(config, pid: peer.pid) {
            throw BrokerError(
                .clientForbidden,
                "this program may not use the client '\(client)'; its client file's Peers= does not name it")
        }
    }

    /// Checks the peer may use the client of the attempt named by the `attemptId` param.
    func requireAttemptUse() async throws {
        try requireUse(try await engine.attemptClient(try params.string("attemptId")))
    }

    /// A filter of client ids for this peer (clients without a config are let through).
    func clientFilter() -> @Sendable (String) -> Bool {
        let (engine, pid) = (engine, peer.pid)
        return { client in engine.config(for: client).map { PeerBinding.mayUse($0, pid: pid) } ?? true }
    }
}

/// The JSON value of a typed result.
func result(_ value: some Encodable) throws -> JSONValue { try JSONValue(encoding: value) }

/// The method table of docs/rpc.md: one handler per method; turns the
/// engine's errors into JSON-RPC errors.
public struct MethodTable: Sendable {
    let engine: BrokerEngine
    let logger: Logger

    /// One handler per method, from Methods/*Methods.swift.
    static let handlers = Dictionary(
        uniqueKeysWithValues: [brokerMethods, loginMethods, sessionMethods, eventMethods, httpMethods].joined().map {
            ($0.key.rawValue, $0.value)
        })

    public init(engine: BrokerEngine, logger: Logger) {
        self.engine = engine
        self.logger = logger
    }

    public func handle(_ context: RPCRequestContext, _ method: String, _ params: JSONValue?) async throws(RPCError)
        -> JSONValue
    {
        try await dispatch(
            CallerPeer(pid: context.peer.pid, uid: context.peer.uid), socket: context, method, params,
            origin: ["rpc.connection": "\(context.connectionID)"])
    }

    /// A call over D-Bus (BusAPI.swift) by the process `peer`: the same
    /// handlers, without a socket. `caller` (a unique bus name) only goes to logs.
    func handle(bus peer: CallerPeer, caller: String, _ method: String, _ params: JSONValue?) async throws(RPCError)
        -> JSONValue
    {
        try await dispatch(peer, socket: nil, method, params, origin: ["dbus.sender": caller])
    }

    /// `origin` (where the call came from, for the log) is built only when an internal error is logged.
    private func dispatch(
        _ peer: CallerPeer, socket: RPCRequestContext?, _ method: String, _ params: JSONValue?,
        origin: @autoclosure () -> [String: String]
    ) async throws(RPCError) -> JSONValue {
        do {
            guard let handler = Self.handlers[method] else { throw RPCError.methodNotFound(method) }
            let params = try Params(params, allowed: handler.parameters)
            return try await handler.handle(MethodCall(peer: peer, socket: socket, params: params, engine: engine))
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
                "internal error", origin().merging(["rpc.method": method, "error": "\(error)"]) { $1 })
            throw RPCError.internalError("internal error; the broker's log has the details (rpc.method=\(method))")
        }
    }

    /// The RPC server's fast path (`RPCFastHandler`): `session.get` for a
    /// configured client without `Peers=`, answered from the engine's session
    /// board on the connection's I/O queue. Anything else (other methods, other
    /// params, errors, bound clients) returns nil and takes `handle`, which
    /// gives the same answer for these calls.
    public func handleFast(_ context: RPCRequestContext, _ method: String, _ params: JSONValue?) -> [UInt8]? {
        guard method == RPCMethod.sessionGet.rawValue, case .object(let members)? = params, members.count == 1,
            case .string(let client)? = members["client"], let config = engine.config(for: client),
            config.peers.isEmpty, let entry = engine.sessionBoard.entry(client)
        else { return nil }
        return entry.bytes
    }

    static func rpcError(_ error: BrokerError) -> RPCError {
        var data: [String: JSONValue] = ["code": .string(error.code.rawValue)]
        if let id = error.attemptId { data["attemptId"] = .string(id) }
        if let code = error.serverCode { data["serverCode"] = .string(code) }
        if let retry = error.retryAfterSeconds { data["retryAfterSeconds"] = .integer(Int64(retry)) }
        if let providerError = error.providerError { data["providerError"] = .string(providerError) }
        return RPCError(code: .applicationError, message: error.message, data: .object(data))
    }
}
