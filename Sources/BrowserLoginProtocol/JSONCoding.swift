/// Codable to and from `JSONValue` without Foundation, so that the daemon does
/// not link it. The output is what Foundation's `JSONEncoder` with
/// `[.sortedKeys, .withoutEscapingSlashes]` writes, byte for byte, once
/// serialised (`JSONValue.serialized()`); the decoder accepts and refuses what
/// `JSONDecoder` does, with the same errors and coding paths
/// (Tests/BrowserLoginProtocolTests/JSONCodingTests.swift compares them):
///
/// - an integral finite `Double` is written as an integer (`1.0` as `1`), a
///   non-finite one is an `EncodingError.invalidValue`;
/// - a value that asks for no container is written as `{}`;
/// - an integer type decodes a JSON double only when it is exactly integral
///   and in range, a floating-point type decodes any number;
/// - `null` for a non-optional is `valueNotFound`, a missing member
///   `keyNotFound`, another JSON type `typeMismatch`, an integer out of range
///   `dataCorrupted`.
public enum JSONValueEncoder {
    public static func encode(_ value: some Encodable) throws -> JSONValue {
        let encoder = ValueEncoder(codingPath: [])
        try value.encode(to: encoder)
        return encoder.node?.value ?? .object([:])
    }

    /// Compact UTF-8 JSON text, byte for byte what Foundation's `JSONEncoder`
    /// writes with `[.sortedKeys, .withoutEscapingSlashes]` (U+007F unescaped),
    /// except that `-0.0` is written `0`.
    public static func serialize(_ value: some Encodable) throws -> [UInt8] {
        try encode(value).serializedForProtocol()
    }
}

public enum JSONValueDecoder {
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        if T.self == JSONValue.self, let same = value as? T { return same }
        return try T(from: ValueDecoder(value: value, codingPath: []))
    }
}

// MARK: - Encoding

/// A value being encoded: containers are references so that a nested container
/// handed out earlier still writes into its parent.
private final class EncodedNode {
    enum Content {
        case value(JSONValue)
        case object([String: EncodedNode])
        case array([EncodedNode])
    }
    var content: Content

    init(_ content: Content) { self.content = content }

    var value: JSONValue {
        switch content {
        case .value(let value): value
        case .object(let members): .object(members.mapValues(\.value))
        case .array(let elements): .array(elements.map(\.value))
        }
    }
}

private struct IndexKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(_ index: Int) {
        self.stringValue = "Index \(index)"
        self.intValue = index
    }
    init?(stringValue: String) {
        self.stringValue = stringValue
        self.intValue = nil
    }
    init?(intValue: Int) { self.init(intValue) }
}

private final class ValueEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    var node: EncodedNode?

    init(codingPath: [any CodingKey], node: EncodedNode? = nil) {
        self.codingPath = codingPath
        self.node = node
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let object: EncodedNode
        if let node, case .object = node.content {
            object = node
        } else if let node {
            node.content = .object([:])
            object = node
        } else {
            object = EncodedNode(.object([:]))
            node = object
        }
        return KeyedEncodingContainer(KeyedEncoder<Key>(node: object, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let array: EncodedNode
        if let node, case .array = node.content {
            array = node
        } else if let node {
            node.content = .array([])
            array = node
        } else {
            array = EncodedNode(.array([]))
            node = array
        }
        return UnkeyedEncoder(node: array, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleEncoder(encoder: self) }

    /// Sets this encoder's value.
    func store(_ value: JSONValue) {
        if let node { node.content = .value(value) } else { node = EncodedNode(.value(value)) }
    }

    static func json(_ value: some Encodable, at path: [any CodingKey]) throws -> EncodedNode {
        if let primitive = try primitive(value, at: path) { return EncodedNode(.value(primitive)) }
        let encoder = ValueEncoder(codingPath: path)
        try value.encode(to: encoder)
        return encoder.node ?? EncodedNode(.object([:]))
    }

    /// Standard library scalars without a round through their `encode(to:)`.
    static func primitive(_ value: some Encodable, at path: [any CodingKey]) throws -> JSONValue? {
        switch value {
        case let value as String: .string(value)
        case let value as Bool: .bool(value)
        case let value as Int: .integer(Int64(value))
        case let value as Int64: .integer(value)
        case let value as Double: try double(value, at: path)
        default: nil
        }
    }

    static func double(_ value: Double, at path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(
                value, EncodingError.Context(codingPath: path, debugDescription: "not a finite number"))
        }
        let text = value.description
        // `JSONEncoder` drops a trailing ".0": the text is then an integer.
        if text.hasSuffix(".0"), let integer = Int64(exactly: value) { return .integer(integer) }
        return .double(value)
    }

    static func float(_ value: Float, at path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(
                value, EncodingError.Context(codingPath: path, debugDescription: "not a finite number"))
        }
        // The shortest text of the Float, as `JSONEncoder` writes it.
        return try double(Double(value.description) ?? Double(value), at: path)
    }

    static func integer<I: BinaryInteger>(_ value: I, at path: [any CodingKey]) throws -> JSONValue {
        guard let exact = Int64(exactly: value) else {
            throw EncodingError.invalidValue(
                value, EncodingError.Context(codingPath: path, debugDescription: "integer out of the JSON range"))
        }
        return .integer(exact)
    }
}

private struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodedNode
    let codingPath: [any CodingKey]

    private func set(_ value: JSONValue, _ key: Key) { set(EncodedNode(.value(value)), key) }

    private func set(_ child: EncodedNode, _ key: Key) {
        guard case .object(var members) = node.content else { return }
        node.content = .value(.null)
        members[key.stringValue] = child
        node.content = .object(members)
    }

    mutating func encodeNil(forKey key: Key) throws { set(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        set(try ValueEncoder.double(value, at: codingPath + [key]), key)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        set(try ValueEncoder.float(value, at: codingPath + [key]), key)
    }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.integer(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        set(try ValueEncoder.integer(value, at: codingPath + [key]), key)
    }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        set(try ValueEncoder.integer(value, at: codingPath + [key]), key)
    }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        set(try ValueEncoder.json(value, at: codingPath + [key]), key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedNode(.object([:]))
        set(child, key)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = EncodedNode(.array([]))
        set(child, key)
        return UnkeyedEncoder(node: child, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { superEncoder(named: "super") }

    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key.stringValue, key) }

    private mutating func superEncoder(named name: String, _ key: (any CodingKey)? = nil) -> any Encoder {
        let child = EncodedNode(.object([:]))
        guard case .object(var members) = node.content else { return ValueEncoder(codingPath: codingPath) }
        node.content = .value(.null)
        members[name] = child
        node.content = .object(members)
        let path = codingPath + [key ?? IndexKey(stringValue: name)!]
        return ValueEncoder(codingPath: path, node: child)
    }
}

private struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let node: EncodedNode
    let codingPath: [any CodingKey]

    var count: Int {
        if case .array(let elements) = node.content { return elements.count }
        return 0
    }

    private func append(_ child: EncodedNode) {
        guard case .array(var elements) = node.content else { return }
        node.content = .value(.null)
        elements.append(child)
        node.content = .array(elements)
    }

    private var nextPath: [any CodingKey] { codingPath + [IndexKey(count)] }

    mutating func encodeNil() throws { append(EncodedNode(.value(.null))) }
    mutating func encode(_ value: Bool) throws { append(EncodedNode(.value(.bool(value)))) }
    mutating func encode(_ value: String) throws { append(EncodedNode(.value(.string(value)))) }
    mutating func encode(_ value: Double) throws {
        append(EncodedNode(.value(try ValueEncoder.double(value, at: nextPath))))
    }
    mutating func encode(_ value: Float) throws {
        append(EncodedNode(.value(try ValueEncoder.float(value, at: nextPath))))
    }
    mutating func encode(_ value: Int) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: Int8) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: Int16) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: Int32) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: Int64) throws { append(EncodedNode(.value(.integer(value)))) }
    mutating func encode(_ value: UInt) throws {
        append(EncodedNode(.value(try ValueEncoder.integer(value, at: nextPath))))
    }
    mutating func encode(_ value: UInt8) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: UInt16) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: UInt32) throws { append(EncodedNode(.value(.integer(Int64(value))))) }
    mutating func encode(_ value: UInt64) throws {
        append(EncodedNode(.value(try ValueEncoder.integer(value, at: nextPath))))
    }
    mutating func encode<T: Encodable>(_ value: T) throws { append(try ValueEncoder.json(value, at: nextPath)) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let path = nextPath
        let child = EncodedNode(.object([:]))
        append(child)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let path = nextPath
        let child = EncodedNode(.array([]))
        append(child)
        return UnkeyedEncoder(node: child, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let path = nextPath
        let child = EncodedNode(.object([:]))
        append(child)
        return ValueEncoder(codingPath: path, node: child)
    }
}

