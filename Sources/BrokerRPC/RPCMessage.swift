import BrowserLoginProtocol
import CJansson

/// A JSON-RPC error code. The standard codes have names; application
/// errors use `.applicationError` (-32000) and carry `data.code`.
public struct RPCErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }

    /// The message is not JSON (or its framing is broken).
    public static let parseError = RPCErrorCode(rawValue: -32700)
    /// The JSON is not a valid request object, a batch is empty or too large,
    /// or a message is over the size limit.
    public static let invalidRequest = RPCErrorCode(rawValue: -32600)
    public static let methodNotFound = RPCErrorCode(rawValue: -32601)
    public static let invalidParams = RPCErrorCode(rawValue: -32602)
    public static let internalError = RPCErrorCode(rawValue: -32603)
    /// The broker's application errors; `data.code` says which.
    public static let applicationError = RPCErrorCode(rawValue: -32000)

    public var description: String { String(rawValue) }
}

/// A JSON-RPC error object. `message` and `data` go to the client as they
/// are: never put a path, a token or an underlying error's text in them.
public struct RPCError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: RPCErrorCode
    public var message: String
    public var data: JSONValue?

    public init(code: RPCErrorCode, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public static func parseError(_ message: String = "Parse error") -> RPCError {
        RPCError(code: .parseError, message: message)
    }
    public static func invalidRequest(_ message: String = "Invalid Request") -> RPCError {
        RPCError(code: .invalidRequest, message: message)
    }
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(code: .methodNotFound, message: "Method not found: \(InputEcho.quote(method))")
    }
    public static func invalidParams(_ message: String = "Invalid params") -> RPCError {
        RPCError(code: .invalidParams, message: message)
    }
    public static func internalError(_ message: String = "Internal error") -> RPCError {
        RPCError(code: .internalError, message: message)
    }
    /// An application error: code -32000 with `data: {"code": code, ...extra}`.
    public static func application(
        code: String, message: String, extra: [String: JSONValue] = [:]
    ) -> RPCError {
        var data = extra
        data["code"] = .string(code)
        return RPCError(code: .applicationError, message: message, data: .object(data))
    }

    /// `data.code` of an application error.
    public var applicationCode: String? { data?["code"]?.stringValue }

    public var description: String { "JSON-RPC error \(code): \(message)" }

    /// The error object as it goes on the wire.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["code": .integer(code.rawValue), "message": .string(message)]
        if let data { members["data"] = data }
        return .object(members)
    }

    /// Reads an error object; nil when it is not one.
    public init?(json: JSONValue) {
        guard let code = json["code"]?.intValue, let message = json["message"]?.stringValue else { return nil }
        self.init(code: RPCErrorCode(rawValue: code), message: message, data: json["data"])
    }
}

/// How much of a caller's input an error message may repeat: at most
/// `limit` (64) bytes of any one string, whatever the method that answers.
/// An unknown 1 MiB method name or client id is quoted by its first bytes
/// and `…`, so that an error reply stays small (docs/rpc.md, Limits).
public enum InputEcho {
    public static let limit = 64
    /// An error message is never longer than this (a last bound, whatever it quotes).
    public static let maximumMessage = 1024

    /// `text` whole when it is at most `limit` bytes of UTF-8; else its
    /// first whole characters within `limit - 3` bytes, then `…`.
    public static func quote(_ text: String) -> String {
        guard text.utf8.count > limit else { return text }
        return prefix(text, bytes: limit - 3) + "…"
    }

    /// `message` with every string of `input` (names and values, at any
    /// depth) that is longer than `limit` bytes shortened as `quote` does
    /// where it appears, and the whole cut to `maximumMessage` bytes.
    public static func scrub(_ message: String, of input: [JSONValue]) -> String {
        var message = message
        var long: [String] = []
        func collect(_ value: JSONValue) {
            switch value {
            case .string(let s) where s.utf8.count > limit: long.append(s)
            case .array(let items): items.forEach(collect)
            case .object(let members):
                for (name, member) in members {
                    if name.utf8.count > limit { long.append(name) }
                    collect(member)
                }
            default: break
            }
        }
        input.forEach(collect)
        // Longest first: a string that holds a shorter one is replaced whole.
        for text in long.sorted(by: { $0.utf8.count > $1.utf8.count })
        where text.utf8.count <= message.utf8.count && message.contains(text) {
            message = message.replacing(text, with: quote(text))
        }
        guard message.utf8.count > maximumMessage else { return message }
        return prefix(message, bytes: maximumMessage - 3) + "…"
    }

