import BrokerCore
import BrokerRPC
import Engine
import SQLiteSupport
import Synchronization

/// The handler of one JSON-RPC method of docs/rpc.md: decodes its typed
/// params, checks that the peer may use the client concerned (`Peers=`),
/// calls the engine and encodes its typed result.
struct MethodHandler: Sendable {
    /// The names of its params; any other is `-32602`.
    let parameters: [String]
    let handle: @Sendable (MethodCall) async throws -> JSONValue
    /// The serialized result at once, without a task or the engine actor,
    /// when it is known without waiting (a read of state kept in memory);
    /// nil (or an error) hands the call to `handle`, which answers the same.
    let immediate: (@Sendable (MethodCall) throws -> [UInt8]?)?

    init(
        _ parameters: [String] = [], immediate: (@Sendable (MethodCall) throws -> [UInt8]?)? = nil,
        _ handle: @escaping @Sendable (MethodCall) async throws -> JSONValue
    ) {
        self.parameters = parameters
        self.immediate = immediate
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
    /// The serialized answers of the read-only methods (Methods/BrokerMethods.swift).
    let answers: CachedAnswers

    /// The socket request's context, for the methods that only exist on the socket (`events.*`).
    func requireSocket(_ method: RPCMethod) throws -> RPCRequestContext {
        guard let socket else { throw RPCError.methodNotFound(method.rawValue) }
        return socket
    }

    /// The caller's identity for `Peers=`: read once per socket connection
    /// (a connection belongs to the process that made it; a process that
    /// hands its descriptor on could as well forward its calls), and per call
    /// over D-Bus.
    func identity() -> PeerBinding.Identity {
        guard let socket else { return PeerBinding.identity(pid: peer.pid) }
        return connectionPeer(socket).identity
    }

    /// What the broker keeps with the socket connection of this call.
    func connectionPeer(_ socket: RPCRequestContext) -> ConnectionPeer {
        let pid = peer.pid
        return socket.connection.attached { ConnectionPeer(pid: pid) }
    }

    /// Whether this caller may use `config`'s client (Peers=).
    func mayUse(_ config: ClientConfig) -> Bool {
        config.peers.isEmpty || PeerBinding.mayUse(config, identity())
    }

    /// Checks this connection's peer may use `client` (Peers=); an unknown client is the engine's to refuse.
    func requireUse(_ client: String) throws {
        if let peers = engine.peers(of: client), !PeerBinding.mayUse(peers: peers, identity()) {
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
        let call = self
        return { client in call.engine.config(for: client).map(call.mayUse) ?? true }
    }
}

/// What the broker keeps with one socket connection (`RPCConnection.attached`):
/// its peer's identity for `Peers=`, read once (a connection belongs to the
/// process that made it; a process that hands its descriptor on could as well
/// forward its calls), and what depends only on that identity.
final class ConnectionPeer: Sendable {
    let identity: PeerBinding.Identity
    /// This peer's `clients.list` answer, once made (the clients never change).
    let clientList = Mutex<[UInt8]?>(nil)

    init(pid: Int32) { identity = PeerBinding.identity(pid: pid) }
}

/// The JSON value of a typed result.
func result(_ value: some Encodable) throws -> JSONValue { try JSONValue(encoding: value) }

/// The method table of docs/rpc.md: one handler per method; turns the
/// engine's errors into JSON-RPC errors.
public struct MethodTable: Sendable {
    let engine: BrokerEngine
    let logger: Logger
    /// The RPC side's serialized answers of the read-only methods: one set per table, shared by its calls.
    let answers = CachedAnswers()

    /// One handler per method, from Methods/*Methods.swift.
    static let handlers = Dictionary(
        uniqueKeysWithValues: [brokerMethods, loginMethods, sessionMethods, eventMethods, httpMethods].joined().map {
            ($0.key.rawValue, $0.value)
        })

    /// The handlers with an `immediate` answer, found by comparing names in
    /// turn: they are few, and their names short enough to compare in a word or two.
    static let immediateHandlers = handlers.compactMap { name, handler in
        handler.immediate.map { (name: name, handler: (handler, $0)) }
    }

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
            return try await handler.handle(
                MethodCall(peer: peer, socket: socket, params: params, engine: engine, answers: answers))
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

    /// The RPC server's fast path (`RPCFastHandler`), on the connection's I/O
    /// queue: a method whose handler has an `immediate` answer gives it
    /// there (`session.get`, `broker.info`, `clients.list`); anything else,
    /// and any error, returns nil and takes `handle`, which answers the same.
    public func handleFast(_ context: RPCRequestContext, _ method: String, _ params: [(String, JSONValue)]) -> [UInt8]? {
        guard let (handler, immediate) = Self.immediateHandlers.first(where: { $0.name == method })?.handler,
            let params = try? Params(members: params, allowed: handler.parameters)
        else { return nil }
        let call = MethodCall(
            peer: CallerPeer(pid: context.peer.pid, uid: context.peer.uid), socket: context, params: params,
            engine: engine, answers: answers)
        return try? immediate(call)
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
