import BrokerCore
import BrokerRPC

extension MethodTable {
    static let brokerMethods: [RPCMethod: MethodHandler] = [
        .brokerInfo: MethodHandler { call in try result(await call.engine.info()) },
        // The clients this peer may use.
        .clientsList: MethodHandler { call in
            let pid = call.peer.pid
            return try result(await call.engine.clientList { PeerBinding.mayUse($0, pid: pid) })
        },
    ]
}
