import BrokerCore
import BrokerRPC

/// `broker.info`.
struct BrokerInfoMethod: MethodHandler {
    static let method = RPCMethod.brokerInfo
    static let parameters: Set<String> = []

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let info = await call.engine.info()
        return try result(
            BrokerInfo(
                version: info.version, protocol: info.protocol, socket: info.socket, vault: info.vault,
                vaultAvailable: info.vaultAvailable, vaultLocked: info.vaultLocked, vaultDetail: info.vaultDetail))
    }
}

/// `clients.list`: the clients this peer may use.
struct ClientsList: MethodHandler {
    static let method = RPCMethod.clientsList
    static let parameters: Set<String> = []

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let pid = call.context.peer.pid
        return try result(
            await call.engine.clientList { PeerBinding.mayUse($0, pid: pid) }.map {
                ClientSummary(id: $0.id, appName: $0.appName, server: $0.server, returnUrl: $0.returnUrl, policy: $0.policy)
            })
    }
}
