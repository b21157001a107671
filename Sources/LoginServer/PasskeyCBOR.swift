import CCbor

/// A CBOR data item (RFC 8949) as WebAuthn uses it: integers, byte and text
/// strings, arrays, maps, booleans and null. Read with libcbor (`decode`);
/// tags, floats, undefined and indefinite-length strings are refused.
indirect enum CBORValue: Sendable, Equatable {
    case unsigned(UInt64)
    /// The negative integer -1 - n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    /// Pairs in their encoded order.
    case map([CBORPair])
    case bool(Bool)
    case null

    /// The integer value when it fits an `Int`.
    var int: Int? {
        switch self {
        case .unsigned(let n): n <= UInt64(Int.max) ? Int(n) : nil
        case .negative(let n): n < UInt64(Int.max) ? -1 - Int(n) : nil
        default: nil
        }
    }
    var bytes: [UInt8]? {
        if case .bytes(let b) = self { return b }
        return nil
    }
    var text: String? {
        if case .text(let t) = self { return t }
        return nil
    }

    /// A map's value under an integer key (COSE), or a text key (attestation objects).
    subscript(key: Int) -> CBORValue? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { $0.key.int == key }?.value
    }
    subscript(key: String) -> CBORValue? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { $0.key.text == key }?.value
    }
    var mapCount: Int? {
        if case .map(let pairs) = self { return pairs.count }
        return nil
    }
}

struct CBORPair: Sendable, Equatable {
    var key: CBORValue
    var value: CBORValue
}

enum CBOR {
    /// Nesting deeper than this is refused (WebAuthn's structures are 3 deep).
    static let maximumDepth = 16

    /// The first data item of `bytes` and how many bytes it took (the COSE
    /// key in authenticator data is followed by extensions); nil when the
    /// bytes do not start with a well-formed item of the kinds above.
    static func decodePrefix(_ bytes: [UInt8]) -> (value: CBORValue, length: Int)? {
        guard !bytes.isEmpty, bytes.withUnsafeBufferPointer({ bl_cbor_claims_fit($0.baseAddress, $0.count) }) != 0 else {
            return nil
        }
        var result = cbor_load_result()
        let item = bytes.withUnsafeBufferPointer { cbor_load($0.baseAddress, $0.count, &result) }
        guard let item else { return nil }
        defer {
            var owned: UnsafeMutablePointer<cbor_item_t>? = item
            cbor_decref(&owned)
        }
        guard bl_cbor_load_ok(&result) != 0, let value = convert(item, depth: 0) else { return nil }
        return (value, result.read)
    }

    /// Exactly one data item, nothing after it.
    static func decode(_ bytes: [UInt8]) -> CBORValue? {
        guard let (value, length) = decodePrefix(bytes), length == bytes.count else { return nil }
        return value
    }

    private static func convert(_ item: UnsafeMutablePointer<cbor_item_t>, depth: Int) -> CBORValue? {
        guard depth <= maximumDepth else { return nil }
        switch cbor_typeof(item) {
        case CBOR_TYPE_UINT: return .unsigned(cbor_get_int(item))
        case CBOR_TYPE_NEGINT: return .negative(cbor_get_int(item))
        case CBOR_TYPE_BYTESTRING:
            guard cbor_bytestring_is_definite(item) else { return nil }
            let count = cbor_bytestring_length(item)
            guard count > 0 else { return .bytes([]) }
            guard let handle = cbor_bytestring_handle(item) else { return nil }
            return .bytes(Array(UnsafeBufferPointer(start: handle, count: count)))
        case CBOR_TYPE_STRING:
            guard cbor_string_is_definite(item) else { return nil }
            let count = cbor_string_length(item)
            guard count > 0 else { return .text("") }
            guard let handle = cbor_string_handle(item) else { return nil }
            let utf8 = Array(UnsafeBufferPointer(start: handle, count: count))
            guard let text = String(validating: utf8, as: UTF8.self) else { return nil }
            return .text(text)
        case CBOR_TYPE_ARRAY:
            guard cbor_array_is_definite(item) else { return nil }
            let count = cbor_array_size(item)
            guard count > 0 else { return .array([]) }
            guard let handle = cbor_array_handle(item) else { return nil }
            var values: [CBORValue] = []
            for i in 0..<count {
                guard let element = handle[i], let value = convert(element, depth: depth + 1) else { return nil }
                values.append(value)
            }
            return .array(values)
        case CBOR_TYPE_MAP:
            guard cbor_map_is_definite(item) else { return nil }
            let count = cbor_map_size(item)
            guard count > 0 else { return .map([]) }
            guard let handle = cbor_map_handle(item) else { return nil }
            var pairs: [CBORPair] = []
            for i in 0..<count {
                guard let k = handle[i].key, let v = handle[i].value, let key = convert(k, depth: depth + 1),
                    let value = convert(v, depth: depth + 1)
                else { return nil }
                // A key given twice makes the map ambiguous (RFC 8949 §5.6).
                if pairs.contains(where: { $0.key == key }) { return nil }
                pairs.append(CBORPair(key: key, value: value))
            }
            return .map(pairs)
        case CBOR_TYPE_FLOAT_CTRL:
            // A float first: libcbor's cbor_is_null and cbor_is_bool assert (abort) on one
            // (found by fuzz-webauthn; Tests/Fuzz/regressions/webauthn).
            guard cbor_float_ctrl_is_ctrl(item) else { return nil }
            if cbor_is_null(item) { return .null }
            if cbor_is_bool(item) { return .bool(cbor_get_bool(item)) }
            return nil
        default: return nil
        }
    }
}
