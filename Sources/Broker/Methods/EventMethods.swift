import BrokerCore
import BrokerRPC
import Engine

extension MethodTable {
    /// Subscriptions one connection may have active at once (docs/rpc.md "Limits").
    static let maxSubscriptionsPerConnection = 32

    static let eventMethods: [RPCMethod: MethodHandler] = [
        // `session.changed` and `login.changed` of the clients this peer may use, on this connection.
        .eventsSubscribe: MethodHandler(["clients"]) { call in
            let params = SubscribeParams(clients: try call.params.stringArray("clients"))
            for client in params.clients ?? [] { try call.requireUse(client) }
            let connection = try call.requireSocket(.eventsSubscribe).connection
            guard connection.holdCount < maxSubscriptionsPerConnection else {
                throw BrokerError(
                    .busy,
                    "this connection has \(maxSubscriptionsPerConnection) event subscriptions already; one subscription without 'clients' receives every client's events"
                )
            }
            let engine = call.engine
            let id = try await engine.subscribe(
                connection: connection.id, clients: params.clients, mayUse: call.clientFilter(),
                send: { change in
                    // Encoded once per change, for every subscriber.
                    if let (method, params) = change.encoded(\.notification) {
                        connection.notify(method: method, params: params)
                    }
                })
            // Held: a subscribed connection is never closed to make room for others.
            connection.hold()
            connection.onClose { engine.work.submit { await engine.connectionClosed(connection.id) } }
            return try result(SubscribeResult(subscription: id))
        },
        .eventsUnsubscribe: MethodHandler(["subscription"]) { call in
            let socket = try call.requireSocket(.eventsUnsubscribe)
            let params = UnsubscribeParams(subscription: try call.params.string("subscription"))
            guard await call.engine.unsubscribe(params.subscription, connection: socket.connectionID) else {
                throw RPCError.invalidParams("no subscription '\(params.subscription)' on this connection")
            }
            socket.connection.release()
            return try result(EmptyResult())
        },
    ]
}

extension BrokerEvent {
    /// Its notification: `login.changed` with `{"attempt": A}`, or `session.changed` with `{"session": S}`.
    var notification: (method: String, params: JSONValue)? {
        switch self {
        case .attemptChanged(let view):
            (try? result(LoginChanged(attempt: view))).map { (RPCNotification.loginChanged.rawValue, $0) }
        case .sessionChanged(let view):
            (try? result(SessionChanged(session: view))).map { (RPCNotification.sessionChanged.rawValue, $0) }
        }
    }
}
