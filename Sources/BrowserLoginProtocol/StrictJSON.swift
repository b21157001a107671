import CJansson

/// Why a request body is not acceptable (maps to `400 INVALID_REQUEST`).
public enum StrictJSONError: Error, Sendable, Equatable, CustomStringConvertible {
    case notJSON
    case notAnObject
    case duplicateMember
    case invalidMembers(String)

    public var description: String {
        switch self {
        case .notJSON: "the body is not JSON"
        case .notAnObject: "the body is not one JSON object"
        case .duplicateMember:
            "the body has a duplicate member (or a member name not in Unicode NFC, which may name another member)"
        case .invalidMembers(let detail): "a required member is missing or has the wrong type (\(detail))"
        }
    }
}

/// Decodes one JSON object strictly (docs/protocol.md §4): not JSON, not an
/// object, or a duplicate member anywhere is refused. The duplicate check is
/// jansson's `JSON_REJECT_DUPLICATES`; the typed decode is `JSONValueDecoder`'s.
/// Unknown members are ignored.
///
/// jansson compares member names byte for byte, the decoder (Swift strings)
/// by canonical equivalence: `"recoveryKey"` written with U+212A KELVIN SIGN
/// is another member to jansson and the same one to the decoder. So a member
/// name must also be in NFC (found while writing the strict-json fuzz
/// target; docs/reliability.md): then byte-equal and equivalent agree.
public enum StrictJSON {
    public static func validateObject(_ data: some Collection<UInt8>) throws(StrictJSONError) {
        try withValidObject(data) { _ in }
    }

    /// Validates like `validateObject` and lends jansson's tree to `body`.
    static func withValidObject<T>(
        _ data: some Collection<UInt8>, _ body: (UnsafeMutablePointer<json_t>) throws(StrictJSONError) -> T
    ) throws(StrictJSONError) -> T {
        var error = json_error_t()
        let bytes = Array(data)
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { raw -> OpaquePointer? in
            guard let base = raw.baseAddress else { return nil }
            return OpaquePointer(
                json_loadb(base.assumingMemoryBound(to: CChar.self), raw.count, Int(JSON_REJECT_DUPLICATES), &error))
        }
        guard let parsed else {
            let text = withUnsafeBytes(of: error.text) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            if text.contains("duplicate") { throw .duplicateMember }
            throw .notJSON
        }
        let root = UnsafeMutablePointer<json_t>(parsed)
        defer { bl_json_decref(root) }
        guard bl_json_is_object(root) != 0 else { throw .notAnObject }
        guard allMemberNamesAreNFC(root) else { throw .duplicateMember }
        return try body(root)
    }

    /// True when every member name of every object in the tree is in NFC.
    static func allMemberNamesAreNFC(_ root: UnsafeMutablePointer<json_t>) -> Bool {
        var pending = [root]
        while let json = pending.popLast() {
            switch json.pointee.type {
            case JSON_OBJECT:
                var iterator = json_object_iter(json)
                while let current = iterator {
                    if let key = json_object_iter_key(current), !isNFC(key, length: json_object_iter_key_len(current)) {
                        return false
                    }
                    if let value = json_object_iter_value(current) { pending.append(value) }
                    iterator = json_object_iter_next(json, current)
                }
            case JSON_ARRAY:
                for index in 0..<json_array_size(json) {
                    if let element = json_array_get(json, index) { pending.append(element) }
                }
            default: break
            }
        }
        return true
    }

    private static func isNFC(_ key: UnsafePointer<CChar>, length: Int) -> Bool {
        key.withMemoryRebound(to: UInt8.self, capacity: length) { pointer in
            let bytes = UnsafeBufferPointer(start: pointer, count: length)
            if bytes.allSatisfy({ $0 < 0x80 }) { return true }
            let name = String(decoding: bytes, as: UTF8.self)
            return name._nfcCodeUnits.elementsEqual(bytes)
        }
    }

    public static func decode<T: Decodable>(_ type: T.Type, from data: some Collection<UInt8>) throws(StrictJSONError) -> T {
        let value = try withValidObject(data) { JSONValue(jansson: $0) }
        do {
            return try JSONValueDecoder.decode(T.self, from: value)
        } catch let error as DecodingError {
            throw .invalidMembers(describe(error))
        } catch {
            throw .notJSON
        }
    }

    /// The member path of a decoding error, never a value.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ extra: CodingKey? = nil) -> String {
            let keys = context.codingPath + (extra.map { [$0] } ?? [])
            let joined = keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
            return joined.isEmpty ? "body" : joined
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing '\(path(context, key))'"
        case .typeMismatch(_, let context): return "wrong type at '\(path(context))'"
        case .valueNotFound(_, let context): return "null at '\(path(context))'"
        case .dataCorrupted(let context): return "invalid value at '\(path(context))'"
        @unknown default: return "invalid"
        }
    }
}

/// The writer of protocol bodies: stable key order, no escaped slashes
/// (what Foundation's `JSONEncoder` writes with `[.sortedKeys, .withoutEscapingSlashes]`).
public enum ProtocolJSON {
    public static func encode(_ value: some Encodable) throws -> [UInt8] {
        if let direct = value as? any ProtocolJSONWritable {
            var writer = ProtocolJSONWriter()
            direct.write(to: &writer)
            return writer.bytes
        }
        return try JSONValueEncoder.serialize(value)
    }
}
