import BrokerCore
import Synchronization

/// A committed change, as subscribers receive it. The RPC side names and
/// encodes it (`login.changed`, `session.changed`; docs/rpc.md).
public enum BrokerEvent: Sendable, Equatable {
    case attemptChanged(AttemptView)
    case sessionChanged(SessionView)

    public var client: String {
        switch self {
        case .attemptChanged(let view): view.client
        case .sessionChanged(let view): view.client
        }
    }
}

/// One published change, handed to every subscriber: the RPC side encodes
/// it once (`encoded`), whichever subscriber asks first, and the others reuse that.
public final class PublishedChange: Sendable {
    public let event: BrokerEvent
    private let memo = Mutex<(any Sendable)?>(nil)

    init(_ event: BrokerEvent) { self.event = event }

    /// `encode(event)`, computed on the first call only (`encode` is the same for every caller).
    public func encoded<T: Sendable>(_ encode: (BrokerEvent) -> T) -> T {
        memo.withLock { memo in
            if let done = memo as? Encoded<T> { return done.value }
            let value = encode(event)
            memo = Encoded(value: value)
            return value
        }
    }

    /// A box, so that an optional encoding (nil: not encodable) is told from "not encoded yet".
    private struct Encoded<T: Sendable>: Sendable { let value: T }
}

/// Subscriptions to the engine's changes. Changes are published right after
/// they are committed, from the engine actor, so every subscriber sees them
/// in commit order.
final class EventHub: Sendable {
    struct Subscription {
        let id: String
        let connection: UInt64
        let clients: Set<String>?
        let mayUse: @Sendable (String) -> Bool
        let send: @Sendable (PublishedChange) -> Void
    }

    private let state = Mutex<(subscriptions: [String: Subscription], counter: UInt64)>(([:], 0))

    func subscribe(
        connection: UInt64, clients: Set<String>?, mayUse: @escaping @Sendable (String) -> Bool,
        send: @escaping @Sendable (PublishedChange) -> Void
    ) -> String {
        state.withLock { state in
            state.counter += 1
            let id = "sub-\(connection)-\(state.counter)"
            state.subscriptions[id] = Subscription(
                id: id, connection: connection, clients: clients, mayUse: mayUse, send: send)
            return id
        }
    }

    /// Removes a subscription of this connection; false when there is none.
    func unsubscribe(_ id: String, connection: UInt64) -> Bool {
        state.withLock { state in
            guard state.subscriptions[id]?.connection == connection else { return false }
            state.subscriptions[id] = nil
            return true
        }
    }

    func dropConnection(_ connection: UInt64) {
        state.withLock { $0.subscriptions = $0.subscriptions.filter { $0.value.connection != connection } }
    }

    func publish(_ event: BrokerEvent) {
        let client = event.client
        let change = PublishedChange(event)
        for subscription in state.withLock({ $0.subscriptions.values }).sorted(by: { $0.id < $1.id }) {
            if let clients = subscription.clients, !clients.contains(client) { continue }
            guard subscription.mayUse(client) else { continue }
            subscription.send(change)
        }
    }
}
