import BrokerCore
import BrokerRPC

/// `events.subscribe`: `session.changed` and `login.changed` of the clients
/// this peer may use, on this connection.
struct EventsSubscribe: MethodHandler {
    static let method = RPCMethod.eventsSubscribe
    static let parameters: Set<String> = ["clients"]
    /// Subscriptions one connection may have active at once (docs/rpc.md "Limits").
    static let maxPerConnection = 32

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let params = SubscribeParams(clients: try call.params.stringArray("clients"))
        for client in params.clients ?? [] { try call.requireUse(client) }
        let connection = call.context.connection
        guard connection.holdCount < Self.maxPerConnection else {
            throw BrokerError(
                .busy,
                "this connection has \(Self.maxPerConnection) event subscriptions already; one subscription without 'clients' receives every client's events"
            )
        }
        let engine = call.engine
        let id = try await engine.subscribe(
            connection: connection.id, clients: params.clients, mayUse: await call.clientFilter(),
            send: { method, params in connection.notify(method: method, params: params) })
        // Held: a subscribed connection is never closed to make room for others.
        connection.hold()
        connection.onClose { Task { await engine.connectionClosed(connection.id) } }
        return try result(SubscribeResult(subscription: id))
    }
}

/// `events.unsubscribe`.
struct EventsUnsubscribe: MethodHandler {
    static let method = RPCMethod.eventsUnsubscribe
    static let parameters: Set<String> = ["subscription"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let params = UnsubscribeParams(subscription: try call.params.string("subscription"))
        guard await call.engine.unsubscribe(params.subscription, connection: call.context.connectionID) else {
            throw RPCError.invalidParams("no subscription '\(params.subscription)' on this connection")
        }
        call.context.connection.release()
        return try result(EmptyResult())
    }
}

/// The notification of an attempt's change: `login.changed` with `{"attempt": A}`.
func notification(forAttempt view: AttemptView) -> (method: String, params: JSONValue)? {
    (try? result(LoginChanged(attempt: view))).map { (RPCNotification.loginChanged.rawValue, $0) }
}

/// The notification of a session's change: `session.changed` with `{"session": S}`.
func notification(forSession view: SessionView) -> (method: String, params: JSONValue)? {
    (try? result(SessionChanged(session: view))).map { (RPCNotification.sessionChanged.rawValue, $0) }
}
