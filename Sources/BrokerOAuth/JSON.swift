import BrowserLoginProtocol

// The project's strict JSON facility (`StrictJSON`, jansson's duplicate check
// then a typed decode), and the protocol's writer for the metadata cache.

enum WireJSON {
    /// One JSON object, strictly (duplicate members refused), decoded as `T`.
    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(StrictJSONError) -> T {
        try StrictJSON.decode(T.self, from: bytes)
    }

    /// Checks that `bytes` are one JSON object, strictly.
    static func validateObject(_ bytes: [UInt8]) throws(StrictJSONError) {
        try StrictJSON.validateObject(bytes)
    }

    /// Stable JSON text (sorted keys, no escaped slashes).
    static func encode<T: Encodable>(_ value: T) -> String? {
        guard let data = try? ProtocolJSON.encode(value) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A non-negative whole number of seconds, written as a JSON number or, by
/// some providers, as a string of digits (`"3600"`).
struct WireSeconds: Decodable, Sendable, Equatable {
    var value: Int

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int.self) {
            guard number >= 0, number <= Int(Int32.max) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "out of range")
            }
            value = number
            return
        }
        let text = try container.decode(String.self)
        guard !text.isEmpty, text.utf8.count <= 9, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let number = Int(text)
        else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a number of seconds")
        }
        value = number
    }
}

/// A boolean claim written as a JSON boolean or as the string "true" /
/// "false" (some providers); any other value reads as false, never as an error.
struct WireFlag: Decodable, Sendable, Equatable {
    var value: Bool

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let flag = try? container.decode(Bool.self) {
            value = flag
        } else {
            value = (try? container.decode(String.self)) == "true"
        }
    }
}

/// A user id written as a string (`sub`) or a JSON integer (GitHub's `id`),
/// kept as its decimal text.
struct WireIdentifier: Decodable, Sendable, Equatable {
    var text: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            text = String(number)
            return
        }
        text = try container.decode(String.self)
    }
}
