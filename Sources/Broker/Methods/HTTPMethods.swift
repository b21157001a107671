import BrokerCore
import BrokerRPC
import BrowserLoginProtocol
import Engine

/// `http.request` (docs/rpc.md "`http.request`"): every refusal of its params is `-32602`.
extension MethodTable {
    static let httpMethods: [RPCMethod: MethodHandler] = [
        .httpRequest: MethodHandler([
            "client", "method", "path", "query", "headers", "body", "bodyBase64", "timeoutMs", "account",
        ]) {
            call in
            let request = try appRequest(call.params)
            try call.requireUse(request.client)
            return encode(try await call.engine.appRequest(request))
        }
    ]

    /// Reads and checks the params, in the order of docs/rpc.md's rules.
    static func appRequest(_ p: Params) throws(RPCError) -> AppRequest {
        let client = try p.string("client")
        let method = try p.string("method")
        guard AppRequestRules.methods.contains(method) else {
            throw RPCError.invalidParams("'method' must be one of GET, HEAD, POST, PUT, PATCH, DELETE")
        }
        let path = try p.string("path")
        if let problem = AppRequestRules.pathProblem(path) { throw RPCError.invalidParams(problem) }
        let query = try p.stringObject("query") ?? []
        let headers =
            try p.stringObject("headers") { name, value throws(RPCError) in
                if let problem = AppRequestRules.headerProblem(name: name, value: value) {
                    throw RPCError.invalidParams(problem)
                }
            } ?? []
        // The members of `HTTPRequestParams`, read one by one for docs/rpc.md's messages.
        let text = try p.optionalString("body")
        let base64 = try p.optionalString("bodyBase64")
        if text != nil && base64 != nil { throw RPCError.invalidParams("give 'body' or 'bodyBase64', not both") }
        var body = text.map { Array($0.utf8) }
        if let base64 {
            guard let data = Base64.decode(base64) else { throw RPCError.invalidParams("'bodyBase64' is not base64") }
            body = data
        }
        if let body, body.count > AppRequestRules.maximumRequestBody {
            throw RPCError.invalidParams("the request body is larger than 1 MiB")
        }
        let timeout = try p.int("timeoutMs") ?? AppRequestRules.defaultTimeout
        guard (1...AppRequestRules.maximumTimeout).contains(timeout) else {
            throw RPCError.invalidParams("'timeoutMs' must be 1 to 120000")
        }
        return AppRequest(
            client: client, account: try p.optionalString("account"), method: method, path: path, query: query,
            headers: headers.map { HTTPHeader($0, $1) }, body: body, timeoutMilliseconds: timeout)
    }

    /// `{status, headers, body | bodyBase64}`: text bodies as text, others in base64.
    static func encode(_ response: HTTPResponse) -> JSONValue {
        var headers: [String: String] = [:]
        for header in response.headers {
            let name = header.name.lowercased()
            headers[name] = headers[name].map { $0 + ", " + header.value } ?? header.value
        }
        // `HTTPResponseResult`, built by hand: an 8 MiB body is not worth a round through JSONEncoder.
        var object: [String: JSONValue] = [
            "status": .integer(Int64(response.status)), "headers": .object(headers.mapValues { .string($0) }),
        ]
        let type = headers["content-type"]?.lowercased() ?? ""
        let textual =
            type.hasPrefix("text/") || type.contains("json") || type.contains("xml")
            || type.contains("x-www-form-urlencoded") || (type.isEmpty && response.body.isEmpty)
        if textual, let text = String(validating: response.body, as: UTF8.self) {
            object["body"] = .string(text)
        } else {
            object["bodyBase64"] = .string(Base64.encode(response.body))
        }
        return .object(object)
    }
}
