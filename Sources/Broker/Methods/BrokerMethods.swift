import BrokerCore
import BrokerRPC

extension MethodTable {
    static let brokerMethods: [RPCMethod: MethodHandler] = [
        // At once while the vault's health is known (kept until the keyring signals a change).
        .brokerInfo: MethodHandler(immediate: { call in call.engine.knownInfoBytes() }) {
            call in try result(await call.engine.info())
        },
        // The clients this peer may use (the configuration never changes: always at once).
        .clientsList: MethodHandler(immediate: { call in call.engine.clientListBytes(mayUse: call.mayUse) }) {
            call in try result(call.engine.clientList(mayUse: call.mayUse))
        },
    ]
}