    /// `error` with its message scrubbed of the request's long strings (`scrub`).
    public static func scrub(_ error: RPCError, of request: RPCRequest) -> RPCError {
        var error = error
        error.message = scrub(error.message, of: [.string(request.method), request.params ?? .null])
        return error
    }

    /// The first whole characters of `text` within `bytes` bytes of UTF-8.
    private static func prefix(_ text: String, bytes: Int) -> String {
        var count = 0
        var end = text.startIndex
        for character in text {
            let size = character.utf8.count
            guard count + size <= bytes else { break }
            count += size
            end = text.index(after: end)
        }
        return String(text[..<end])
    }
}

/// A request id: a string, an integer or null. (JSON-RPC also allows
/// numbers with a fraction; they are refused as an invalid request here.)
public enum RPCID: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case integer(Int64)
    case null

    public var json: JSONValue {
        switch self {
        case .string(let value): .string(value)
        case .integer(let value): .integer(value)
        case .null: .null
        }
    }

    /// The id of a `JSONValue`, nil when it is not a valid id.
    public init?(json: JSONValue) {
        switch json {
        case .string(let value): self = .string(value)
        case .integer(let value): self = .integer(value)
        case .null: self = .null
        default: return nil
        }
    }

    public var description: String { json.jsonText }

    /// A string id longer than `InputEcho.limit` bytes (refused: a reply repeats its id).
    var isLong: Bool {
        if case .string(let s) = self { s.utf8.count > InputEcho.limit } else { false }
    }
}

/// One valid request or notification.
public struct RPCRequest: Sendable, Hashable {
    /// nil for a notification (no `id` member): it gets no reply.
    public var id: RPCID?
    public var method: String
    /// `.object` (named), `.array` (positional) or nil (absent or `null`).
    /// The broker refuses positional params with `-32602`.
    public var params: JSONValue?

    public init(id: RPCID?, method: String, params: JSONValue? = nil) {
        self.id = id
        self.method = method
        self.params = params
    }

    /// The request as it goes on the wire.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["jsonrpc": "2.0", "method": .string(method)]
        if let id { members["id"] = id.json }
        if let params { members["params"] = params }
        return .object(members)
    }
}

/// A response: the result or the error for one id.
public struct RPCResponse: Sendable, Hashable {
    public var id: RPCID
    public var outcome: Result<JSONValue, RPCError>

    public init(id: RPCID, outcome: Result<JSONValue, RPCError>) {
        self.id = id
        self.outcome = outcome
    }

    public init(id: RPCID, result: JSONValue) { self.init(id: id, outcome: .success(result)) }
    public init(id: RPCID, error: RPCError) { self.init(id: id, outcome: .failure(error)) }

    public var json: JSONValue {
        switch outcome {
        case .success(let result): ["jsonrpc": "2.0", "id": id.json, "result": result]
        case .failure(let error): ["jsonrpc": "2.0", "id": id.json, "error": error.json]
        }
    }

    /// Reads a response object; nil when it is not one.
    public init?(json: JSONValue) {
        guard json["jsonrpc"] == "2.0", let rawID = json["id"], let id = RPCID(json: rawID) else { return nil }
        if let result = json["result"], json["error"] == nil {
            self.init(id: id, result: result)
        } else if let errorJSON = json["error"], json["result"] == nil, let error = RPCError(json: errorJSON) {
            self.init(id: id, error: error)
        } else {
            return nil
        }
    }
}

/// One element of an incoming message, as the server sees it.
public enum RPCIncomingElement: Sendable, Hashable {
    /// A valid request (or notification) to hand to the method table.
    case request(RPCRequest)
    /// An element that is not a valid request; answered with this error and id
    /// (the element's id when it could be read, else null).
    case invalid(id: RPCID, error: RPCError)
}

/// A decoded incoming message.
public enum RPCIncoming: Sendable, Hashable {
    /// One element (not in a batch).
    case single(RPCIncomingElement)
    /// A batch of 1…`RPCCodec.maxBatchSize` elements.
    case batch([RPCIncomingElement])
    /// The message as a whole is refused with one error (id null): not JSON,
    /// `[]`, or a batch that is too large.
    case rejected(RPCError)
}

