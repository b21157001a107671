import BrokerCore
import BrokerRPC
import BrokerSystem
import Engine
import Synchronization
import SystemSupport

/// The broker's API on the session bus (docs/dbus.md): `org.browserlogin.Broker1`
/// at `/org/browserlogin/Broker1`, the JSON-RPC methods under D-Bus names.
///
/// Every call goes through the same `MethodTable` as the socket: its
/// arguments and options become the JSON params, the JSON result the reply,
/// with the same `Peers=` checks (against the caller's process id, from the
/// bus). `Subscribe` is the bus's own: the events of clients without
/// `Peers=` are broadcast as signals to anyone listening, those of bound
/// clients sent to each subscribed caller that may use them, alone.
///
/// Bounded like the socket: calls in flight per caller and in all
/// (`DBusAPI`), subscriptions per caller and in all; a caller's
/// subscriptions end when it leaves the bus.
final class BusAPI: Sendable {
    static let busName = "org.browserlogin.Broker1"
    static let objectPath = "/org/browserlogin/Broker1"
    static let interfaceName = "org.browserlogin.Broker1"
    static let errorPrefix = "org.browserlogin.Error."
    static let maxCallsPerCaller = 16
    static let maxCalls = 512
    static let maxSubscriptionsPerCaller = MethodTable.maxSubscriptionsPerConnection
    static let maxSubscriptions = 1024
    /// The event hub's connection ids of bus callers: far above the socket's, which count from 1.
    static let firstConnection: UInt64 = 1 << 62

    /// A D-Bus method: its JSON-RPC twin, the params its positional arguments
    /// fill, and whether an `a{sv}` of options follows them.
    struct Route: Sendable {
        let method: RPCMethod
        let arguments: [String]
        let options: Bool
        /// Types of members of the reply's dictionary that are not variants.
        var memberTypes: [String: String] = [:]
    }

    static let routes: [String: Route] = [
        "Info": Route(method: .brokerInfo, arguments: [], options: false),
        "ListClients": Route(method: .clientsList, arguments: [], options: false),
        "Start": Route(method: .loginStart, arguments: ["client"], options: true),
        "Resume": Route(method: .loginResume, arguments: ["attemptId"], options: true),
        "Finish": Route(method: .loginFinish, arguments: ["url"], options: false),
        "Cancel": Route(method: .loginCancel, arguments: ["attemptId"], options: false),
        "Status": Route(method: .loginStatus, arguments: ["attemptId"], options: true),
        "Acknowledge": Route(method: .loginAcknowledge, arguments: ["attemptId"], options: false),
        "ListAttempts": Route(method: .loginList, arguments: [], options: true),
        "GetSession": Route(method: .sessionGet, arguments: ["client"], options: false),
        "WaitSession": Route(method: .sessionWait, arguments: ["client"], options: true),
        "SignOut": Route(method: .sessionSignOut, arguments: ["client"], options: false),
        "Request": Route(
            method: .httpRequest, arguments: ["client", "method", "path"], options: true,
            memberTypes: ["headers": "a{ss}"]),
        // Several accounts per client (docs/dbus.md); WaitSession and Request take an `account` option.
        "GetAccountSession": Route(method: .sessionGet, arguments: ["client", "account"], options: false),
        "SignOutAccount": Route(method: .sessionSignOut, arguments: ["client", "account"], options: false),
        "ListSessions": Route(method: .sessionList, arguments: ["client"], options: false),
        "UseAccount": Route(method: .sessionUse, arguments: ["client", "account"], options: false),
    ]

    private struct Caller {
        var connection: UInt64
        var subscriptions: Set<String> = []
        /// Subscriptions being made.
        var pending = 0
        var count: Int { subscriptions.count + pending }
    }

    private struct Registry {
        var callers: [String: Caller] = [:]
        var nextConnection = BusAPI.firstConnection + 1
        var total: Int { callers.values.reduce(0) { $0 + $1.count } }
    }

