import BrokerCore
import BrokerRPC
import Engine

extension MethodTable {
    static let loginMethods: [RPCMethod: MethodHandler] = [
        .loginStart: MethodHandler([
            "client", "ephemeral", "openBrowser", "switchAccount", "flow", "activationToken", "addAccount", "loginHint",
        ]) { call in
            let p = call.params
            try call.requireUse(try p.string("client"))
            let params = LoginStartParams(
                client: try p.string("client"), ephemeral: try p.bool("ephemeral"),
                openBrowser: try p.bool("openBrowser"), switchAccount: try p.bool("switchAccount"),
                flow: try p.optionalString("flow"), activationToken: try activationToken(p),
                addAccount: try p.bool("addAccount"), loginHint: try p.optionalString("loginHint"))
            if let hint = params.loginHint, !LoginStartParams.isValidLoginHint(hint) {
                throw RPCError.invalidParams("'loginHint' must be an email address of at most 254 bytes")
            }
            if params.addAccount == true,
                let config = call.engine.sortedClients.first(where: { $0.id == params.client }),
                config.accounts != .multiple
            {
                throw RPCError.invalidParams(
                    "'addAccount' needs a client that holds several accounts: add 'Accounts=multiple' to \(config.file)")
            }
            var flow: SignInFlow?
            if let text = params.flow {
                guard let known = SignInFlow(rawValue: text) else {
                    throw RPCError.invalidParams("'flow' must be \"browser\" or \"device\"")
                }
                flow = known
            }
            return try result(
                await call.engine.start(
                    client: params.client, ephemeral: params.ephemeral ?? false,
                    openBrowser: params.openBrowser ?? true, switchAccount: params.switchAccount ?? false, flow: flow,
                    activationToken: params.activationToken, addAccount: params.addAccount ?? false,
                    loginHint: params.loginHint))
        },
        .loginResume: MethodHandler(["attemptId", "openBrowser", "activationToken"]) { call in
            let params = LoginResumeParams(
                attemptId: try call.params.string("attemptId"), openBrowser: try call.params.bool("openBrowser"),
                activationToken: try activationToken(call.params))
            try await call.requireAttemptUse()
            return try result(
                await call.engine.resume(
                    attemptId: params.attemptId, openBrowser: params.openBrowser ?? true,
                    activationToken: params.activationToken))
        },
        // Any program may deliver a callback (the URL handler does).
        .loginFinish: MethodHandler(["url"]) { call in
            let params = LoginFinishParams(url: try call.params.string("url"))
            return try result(await call.engine.finish(url: params.url))
        },
        .loginCancel: MethodHandler(["attemptId"]) { call in
            let params = AttemptParams(attemptId: try call.params.string("attemptId"))
            try await call.requireAttemptUse()
            return try result(await call.engine.cancel(attemptId: params.attemptId))
        },
        .loginStatus: MethodHandler(["attemptId", "reconcile"]) { call in
            try await call.requireAttemptUse()
            let params = LoginStatusParams(
                attemptId: try call.params.string("attemptId"), reconcile: try call.params.bool("reconcile"))
            return try result(await call.engine.status(attemptId: params.attemptId, reconcile: params.reconcile ?? true))
        },
        .loginAcknowledge: MethodHandler(["attemptId"]) { call in
            let params = AttemptParams(attemptId: try call.params.string("attemptId"))
            try await call.requireAttemptUse()
            return try result(await call.engine.acknowledge(attemptId: params.attemptId))
        },
        // The attempts of the clients this peer may use.
        .loginList: MethodHandler(["client", "states"]) { call in
            let client = try call.params.optionalString("client")
            if let client { try call.requireUse(client) }
            let states = try call.params.stringArray("states")?.map { name throws(RPCError) in
                guard let state = AttemptState(rawValue: name) else {
                    throw RPCError.invalidParams("unknown state '\(name)' in 'states'")
                }
                return state
            }
            let params = LoginListParams(client: client, states: states)
            let mayUse = call.clientFilter()
            return try result(try await call.engine.list(client: params.client, states: params.states, mayUse: mayUse))
        },
    ]

    /// The optional `activationToken`, checked as it goes into the browser's
    /// environment. The message never repeats the token.
    private static func activationToken(_ params: Params) throws(RPCError) -> String? {
        guard let token = try params.optionalString("activationToken") else { return nil }
        guard LoginStartParams.isValidActivationToken(token) else {
            throw RPCError.invalidParams(
                "'activationToken' must be 1 to \(LoginStartParams.maximumActivationTokenBytes) visible ASCII characters (no spaces or control characters), as the app's toolkit gives it"
            )
        }
        return token
    }
}
