import CJansson

/// A JSON value read strictly with jansson: duplicate member names are refused
/// (`JSON_REJECT_DUPLICATES`), `\u0000` in strings is refused, integers stay
/// integers (`1.0` and `1e3` are reals). Members are looked up by their exact
/// bytes, as jansson compared them, never by Unicode equivalence.
indirect enum JSON: Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)

    /// Parses one JSON text that must be an object; nil for anything else.
    static func parseObject(_ bytes: [UInt8]) -> JSONObject? {
        var error = json_error_t()
        let root: UnsafeMutablePointer<json_t>? = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                guard let base = chars.baseAddress else { return nil }
                return json_loadb(base, chars.count, Int(JSON_REJECT_DUPLICATES), &error)
            }
        }
        guard let root else { return nil }
        defer { bl_json_decref(root) }
        guard case .object(let object) = JSON(jansson: root) else { return nil }
        return object
    }

    /// Converts a borrowed jansson value (jansson bounds nesting depth).
    init(jansson json: UnsafeMutablePointer<json_t>) {
        switch json.pointee.type {
        case JSON_TRUE: self = .bool(true)
        case JSON_FALSE: self = .bool(false)
        case JSON_INTEGER: self = .integer(Int64(json_integer_value(json)))
        case JSON_REAL: self = .real(json_real_value(json))
        case JSON_STRING:
            self = .string(String(decoding: Self.bytes(json_string_value(json), json_string_length(json)), as: UTF8.self))
        case JSON_ARRAY:
            self = .array((0..<json_array_size(json)).compactMap { json_array_get(json, $0).map(JSON.init(jansson:)) })
        case JSON_OBJECT:
            var members: [[UInt8]: JSON] = [:]
            var iterator = json_object_iter(json)
            while let current = iterator {
                if let value = json_object_iter_value(current) {
                    members[Self.bytes(json_object_iter_key(current), json_object_iter_key_len(current))] = JSON(
                        jansson: value)
                }
                iterator = json_object_iter_next(json, current)
            }
            self = .object(JSONObject(members: members))
        default: self = .null
        }
    }

    private static func bytes(_ pointer: UnsafePointer<CChar>?, _ length: Int) -> [UInt8] {
        guard let pointer else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            Array(UnsafeBufferPointer(start: $0, count: length))
        }
    }
}

/// A JSON object whose members are keyed by their UTF-8 bytes.
struct JSONObject: Sendable {
    var members: [[UInt8]: JSON]

    subscript(name: String) -> JSON? { members[Array(name.utf8)] }

    /// A member that must be a string when present; `.malformed` otherwise.
    func string(_ name: String, in what: String) throws(JOSEError) -> String? {
        switch self[name] {
        case nil: return nil
        case .string(let value): return value
        default: throw JOSEError(.malformed, "the \(what) member '\(name)' is not a string")
        }
    }

    /// A boolean member (or the string "true" / "false"), nil when absent or
    /// null; any other value is false.
    func flag(_ name: String) -> Bool? {
        switch self[name] {
        case nil, .null?: return nil
        case .bool(let value): return value
        case .string(let text): return text == "true"
        default: return false
        }
    }

    /// A member that must be a JSON integer (no fraction, no exponent) when present.
    func integer(_ name: String, in what: String) throws(JOSEError) -> Int64? {
        switch self[name] {
        case nil: return nil
        case .integer(let value): return value
        default: throw JOSEError(.malformed, "the \(what) member '\(name)' is not an integer")
        }
    }
}

/// Byte-for-byte string equality (Swift's `==` compares by canonical equivalence).
func sameBytes(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }
