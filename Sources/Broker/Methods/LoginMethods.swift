import BrokerCore
import BrokerRPC

/// `login.start`.
struct LoginStart: MethodHandler {
    static let method = RPCMethod.loginStart
    static let parameters: Set<String> = ["client", "ephemeral", "openBrowser", "switchAccount"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let p = call.params
        try call.requireUse(try p.string("client"))
        let params = LoginStartParams(
            client: try p.string("client"), ephemeral: try p.bool("ephemeral"), openBrowser: try p.bool("openBrowser"),
            switchAccount: try p.bool("switchAccount"))
        return try result(
            await call.engine.start(
                client: params.client, ephemeral: params.ephemeral ?? false, openBrowser: params.openBrowser ?? true,
                switchAccount: params.switchAccount ?? false))
    }
}

/// `login.resume`.
struct LoginResume: MethodHandler {
    static let method = RPCMethod.loginResume
    static let parameters: Set<String> = ["attemptId", "openBrowser"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        try await call.requireAttemptUse()
        let params = LoginResumeParams(
            attemptId: try call.params.string("attemptId"), openBrowser: try call.params.bool("openBrowser"))
        return try result(await call.engine.resume(attemptId: params.attemptId, openBrowser: params.openBrowser ?? true))
    }
}

/// `login.finish`: any program may deliver a callback (the URL handler does).
struct LoginFinish: MethodHandler {
    static let method = RPCMethod.loginFinish
    static let parameters: Set<String> = ["url"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let params = LoginFinishParams(url: try call.params.string("url"))
        return try result(await call.engine.finish(url: params.url))
    }
}

/// `login.cancel`.
struct LoginCancel: MethodHandler {
    static let method = RPCMethod.loginCancel
    static let parameters: Set<String> = ["attemptId"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let params = AttemptParams(attemptId: try call.params.string("attemptId"))
        try await call.requireAttemptUse()
        return try result(await call.engine.cancel(attemptId: params.attemptId))
    }
}

/// `login.status`.
struct LoginStatus: MethodHandler {
    static let method = RPCMethod.loginStatus
    static let parameters: Set<String> = ["attemptId", "reconcile"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        try await call.requireAttemptUse()
        let params = LoginStatusParams(
            attemptId: try call.params.string("attemptId"), reconcile: try call.params.bool("reconcile"))
        return try result(await call.engine.status(attemptId: params.attemptId, reconcile: params.reconcile ?? true))
    }
}

/// `login.acknowledge`.
struct LoginAcknowledge: MethodHandler {
    static let method = RPCMethod.loginAcknowledge
    static let parameters: Set<String> = ["attemptId"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let params = AttemptParams(attemptId: try call.params.string("attemptId"))
        try await call.requireAttemptUse()
        return try result(await call.engine.acknowledge(attemptId: params.attemptId))
    }
}

/// `login.list`: the attempts of the clients this peer may use.
struct LoginList: MethodHandler {
    static let method = RPCMethod.loginList
    static let parameters: Set<String> = ["client", "states"]

    func handle(_ call: MethodCall) async throws -> JSONValue {
        let client = try call.params.optionalString("client")
        if let client { try call.requireUse(client) }
        let states = try call.params.stringArray("states")?.map { name throws(RPCError) in
            guard let state = AttemptState(rawValue: name) else {
                throw RPCError.invalidParams("unknown state '\(name)' in 'states'")
            }
            return state
        }
        let params = LoginListParams(client: client, states: states)
        let mayUse = await call.clientFilter()
        return try result(try await call.engine.list(client: params.client, states: params.states, mayUse: mayUse))
    }
}
