import BrokerCore
import BrokerRPC
import Foundation

/// `http.request` (docs/rpc.md "`http.request`"): every refusal of its params is `-32602`.
extension MethodTable {
    static let httpMethods: [RPCMethod: MethodHandler] = [
        .httpRequest: MethodHandler(["client", "method", "path", "query", "headers", "body", "bodyBase64", "timeoutMs"]) {
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
        var params = HTTPRequestParams(
            client: client, method: method, path: path, query: Dictionary(uniqueKeysWithValues: query),
            headers: Dictionary(uniqueKeysWithValues: headers), body: try p.optionalString("body"),
            bodyBase64: try p.optionalString("bodyBase64"))
        if params.body != nil && params.bodyBase64 != nil {
            throw RPCError.invalidParams("give 'body' or 'bodyBase64', not both")
        }
        var body = params.body.map { Array($0.utf8) }
        if let base64 = params.bodyBase64 {
            guard let data = Data(base64Encoded: base64) else { throw RPCError.invalidParams("'bodyBase64' is not base64") }
            body = Array(data)
        }
        if let body, body.count > AppRequestRules.maximumRequestBody {
            throw RPCError.invalidParams("the request body is larger than 1 MiB")
        }
        params.timeoutMs = try p.int("timeoutMs")
        let timeout = params.timeoutMs ?? AppRequestRules.defaultTimeout
        guard (1...AppRequestRules.maximumTimeout).contains(timeout) else {
            throw RPCError.invalidParams("'timeoutMs' must be 1 to 120000")
        }
        return AppRequest(
            client: client, method: method, path: path, query: query, headers: headers.map { HTTPHeader($0, $1) },
            body: body, timeoutMilliseconds: timeout)
    }

    /// `{status, headers, body | bodyBase64}`: text bodies as text, others in base64.
    static func encode(_ response: AppResponse) -> JSONValue {
        var headers: [String: String] = [:]
        for header in response.headers {
            let name = header.name.lowercased()
            headers[name] = headers[name].map { $0 + ", " + header.value } ?? header.value
        }
        var answer = HTTPResponseResult(status: response.status, headers: headers)
        let type = headers["content-type"]?.lowercased() ?? ""
        let textual =
            type.hasPrefix("text/") || type.contains("json") || type.contains("xml")
            || type.contains("x-www-form-urlencoded") || (type.isEmpty && response.body.isEmpty)
        if textual, let text = String(validating: response.body, as: UTF8.self) {
            answer.body = text
        } else {
            answer.bodyBase64 = Data(response.body).base64EncodedString()
        }
        // Built by hand: an 8 MiB body is not worth a round through JSONEncoder.
        var object: [String: JSONValue] = [
            "status": .integer(Int64(answer.status)), "headers": .object(answer.headers.mapValues { .string($0) }),
        ]
        object["body"] = answer.body.map { .string($0) }
        object["bodyBase64"] = answer.bodyBase64.map { .string($0) }
        return .object(object)
    }
}
