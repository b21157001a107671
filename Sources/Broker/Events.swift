import BrokerCore
import BrokerRPC

/// Subscriptions to `session.changed` and `login.changed`. Owned by the
/// engine actor: changes are published right after they are committed, from
/// the actor, so every subscriber sees them in commit order.
struct EventHub {
    struct Subscription {
        let id: String
        let connection: UInt64
        let clients: Set<String>?
        let mayUse: @Sendable (String) -> Bool
        let send: @Sendable (String, JSONValue) -> Void
    }

    private var subscriptions: [String: Subscription] = [:]
    private var counter: UInt64 = 0

    mutating func subscribe(
        connection: UInt64, clients: Set<String>?, mayUse: @escaping @Sendable (String) -> Bool,
        send: @escaping @Sendable (String, JSONValue) -> Void
    ) -> String {
        counter += 1
        let id = "sub-\(connection)-\(counter)"
        subscriptions[id] = Subscription(id: id, connection: connection, clients: clients, mayUse: mayUse, send: send)
        return id
    }

    /// Removes a subscription of this connection; false when there is none.
    mutating func unsubscribe(_ id: String, connection: UInt64) -> Bool {
        guard subscriptions[id]?.connection == connection else { return false }
        subscriptions[id] = nil
        return true
    }

    mutating func dropConnection(_ connection: UInt64) {
        subscriptions = subscriptions.filter { $0.value.connection != connection }
    }

    func publish(client: String, method: String, params: JSONValue) {
        for subscription in subscriptions.values.sorted(by: { $0.id < $1.id }) {
            if let clients = subscription.clients, !clients.contains(client) { continue }
            guard subscription.mayUse(client) else { continue }
            subscription.send(method, params)
        }
    }

    var count: Int { subscriptions.count }
}
