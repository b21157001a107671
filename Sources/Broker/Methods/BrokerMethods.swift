import BrokerCore
import BrokerRPC
import Engine
import Synchronization

extension MethodTable {
    static let brokerMethods: [RPCMethod: MethodHandler] = [
        // At once while the vault's health is known (kept until the keyring signals a change).
        .brokerInfo: MethodHandler(immediate: { call in call.answers.info(call.engine) }) {
            call in try result(await call.engine.info())
        },
        // The clients this peer may use (the configuration never changes: always at once, and made
        // once per connection).
        .clientsList: MethodHandler(immediate: { call in
            guard let socket = call.socket else { return call.answers.clientList(call.engine, mayUse: call.mayUse) }
            let peer = call.connectionPeer(socket)
            if let known = peer.clientList.withLock({ $0 }) { return known }
            let bytes = call.answers.clientList(call.engine, mayUse: call.mayUse)
            peer.clientList.withLock { $0 = bytes }
            return bytes
        }) {
            call in try result(call.engine.clientList(mayUse: call.mayUse))
        },
    ]
}

/// Serialized answers of the read-only methods, kept while what they show is
/// unchanged: the RPC side's, kept by the method table (the engine knows nothing of them).
final class CachedAnswers: Sendable {
    private struct Kept {
        var info: (health: VaultHealth, bytes: [UInt8])?
        var clientLists: [[Int]: [UInt8]] = [:]
    }
    private let kept = Mutex(Kept())

    /// `broker.info` serialized without waiting, while the vault's health is
    /// known; made once per change of that health (apps poll `broker.info`).
    func info(_ engine: BrokerEngine) -> [UInt8]? {
        guard let health = engine.vault.knownHealth() else { return nil }
        if let cached = kept.withLock({ $0.info }), cached.health == health { return cached.bytes }
        guard let bytes = try? JSONValue(encoding: engine.info(health)).serialized() else { return nil }
        kept.withLock { $0.info = (health, bytes) }
        return bytes
    }

    /// `clients.list` serialized for a caller who may use the clients
    /// `mayUse` lets through; made once per distinct set of clients.
    func clientList(_ engine: BrokerEngine, mayUse: (ClientConfig) -> Bool) -> [UInt8]? {
        // The positions of the clients let through (in `sortedClients`) name the answer.
        let clients = engine.sortedClients
        let key = clients.indices.filter { mayUse(clients[$0]) }
        if let bytes = kept.withLock({ $0.clientLists[key] }) { return bytes }
        guard let bytes = try? JSONValue(encoding: engine.clientList(mayUse: mayUse)).serialized() else { return nil }
        kept.withLock {
            // As many sets as there are distinct Peers= outcomes: few; bounded all the same.
            if $0.clientLists.count >= 64 { $0.clientLists.removeAll() }
            $0.clientLists[key] = bytes
        }
        return bytes
    }
}
