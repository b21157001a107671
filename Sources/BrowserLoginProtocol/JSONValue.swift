import CJansson

/// A JSON value as it is on the wire. Integers stay integers (`1` is
/// `.integer(1)`, `1.0` is `.double(1.0)`), and `true` is never `1`.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

/// Why bytes are not one JSON text. Carries jansson's position, never the input.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Line and column (1-based) where jansson stopped.
    public var line: Int
    public var column: Int
    /// jansson's short reason ("invalid token", "duplicate object key", …).
    public var reason: String

    public var description: String { "not valid JSON at line \(line), column \(column): \(reason)" }
}

/// Why a Codable value could not be bridged to or from a `JSONValue`. The
/// detail names a member path, never a value.
public enum JSONCodingError: Error, Sendable, Hashable, CustomStringConvertible {
    case encodingFailed(String)
    case decodingFailed(String)

    public var description: String {
        switch self {
        case .encodingFailed(let detail): "could not encode the value (\(detail))"
        case .decodingFailed(let detail): "could not decode the value (\(detail))"
        }
    }
}

// MARK: - Parsing (jansson)

extension JSONValue {
    /// Parses one JSON text of any type (`JSON_DECODE_ANY`). Duplicate object
    /// keys are refused (`JSON_REJECT_DUPLICATES`): a message whose meaning
    /// depends on which duplicate wins is not accepted. Strings may contain
    /// `\u0000` (`JSON_ALLOW_NUL`).
    /// Plain messages take `QuickJSON`, which answers only where jansson
    /// would answer the same; jansson decides everything else.
    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        if let quick = bytes.withContiguousStorageIfAvailable(QuickJSON.parse), let value = quick { return value }
        return try jansson(bytes)
    }

    /// Parses with jansson alone (`parse` without its shortcut).
    static func jansson(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        try withParsed(bytes) { JSONValue(jansson: $0) }
    }

    /// Parses like `parse` and lends jansson's tree to `body` (freed after it).
    package static func withParsed<T>(_ bytes: some Collection<UInt8>, _ body: (UnsafeMutablePointer<json_t>) -> T)
        throws(JSONParseError) -> T
    {
        let contiguous = Array(bytes)
        var error = json_error_t()
        let flags = Int(JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)
        let root: UnsafeMutablePointer<json_t>? = contiguous.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                // jansson reads `count` bytes; an empty buffer still needs a valid pointer.
                guard let base = chars.baseAddress else { return json_loadb("", 0, flags, &error) }
                return json_loadb(base, chars.count, flags, &error)
            }
        }
        guard let root else {
            let reason = withUnsafeBytes(of: error.text) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            throw JSONParseError(line: Int(error.line), column: Int(error.column), reason: reason)
        }
        defer { bl_json_decref(root) }
        return body(root)
    }

    /// Parses one JSON text given as a string.
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    /// Converts a borrowed jansson value (jansson bounds nesting at 2048 levels).
    package init(jansson json: UnsafeMutablePointer<json_t>) {
        switch json.pointee.type {
        case JSON_NULL: self = .null
        case JSON_TRUE: self = .bool(true)
        case JSON_FALSE: self = .bool(false)
        case JSON_INTEGER: self = .integer(Int64(json_integer_value(json)))
        case JSON_REAL: self = .double(json_real_value(json))
        case JSON_STRING:
            self = .string(Self.string(json_string_value(json), length: json_string_length(json)))
        case JSON_ARRAY:
            let count = json_array_size(json)
            var elements: [JSONValue] = []
            elements.reserveCapacity(count)
            for index in 0..<count {
                if let element = json_array_get(json, index) { elements.append(JSONValue(jansson: element)) }
            }
            self = .array(elements)
        case JSON_OBJECT:
            var members: [String: JSONValue] = [:]
            members.reserveCapacity(json_object_size(json))
            var iterator = json_object_iter(json)
            while let current = iterator {
                let key = Self.string(json_object_iter_key(current), length: json_object_iter_key_len(current))
                if let value = json_object_iter_value(current) { members[key] = JSONValue(jansson: value) }
                iterator = json_object_iter_next(json, current)
            }
            self = .object(members)
        default:
            self = .null
        }
    }

    private static func string(_ pointer: UnsafePointer<CChar>?, length: Int) -> String {
        guard let pointer else { return "" }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
            String(decoding: UnsafeBufferPointer(start: bytes, count: length), as: UTF8.self)
        }
    }
}

// MARK: - Serialising