private struct SingleEncoder: SingleValueEncodingContainer {
    let encoder: ValueEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    mutating func encodeNil() throws { encoder.store(.null) }
    mutating func encode(_ value: Bool) throws { encoder.store(.bool(value)) }
    mutating func encode(_ value: String) throws { encoder.store(.string(value)) }
    mutating func encode(_ value: Double) throws { encoder.store(try ValueEncoder.double(value, at: codingPath)) }
    mutating func encode(_ value: Float) throws { encoder.store(try ValueEncoder.float(value, at: codingPath)) }
    mutating func encode(_ value: Int) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: Int8) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: Int16) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: Int32) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: Int64) throws { encoder.store(.integer(value)) }
    mutating func encode(_ value: UInt) throws { encoder.store(try ValueEncoder.integer(value, at: codingPath)) }
    mutating func encode(_ value: UInt8) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { encoder.store(.integer(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { encoder.store(try ValueEncoder.integer(value, at: codingPath)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = try ValueEncoder.json(value, at: codingPath)
        if let node = encoder.node { node.content = child.content } else { encoder.node = child }
    }
}

// MARK: - Decoding

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw Self.mismatch([String: JSONValue].self, value, codingPath)
        }
        return KeyedDecodingContainer(KeyedDecoder<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw Self.mismatch([JSONValue].self, value, codingPath) }
        return UnkeyedDecoder(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleDecoder(decoder: self) }

    static func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
        if value == .null {
            return .valueNotFound(
                type, DecodingError.Context(codingPath: path, debugDescription: "Cannot get \(type) -- found null value instead"))
        }
        return .typeMismatch(
            type, DecodingError.Context(codingPath: path, debugDescription: "Expected to decode \(type) but found another type"))
    }

    static func decode<T: Decodable>(_ type: T.Type, _ value: JSONValue, _ path: [any CodingKey]) throws -> T {
        if T.self == String.self || T.self == Bool.self {
            switch value {
            case .string(let string): if let string = string as? T { return string }
            case .bool(let bool): if let bool = bool as? T { return bool }
            default: break
            }
            throw mismatch(type, value, path)
        }
        if T.self == JSONValue.self, let same = value as? T { return same }
        return try T(from: ValueDecoder(value: value, codingPath: path))
    }

    static func integer<I: FixedWidthInteger>(_ type: I.Type, _ value: JSONValue, _ path: [any CodingKey]) throws -> I {
        let exact: I?
        switch value {
        case .integer(let integer): exact = I(exactly: integer)
        case .double(let double): exact = I(exactly: double)
        default: throw mismatch(type, value, path)
        }
        guard let exact else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: path, debugDescription: "Number does not fit in \(type)."))
        }
        return exact
    }

    static func double(_ value: JSONValue, _ path: [any CodingKey]) throws -> Double {
        switch value {
        case .integer(let integer): return Double(integer)
        case .double(let double): return double
        default: throw mismatch(Double.self, value, path)
        }
    }
}

private struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> JSONValue {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key,
                DecodingError.Context(
                    codingPath: codingPath, debugDescription: "No value associated with key \(key.stringValue)."))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key) == .null }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        try ValueDecoder.decode(type, member(key), codingPath + [key])
    }
    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        try ValueDecoder.decode(type, member(key), codingPath + [key])
    }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try ValueDecoder.double(member(key), codingPath + [key])
    }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        Float(try ValueDecoder.double(member(key), codingPath + [key]))
    }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
        try ValueDecoder.integer(type, member(key), codingPath + [key])
    }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try ValueDecoder.decode(type, member(key), codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: member(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: member(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: members["super"] ?? .null, codingPath: codingPath + [IndexKey(stringValue: "super")!])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next(_ type: Any.Type) throws -> (JSONValue, [any CodingKey]) {
        let path = codingPath + [IndexKey(currentIndex)]
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type, DecodingError.Context(codingPath: path, debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return (elements[currentIndex], path)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { _ = try next(JSONValue.self); return false }
        if elements[currentIndex] == .null {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try decode(value: type) }
    mutating func decode(_ type: String.Type) throws -> String { try decode(value: type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try decode(value: type) }
    mutating func decode(_ type: Float.Type) throws -> Float {
        let (value, path) = try next(type)
        return Float(try ValueDecoder.double(value, path))
    }
    mutating func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try decode(value: type) }

    private mutating func decode<T: Decodable>(value type: T.Type) throws -> T {
        let (value, path) = try next(type)
        return try ValueDecoder.decode(type, value, path)
    }

    private mutating func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        let (value, path) = try next(type)
        return try ValueDecoder.integer(type, value, path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        let (value, path) = try next([String: JSONValue].self)
        return try ValueDecoder(value: value, codingPath: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (value, path) = try next([JSONValue].self)
        return try ValueDecoder(value: value, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (value, path) = try next(JSONValue.self)
        return ValueDecoder(value: value, codingPath: path)
    }
}

private struct SingleDecoder: SingleValueDecodingContainer {
    let decoder: ValueDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value == .null }

    func decode(_ type: Bool.Type) throws -> Bool { try ValueDecoder.decode(type, decoder.value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try ValueDecoder.decode(type, decoder.value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try ValueDecoder.double(decoder.value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { Float(try ValueDecoder.double(decoder.value, codingPath)) }
    func decode(_ type: Int.Type) throws -> Int { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try ValueDecoder.integer(type, decoder.value, codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try ValueDecoder.decode(type, decoder.value, codingPath) }
}