    private let methods: MethodTable
    private let engine: BrokerEngine
    private let logger: Logger
    private let registry = Mutex(Registry())
    /// A call being answered: its caller and its number.
    struct Call: Hashable, Sendable {
        let sender: String
        let serial: UInt64
    }
    /// The calls being answered, each a work item: cancelled when its caller leaves the bus (a `WaitSession`
    /// ends), cancelled and waited for when the bus service stops (`SessionBusService`). `DBusApplication`
    /// bounds them first (per caller and in all) until each is answered; an item ends just after its answer,
    /// so this bound leaves room for the ones ending.
    let calls = WorkGroup<Call>(limit: 2 * maxCalls)
    private let nextCall = Atomic<UInt64>(0)
    private let bus = Mutex<DBusApplication?>(nil)
    /// Where signals are encoded and sent, in publishing order (`emit`).
    private let signals = SerialQueue(label: "org.browserlogin.broker.signals")

    init(methods: MethodTable, engine: BrokerEngine, logger: Logger) {
        self.methods = methods
        self.engine = engine
        self.logger = logger
    }

    /// What `DBusApplication` serves for this API.
    var service: DBusAPI {
        DBusAPI(
            busName: Self.busName, objectPath: Self.objectPath, interfaceName: Self.interfaceName,
            interfaceXML: Self.interfaceXML, maxCallsPerCaller: Self.maxCallsPerCaller, maxCalls: Self.maxCalls,
            busyError: Self.errorPrefix + BrokerErrorCode.busy.rawValue,
            handle: { [self] call in start(call) },
            callerLeft: { [self] name in callerLeft(name) })
    }

    /// Sends signals through `application` from now on.
    func attach(_ application: DBusApplication) { bus.withLock { $0 = application } }

    /// Broadcasts the changes of clients without `Peers=` (and of clients no file names any more).
    func startBroadcasting() async throws {
        let engine = engine
        _ = try await engine.subscribe(
            connection: Self.firstConnection, clients: nil,
            mayUse: { client in engine.config(for: client).map { $0.peers.isEmpty } ?? true },
            send: { [self] change in emit(change, to: nil) })
    }

    /// Hands a change to the signal queue: the engine publishes from its actor
    /// and goes on at once (encoding and sending a signal takes about 0.2 ms,
    /// which `login.finish` waited for three times). One serial queue keeps
    /// the signals in the order the changes were committed.
    private func emit(_ change: PublishedChange, to destination: String?) {
        signals.async { [self] in send(change, to: destination) }
    }

    private func send(_ change: PublishedChange, to destination: String?) {
        guard let (method, params) = change.encoded(\.notification), let application = bus.withLock({ $0 }) else {
            return
        }
        switch method {
        case RPCNotification.sessionChanged.rawValue:
            if let session = params["session"] {
                application.emit(signal: "SessionChanged", session, destination: destination)
            }
        case RPCNotification.loginChanged.rawValue:
            if let attempt = params["attempt"] {
                application.emit(signal: "LoginChanged", attempt, destination: destination)
            }
        default: break
        }
    }

    // MARK: - Calls

    /// Answers `call` in a work item of its own, which ends early if its caller leaves the bus.
    private func start(_ call: DBusMethodCall) {
        let id = Call(sender: call.caller.uniqueName, serial: nextCall.add(1, ordering: .relaxed).newValue)
        guard calls.submit(id, { [self] in await answer(call) }) else {
            // The bus service is stopping (the bound is `DBusApplication`'s, checked before).
            return call.fail(
                DBusError(
                    Self.errorPrefix + BrokerErrorCode.busy.rawValue,
                    "the broker is stopping or has too many calls in flight; try again shortly"))
        }
        // It left before the item was kept: `callerLeft` may have missed it.
        if call.callerLeft { calls.cancel(id) }
    }