extension JSONValue {
    /// Compact UTF-8 JSON with object keys sorted by their UTF-8 bytes.
    /// Slashes are not escaped; control characters, `"` and `\` are.
    /// A non-finite double (not representable in JSON) is written as `null`.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(to: &out)
        return out
    }

    /// `serialized()` as a string.
    public var jsonText: String { String(decoding: serialized(), as: UTF8.self) }

    /// As `serialized()`, but U+007F written as it is, as Foundation's
    /// `JSONEncoder` writes it: the protocol bodies (`ProtocolJSON`).
    package func serializedForProtocol() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(to: &out, escapingDelete: false)
        return out
    }

    package func write(to out: inout [UInt8], escapingDelete: Bool = true) {
        switch self {
        case .null: out.append(contentsOf: Self.nullBytes)
        case .bool(let value): out.append(contentsOf: value ? Self.trueBytes : Self.falseBytes)
        case .integer(let value): Self.writeInteger(value, to: &out)
        case .double(let value):
            if value.isFinite {
                // Swift's description is the shortest text that reads back to
                // the same double, and always valid JSON for finite values
                // ("1.0", "1e-07", "-0.0").
                out.append(contentsOf: value.description.utf8)
            } else {
                out.append(contentsOf: Self.nullBytes)
            }
        case .string(let value): Self.writeString(value, to: &out, escapingDelete: escapingDelete)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                element.write(to: &out, escapingDelete: escapingDelete)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, to: &out, escapingDelete: escapingDelete)
                out.append(UInt8(ascii: ":"))
                member.value.write(to: &out, escapingDelete: escapingDelete)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// The decimal digits of `value`, without making a string of them.
    private static func writeInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var rest = value.magnitude
        // 20 digits hold any UInt64 (Int64.min's magnitude has 19).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = digits.count
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            } while rest > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    private static let nullBytes = Array("null".utf8)
    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// `value` as a JSON string the way `serializedForProtocol()` writes it (`ProtocolJSONWriter`).
    package static func writeProtocolString(_ value: String, to out: inout [UInt8]) {
        writeString(value, to: &out, escapingDelete: false)
    }

    private static func writeString(_ value: String, to out: inout [UInt8], escapingDelete: Bool) {
        var value = value
        value.withUTF8 { writeString(utf8: $0, to: &out, escapingDelete: escapingDelete) }
    }

    /// Swift strings are always valid UTF-8, so bytes at or above 0x80 are
    /// copied as they are. Runs that need no escape are copied in one piece.
    private static func writeString(
        utf8 bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8], escapingDelete: Bool
    ) {
        out.append(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C || (byte == 0x7F && escapingDelete) else {
                index += 1
                continue
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            default:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
            index += 1
            runStart = index
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
        out.append(UInt8(ascii: "\""))
    }
}

// MARK: - Accessors

extension JSONValue {
    /// The member `key` of an object; nil for a missing member or a non-object.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members[key]
    }

    /// The element at `index` of an array; nil when out of range or not an array.
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
        return elements[index]
    }

    public var isNull: Bool { self == .null }

    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The integer; nil for a double, even an integral one.
    public var intValue: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    /// The number as a double (integers included).
    public var doubleValue: Double? {
        switch self {
        case .double(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { jsonText }
}

// MARK: - Literals

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

// MARK: - Codable

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The JSON form of a Codable value, as Foundation's `JSONEncoder` would
    /// write it (an integral `Double` becomes an integer; `JSONCoding.swift`).
    public init(encoding value: some Encodable) throws(JSONCodingError) {
        do {
            self = try JSONValueEncoder.encode(value)
        } catch let error as EncodingError {
            throw .encodingFailed(Self.describe(error))
        } catch {
            throw .encodingFailed("encoder failed")
        }
    }

    /// Decodes a Codable value from this JSON value (`JSONCoding.swift`).
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws(JSONCodingError) -> T {
        do {
            return try JSONValueDecoder.decode(T.self, from: self)
        } catch let error as DecodingError {
            throw .decodingFailed(Self.describe(error))
        } catch {
            throw .decodingFailed("decoder failed")
        }
    }

    private static func path(_ keys: [any CodingKey]) -> String {
        let joined = keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        return joined.isEmpty ? "value" : joined
    }

    /// The member path of a decoding error, never a value.
    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, let context): "missing '\(path(context.codingPath + [key]))'"
        case .typeMismatch(_, let context): "wrong type at '\(path(context.codingPath))'"
        case .valueNotFound(_, let context): "null at '\(path(context.codingPath))'"
        case .dataCorrupted(let context): "invalid value at '\(path(context.codingPath))'"
        @unknown default: "invalid"
        }
    }

    static func describe(_ error: EncodingError) -> String {
        switch error {
        case .invalidValue(_, let context): "invalid value at '\(path(context.codingPath))'"
        @unknown default: "invalid"
        }
    }
}
