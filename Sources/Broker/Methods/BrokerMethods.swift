import BrokerCore
import BrokerRPC

extension MethodTable {
    static let brokerMethods: [RPCMethod: MethodHandler] = [
        // At once while the vault's health is known (kept until the keyring signals a change).
        .brokerInfo: MethodHandler(immediate: { call in call.engine.knownInfoBytes() }) {
            call in try result(await call.engine.info())
        },
        // The clients this peer may use (the configuration never changes: always at once, and made
        // once per connection).
        .clientsList: MethodHandler(immediate: { call in
            guard let socket = call.socket else { return call.engine.clientListBytes(mayUse: call.mayUse) }
            let peer = call.connectionPeer(socket)
            if let known = peer.clientList.withLock({ $0 }) { return known }
            let bytes = call.engine.clientListBytes(mayUse: call.mayUse)
            peer.clientList.withLock { $0 = bytes }
            return bytes
        }) {
            call in try result(call.engine.clientList(mayUse: call.mayUse))
        },
    ]
}