    private func answer(_ call: DBusMethodCall) async {
        let peer = CallerPeer(pid: call.caller.pid, uid: call.caller.uid)
        do {
            switch call.method {
            case "Subscribe": call.reply([.string(try await subscribe(call, peer: peer))])
            case "Unsubscribe":
                try await unsubscribe(call)
                call.reply([])
            default:
                guard let route = Self.routes[call.method] else {
                    return call.fail(DBusError("org.freedesktop.DBus.Error.UnknownMethod", "no method \(call.method)"))
                }
                let params = try Self.params(route, call.arguments)
                let result = try await methods.handle(
                    bus: peer, caller: call.caller.uniqueName, route.method.rawValue, params)
                call.reply([result], memberTypes: route.memberTypes)
            }
        } catch let error as RPCError {
            call.fail(Self.busError(error))
        } catch let error as BrokerError {
            call.fail(Self.busError(MethodTable.rpcError(error)))
        } catch {
            logger.error(
                "internal error over D-Bus",
                ["dbus.method": call.method, "dbus.sender": call.caller.uniqueName, "error": "\(error)"])
            call.fail(.failed("internal error; the broker's log has the details (dbus.method=\(call.method))"))
        }
    }

    /// The JSON-RPC params of a call: its positional arguments by name, then its options.
    static func params(_ route: Route, _ arguments: [JSONValue]) throws(RPCError) -> JSONValue {
        guard arguments.count == route.arguments.count + (route.options ? 1 : 0) else {
            throw RPCError.invalidParams("expected \(route.arguments.count) arguments")
        }
        var params: [String: JSONValue] = [:]
        for (name, value) in zip(route.arguments, arguments) { params[name] = value }
        if route.options {
            guard case .object(let options) = arguments[route.arguments.count] else {
                throw RPCError.invalidParams("the options must be a dictionary (a{sv})")
            }
            for name in options.keys.sorted() {
                guard params[name] == nil else { throw RPCError.invalidParams("unknown option '\(name)'") }
                params[name] = options[name]
            }
        }
        return .object(params)
    }

    /// The D-Bus error of a JSON-RPC error: `org.browserlogin.Error.<data.code>`,
    /// `InvalidArgs` for invalid params, else `Failed`.
    static func busError(_ error: RPCError) -> DBusError {
        if let code = error.applicationCode { return DBusError(errorPrefix + code, error.message) }
        if error.code == .invalidParams { return .invalidArgs(error.message) }
        return .failed(error.message)
    }

    // MARK: - Subscriptions

    /// `events.subscribe` over the bus: the changes of the `Peers=`-bound
    /// clients this caller may use (of those in `clients`, when given), sent to it alone.
    private func subscribe(_ call: DBusMethodCall, peer: CallerPeer) async throws -> String {
        let params = try Params(call.arguments.first, allowed: ["clients"])
        let clients = try params.stringArray("clients")
        let check = MethodCall(peer: peer, socket: nil, params: params, engine: engine, answers: methods.answers)
        for client in clients ?? [] { try check.requireUse(client) }
        let sender = call.caller.uniqueName
        let connection = try registry.withLock { registry throws(BrokerError) -> UInt64 in
            guard registry.total < Self.maxSubscriptions else {
                throw BrokerError(
                    .busy, "the broker has \(Self.maxSubscriptions) D-Bus subscriptions already; retry later")
            }
            var caller = registry.callers[sender] ?? Caller(connection: registry.nextConnection)
            if registry.callers[sender] == nil {
                // Followed while it has subscriptions: its leaving ends them (`callerLeft`).
                guard call.keepFollowingCaller() else {
                    throw BrokerError(.busy, "the broker no longer follows this caller on the bus; subscribe again")
                }
                registry.nextConnection += 1
            }
            guard caller.count < Self.maxSubscriptionsPerCaller else {
                throw BrokerError(
                    .busy,
                    "this caller has \(Self.maxSubscriptionsPerCaller) subscriptions already; one subscription without 'clients' receives every client's signals"
                )
            }
            caller.pending += 1
            registry.callers[sender] = caller
            return caller.connection
        }
        let engine = engine
        let pid = peer.pid
        let id: String
        do {
            id = try await engine.subscribe(
                connection: connection, clients: clients,
                mayUse: { client in
                    // Unbound clients' signals are broadcast; only bound ones come this way.
                    guard let config = engine.config(for: client), !config.peers.isEmpty else { return false }
                    return PeerBinding.mayUse(config, pid: pid)
                },
                send: { [self] change in emit(change, to: sender) })
        } catch {
            registry.withLock { registry in
                if registry.callers[sender]?.connection == connection { registry.callers[sender]?.pending -= 1 }
                if registry.callers[sender]?.count == 0 { forget(sender, in: &registry) }
            }
            throw error
        }
        let kept = registry.withLock { registry -> Bool in
            guard registry.callers[sender]?.connection == connection else { return false }
            registry.callers[sender]?.pending -= 1
            registry.callers[sender]?.subscriptions.insert(id)
            return true
        }
        if !kept { _ = await engine.unsubscribe(id, connection: connection) }
        // It left while subscribing: `callerLeft` may have run before the subscription was kept.
        if call.callerLeft { callerLeft(sender) }
        return id
    }