/// A message a client receives.
public enum RPCClientMessage: Sendable, Hashable {
    case response(RPCResponse)
    case batch([RPCResponse])
    case notification(method: String, params: JSONValue?)
}

/// The JSON-RPC 2.0 codec: pure functions from bytes to messages and back.
public enum RPCCodec {
    /// A batch has at most this many elements; a larger one is one `-32600`.
    public static let maxBatchSize = 100

    /// Decodes one message received by a server.
    ///
    /// A plain message (`QuickJSON`: what clients send) is parsed straight into
    /// values, without a jansson tree (a request of the four members alone,
    /// without a dictionary for its top level); jansson decides everything else, and of
    /// each request only the four members that matter are converted (`params`
    /// in full). Either way the rules are those of `decodeIncoming(json:)`.
    public static func decodeIncoming(_ bytes: some Collection<UInt8>) -> RPCIncoming {
        bytes.withContiguousStorageIfAvailable(decodeIncoming) ?? decodeIncomingWithJansson(bytes)
    }

    /// `decodeIncoming` of contiguous bytes (not generic: the members are moved, not copied through witnesses).
    static func decodeIncoming(_ bytes: UnsafeBufferPointer<UInt8>) -> RPCIncoming {
        // A single request with only its four members: no dictionary for the top level.
        if let members = QuickJSON.requestMembers(bytes) {
            return .single(
                element(id: members.id, jsonrpc: members.jsonrpc, method: members.method, params: members.params))
        }
        if let value = QuickJSON.parse(bytes) { return decodeIncoming(json: value) }
        return decodeIncomingWithJansson(bytes)
    }

    /// A request as the fast path takes it (`RPCFastHandler`): `decodeIncoming`
    /// would decode the same text to `.single(.request(…))` with this id and
    /// method, and params absent, or an object of these members. Nil for
    /// anything else — a notification, a batch, params of another kind or
    /// with more members, any text QuickJSON leaves to the whole parse —
    /// which then takes `decodeIncoming` (the tests compare the two).
    package struct PlainRequest {
        package let id: RPCID
        package let method: String
        package let params: [(String, JSONValue)]
    }

    package static func plainRequest(_ bytes: [UInt8]) -> PlainRequest? {
        bytes.withUnsafeBufferPointer { buffer -> PlainRequest? in
            guard let members = QuickJSON.requestMembers(buffer, paramsAsMembers: true), let rawID = members.id,
                let id = RPCID(json: rawID), !id.isLong, members.jsonrpc == "2.0",
                case .string(let method)? = members.method
            else { return nil }
            return PlainRequest(id: id, method: method, params: members.paramMembers ?? [])
        }
    }

    /// `decodeIncoming` without its QuickJSON shortcut (the tests compare the two).
    static func decodeIncomingWithJansson(_ bytes: some Collection<UInt8>) -> RPCIncoming {
        do {
            return try JSONValue.withParsed(bytes) { root in decodeIncoming(jansson: root) }
        } catch {
            return .rejected(.parseError())
        }
    }

    private static func decodeIncoming(jansson root: UnsafeMutablePointer<json_t>) -> RPCIncoming {
        guard root.pointee.type == JSON_ARRAY else { return .single(element(jansson: root)) }
        let count = json_array_size(root)
        if count == 0 { return .rejected(.invalidRequest("Invalid Request: empty batch")) }
        if count > maxBatchSize {
            return .rejected(.invalidRequest("Invalid Request: a batch has at most \(maxBatchSize) elements"))
        }
        return .batch(
            (0..<count).map { index in
                json_array_get(root, index).map(element(jansson:))
                    ?? .invalid(id: .null, error: .invalidRequest("Invalid Request: not an object"))
            })
    }

    private static func element(jansson json: UnsafeMutablePointer<json_t>) -> RPCIncomingElement {
        guard json.pointee.type == JSON_OBJECT else {
            return .invalid(id: .null, error: .invalidRequest("Invalid Request: not an object"))
        }
        func member(_ key: StaticString) -> JSONValue? {
            key.withUTF8Buffer { name in
                name.withMemoryRebound(to: CChar.self) { chars in
                    json_object_getn(json, chars.baseAddress, chars.count).map(JSONValue.init(jansson:))
                }
            }
        }
        return element(id: member("id"), jsonrpc: member("jsonrpc"), method: member("method"), params: member("params"))
    }

