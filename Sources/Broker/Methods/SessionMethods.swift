import BrokerCore
import BrokerRPC
import Engine

extension MethodTable {
    static let sessionMethods: [RPCMethod: MethodHandler] = [
        // Answered from the engine's session board, at once, once the client's view is on it
        // (the current account's; a call that names an account is answered by the engine).
        .sessionGet: MethodHandler(
            ["client", "account"],
            immediate: { call in
                let client = try call.params.string("client")
                guard try call.params.optionalString("account") == nil else { return nil }
                try call.requireUse(client)
                return call.engine.sessionBoard.entry(client)?.bytes
            }
        ) { call in
            let params = ClientParams(
                client: try call.params.string("client"), account: try call.params.optionalString("account"))
            try call.requireUse(params.client)
            let view = try await call.engine.session(client: params.client, account: params.account)
            if params.account == nil, let json = call.engine.sessionBoard.entry(params.client)?.json { return json }
            return try result(view)
        },
        // The session once signed in, else `WAIT_TIMEOUT`.
        .sessionWait: MethodHandler(["client", "timeoutMs", "account"]) { call in
            let params = SessionWaitParams(
                client: try call.params.string("client"), timeoutMs: try call.params.int("timeoutMs"),
                account: try call.params.optionalString("account"))
            let timeout = params.timeoutMs ?? SessionWaitParams.defaultTimeoutMs
            guard (0...SessionWaitParams.maximumTimeoutMs).contains(timeout) else {
                throw RPCError.invalidParams("'timeoutMs' must be 0 to 300000")
            }
            try call.requireUse(params.client)
            guard
                let view = try await call.engine.waitForSession(
                    client: params.client, account: params.account, timeoutMilliseconds: timeout)
            else {
                throw BrokerError(
                    .waitTimeout,
                    "the client did not become signed in within \(timeout) ms; start a sign-in, or wait longer")
            }
            return try result(view)
        },
        .sessionSignOut: MethodHandler(["client", "account"]) { call in
            let params = ClientParams(
                client: try call.params.string("client"), account: try call.params.optionalString("account"))
            try call.requireUse(params.client)
            return try result(await call.engine.signOut(client: params.client, account: params.account))
        },
        // docs/rpc.md "Several accounts per client".
        .sessionList: MethodHandler(["client"]) { call in
            let params = SessionListParams(client: try call.params.string("client"))
            try call.requireUse(params.client)
            return try result(await call.engine.accounts(client: params.client))
        },
        .sessionUse: MethodHandler(["client", "account"]) { call in
            let params = SessionUseParams(
                client: try call.params.string("client"), account: try call.params.string("account"))
            try call.requireUse(params.client)
            return try result(await call.engine.useAccount(client: params.client, account: params.account))
        },
    ]
}