    private func unsubscribe(_ call: DBusMethodCall) async throws {
        guard case .string(let id)? = call.arguments.first else { throw RPCError.invalidParams("a subscription id") }
        let sender = call.caller.uniqueName
        let connection = registry.withLock { registry -> UInt64? in
            guard registry.callers[sender]?.subscriptions.remove(id) != nil else { return nil }
            let connection = registry.callers[sender]?.connection
            if registry.callers[sender]?.count == 0 { forget(sender, in: &registry) }
            return connection
        }
        guard let connection, await engine.unsubscribe(id, connection: connection) else {
            throw RPCError.invalidParams("no subscription '\(id)' of this caller")
        }
    }

    /// Drops `sender`'s entry and the bus's hold on it (taken with the entry, in `subscribe`), in the
    /// registry's lock so that the two go together.
    private func forget(_ sender: String, in registry: inout Registry) {
        registry.callers[sender] = nil
        bus.withLock { $0 }?.letGo(of: sender)
    }

    /// A caller left the bus (nil: the bus went away, with every caller): its subscriptions end.
    private func callerLeft(_ name: String?) {
        let cancelled = calls.cancelAll { name == nil || $0.sender == name }
        if cancelled > 0 {
            logger.debug(
                "D-Bus calls cancelled: their caller left the bus",
                ["dbus.sender": name ?? "(the bus closed)", "dbus.calls": "\(cancelled)"])
        }
        let (connections, count) = registry.withLock { registry -> ([UInt64], Int) in
            if let name {
                let caller = registry.callers[name]
                if caller != nil { forget(name, in: &registry) }
                return (caller.map { [$0.connection] } ?? [], caller?.count ?? 0)
            }
            defer { for sender in registry.callers.keys { forget(sender, in: &registry) } }
            return (registry.callers.values.map(\.connection), registry.total)
        }
        guard !connections.isEmpty else { return }
        logger.debug(
            "D-Bus subscriptions ended: their caller left the bus",
            ["dbus.sender": name ?? "(the bus closed)", "dbus.subscriptions": "\(count)"])
        let engine = engine
        // A work item of the engine's WorkService (cancelled and awaited when the daemon stops), not a loose task.
        let queued = engine.work.submit { for connection in connections { await engine.connectionClosed(connection) } }
        if !queued {
            logger.warning(
                "D-Bus subscriptions of a caller that left could not be ended: the engine's work queue is stopped or full",
                ["dbus.sender": name ?? "(the bus closed)", "dbus.subscriptions": "\(count)"])
        }
    }
}