    /// Decodes one parsed message received by a server.
    public static func decodeIncoming(json: JSONValue) -> RPCIncoming {
        guard case .array(let elements) = json else { return .single(element(json)) }
        if elements.isEmpty { return .rejected(.invalidRequest("Invalid Request: empty batch")) }
        if elements.count > maxBatchSize {
            return .rejected(.invalidRequest("Invalid Request: a batch has at most \(maxBatchSize) elements"))
        }
        return .batch(elements.map(element))
    }

    /// Validates one request object.
    public static func element(_ json: JSONValue) -> RPCIncomingElement {
        guard case .object(let members) = json else {
            return .invalid(id: .null, error: .invalidRequest("Invalid Request: not an object"))
        }
        return element(id: members["id"], jsonrpc: members["jsonrpc"], method: members["method"], params: members["params"])
    }

    /// Validates one request object from its members (nil: absent).
    private static func element(id rawID: JSONValue?, jsonrpc: JSONValue?, method: JSONValue?, params: JSONValue?)
        -> RPCIncomingElement
    {
        // The id to answer with: the element's own when it is valid, else null.
        var id: RPCID? = nil
        if let rawID {
            guard let valid = RPCID(json: rawID) else {
                return .invalid(id: .null, error: .invalidRequest("Invalid Request: id must be a string, an integer or null"))
            }
            guard !valid.isLong else {
                // Echoed in every reply: a string id is kept as short as any quote of input.
                return .invalid(
                    id: .null, error: .invalidRequest("Invalid Request: a string id is at most \(InputEcho.limit) bytes"))
            }
            id = valid
        }
        guard jsonrpc == "2.0" else {
            return .invalid(id: id ?? .null, error: .invalidRequest("Invalid Request: jsonrpc must be \"2.0\""))
        }
        guard case .string(let method)? = method else {
            return .invalid(id: id ?? .null, error: .invalidRequest("Invalid Request: method must be a string"))
        }
        switch params {
        case nil, .null?: break
        case .object?, .array?: return .request(RPCRequest(id: id, method: method, params: params))
        default:
            return .invalid(id: id ?? .null, error: .invalidRequest("Invalid Request: params must be an object or an array"))
        }
        return .request(RPCRequest(id: id, method: method, params: nil))
    }

    /// The bytes of a single response.
    public static func encode(_ response: RPCResponse) -> [UInt8] { response.json.serialized() }

    /// The bytes of a success response whose result is already serialized:
    /// the same bytes as `encode(RPCResponse(id:result:))` (keys in sorted order).
    /// Room is left for the framing's newline.
    public static func encode(id: RPCID, serializedResult result: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(result.count + 48)
        append(#"{"id":"#, to: &out)
        id.json.write(to: &out)
        append(#","jsonrpc":"2.0","result":"#, to: &out)
        out.append(contentsOf: result)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Appends a literal's bytes (one copy, not a walk of a string's UTF-8 view).
    private static func append(_ literal: StaticString, to out: inout [UInt8]) {
        literal.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    /// The bytes of a notification sent to a client.
    public static func encodeNotification(method: String, params: JSONValue?) -> [UInt8] {
        RPCRequest(id: nil, method: method, params: params).json.serialized()
    }

    /// Decodes one message received by a client; nil when it is neither a
    /// response, a batch of responses nor a notification.
    public static func decodeClientMessage(_ bytes: some Collection<UInt8>) -> RPCClientMessage? {
        guard let json = try? JSONValue.parse(bytes) else { return nil }
        switch json {
        case .array(let elements):
            var responses: [RPCResponse] = []
            for element in elements {
                guard let response = RPCResponse(json: element) else { return nil }
                responses.append(response)
            }
            return .batch(responses)
        case .object(let members):
            if members["id"] == nil, case .string(let method)? = members["method"], members["jsonrpc"] == "2.0" {
                let params: JSONValue? = members["params"] == .null ? nil : members["params"]
                return .notification(method: method, params: params)
            }
            return RPCResponse(json: json).map(RPCClientMessage.response)
        default:
            return nil
        }
    }
}
