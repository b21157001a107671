import BrokerCore
import BrokerRPC

extension MethodTable {
    static let brokerMethods: [RPCMethod: MethodHandler] = [
        .brokerInfo: MethodHandler { call in
            let info = await call.engine.info()
            return try result(
                BrokerInfo(
                    version: info.version, protocol: info.protocol, socket: info.socket, vault: info.vault,
                    vaultAvailable: info.vaultAvailable, vaultLocked: info.vaultLocked, vaultDetail: info.vaultDetail))
        },
        // The clients this peer may use.
        .clientsList: MethodHandler { call in
            let pid = call.context.peer.pid
            return try result(
                await call.engine.clientList { PeerBinding.mayUse($0, pid: pid) }.map {
                    ClientSummary(
                        id: $0.id, appName: $0.appName, server: $0.server, returnUrl: $0.returnUrl, policy: $0.policy)
                })
        },
    ]
}
