import Foundation
import Testing

@testable import BrowserLoginProtocol

extension JSONEncoder {
    /// Foundation's encoder configured as the protocol's writer was before `ProtocolJSON`: the reference
    /// the Foundation-free coders are compared with.
    static var protocolEncoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

/// Encodes `value` with `ProtocolJSON` and with Foundation's `JSONEncoder`: the bytes must be equal. Then
/// decodes those bytes with `StrictJSON`/`JSONValueDecoder` and with `JSONDecoder`: the values must be equal.
func expectSameAsFoundation<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation)
    throws
{
    let ours = try ProtocolJSON.encode(value)
    let foundation = [UInt8](try JSONEncoder.protocolEncoder.encode(value))
    #expect(
        String(decoding: ours, as: UTF8.self).debugDescription
            == String(decoding: foundation, as: UTF8.self).debugDescription, sourceLocation: sourceLocation)
    // The RPC path (`JSONValue(encoding:)`) was JSONEncoder then jansson.
    #expect(try JSONValue(encoding: value) == JSONValue.parse(foundation), sourceLocation: sourceLocation)
    let decoded = try JSONValue.parse(foundation).decode(T.self)
    #expect(decoded == (try JSONDecoder().decode(T.self, from: Data(foundation))), sourceLocation: sourceLocation)
    #expect(decoded == value, sourceLocation: sourceLocation)
}

/// Decodes `json` as `T` with `JSONValueDecoder` and with `JSONDecoder`: both succeed with equal values, or
/// both fail with the same `StrictJSON.describe` (error kind and member path).
func expectSameDecoding<T: Decodable & Equatable>(
    _ type: T.Type, _ json: String, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let foundation = Result { try JSONDecoder().decode(T.self, from: Data(json.utf8)) }
    let ours = Result { try JSONValueDecoder.decode(T.self, from: try JSONValue.parse(json)) }
    switch (ours, foundation) {
    case (.success(let a), .success(let b)): #expect(a == b, sourceLocation: sourceLocation)
    case (.failure(let a as DecodingError), .failure(let b as DecodingError)):
        // Foundation loses the path of a number out of range ("invalid value at 'body'"); ours names it.
        if case .dataCorrupted(let context) = b, context.codingPath.isEmpty, case .dataCorrupted = a { return }
        #expect(StrictJSON.describe(a) == StrictJSON.describe(b), "\(json)", sourceLocation: sourceLocation)
    default:
        Issue.record("\(json): ours \(ours), Foundation's \(foundation)", sourceLocation: sourceLocation)
    }
}

/// Every scalar and container shape the Codable coders handle.
private struct Shapes: Codable, Equatable {
    var text: String
    var flag: Bool
    var int: Int
    var int8: Int8
    var uint8: UInt8
    var int32: Int32
    var uint32: UInt32
    var int64: Int64
    var uint64: UInt64
    var double: Double
    var optional: String?
    var optionalInt: Int?
    var list: [String]
    var nested: [[Int]]
    var map: [String: Int]
    var timestamps: [Timestamp]
    var account: Account?
}

private struct AlwaysPresent: Codable, Equatable {
    var a: String?
    var b: Timestamp?
    var c: [Int]?
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(a, forKey: .a)
        try c.encode(b, forKey: .b)
        try c.encode(self.c, forKey: .c)
    }
}

private enum Choice: String, Codable { case one, two }

private struct Manual: Codable, Equatable {
    var kind: Choice
    var values: [Double]
    init(kind: Choice, values: [Double]) {
        self.kind = kind
        self.values = values
    }
    enum Keys: String, CodingKey { case kind, inner }
    enum Inner: String, CodingKey { case values }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        kind = try c.decode(Choice.self, forKey: .kind)
        var list = try c.nestedContainer(keyedBy: Inner.self, forKey: .inner).nestedUnkeyedContainer(forKey: .values)
        values = []
        while !list.isAtEnd { values.append(try list.decode(Double.self)) }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(kind, forKey: .kind)
        var inner = c.nestedContainer(keyedBy: Inner.self, forKey: .inner)
        var list = inner.nestedUnkeyedContainer(forKey: .values)
        for value in values { try list.encode(value) }
    }
}

@Suite struct JSONCodingTests {
    static let strings = [
        "", "plain", "a/b https://x.example/c?d=e&f", "quote \" backslash \\ end", "tab\tnew\nline\rcr",
        "\u{1}\u{8}\u{b}\u{c}\u{1f} \u{7f}", "café é \u{212A} 日本 🙂 \u{2028}\u{2029}", "<script>&'",
    ]

    @Test(arguments: strings)
    func stringsEncodeAsFoundationDoes(_ text: String) throws {
        try expectSameAsFoundation(Account(userId: text, email: text, displayName: text))
        try expectSameAsFoundation([text: text])
    }

    /// U+0000 (kept out of the arguments above: the test log stops at it).
    @Test func nulEncodesAsFoundationDoes() throws {
        let value = ["k": "a\u{0}b"]
        let ours = try ProtocolJSON.encode(value)
        let foundation = [UInt8](try JSONEncoder.protocolEncoder.encode(value))
        #expect(ours == foundation, "\(ours) \(foundation)")
        #expect(try JSONValue(encoding: value) == JSONValue.parse(foundation))
        #expect(try JSONValue.parse(foundation).decode([String: String].self) == value)
    }

    @Test func scalarsAndContainersEncodeAsFoundationDoes() throws {
        let t = Timestamp(rfc3339: "2026-11-30T16:20:38.123Z")!
        for double in [0, 1, -1, 1.5, 0.1, 1e-7, 1e15, 1e16, 1e20, 123_456.789, .pi, -2.5e-300, 4e300] {
            let value = Shapes(
                text: "x", flag: true, int: Int.min, int8: -128, uint8: 255, int32: Int32.max, uint32: UInt32.max,
                int64: Int64.max, uint64: UInt64(Int64.max), double: double, optional: nil, optionalInt: 0,
                list: ["b", "a"], nested: [[], [1, 2], [3]], map: ["b": 1, "a": 2, "B": 3, "aa": 4, "a_": 5, "é": 6],
                timestamps: [t, Timestamp(millisecondsSince1970: 0), Timestamp(millisecondsSince1970: -1)],
                account: Account(userId: "u", email: "e", displayName: "d"))
            try expectSameAsFoundation(value)
        }
        try expectSameAsFoundation(AlwaysPresent(a: nil, b: nil, c: nil))
        try expectSameAsFoundation(AlwaysPresent(a: "a", b: t, c: []))
        try expectSameAsFoundation(Manual(kind: .two, values: [1, 2.5, -3]))
        try expectSameAsFoundation([Choice.one, .two])
        try expectSameAsFoundation(["z": [Choice.one], "y": []])
    }

    @Test func wireTypesEncodeAsFoundationDoes() throws {
        let t = Timestamp(rfc3339: "2026-11-30T16:20:38.123Z")!
        try expectSameAsFoundation(
            CreateAttemptRequest(
                clientId: "notes", returnUrl: "com.example.notes:/callback", codeChallenge: "c", recoveryChallenge: "r"))
        try expectSameAsFoundation(
            CreateAttemptResponse(attemptId: "a", authorizeUrl: "https://l.example/b?x=1", expiresAt: t, issuer: "i"))
        try expectSameAsFoundation(RevokeByProofRequest(attemptId: "a/b", recoveryKey: "k"))
        try expectSameAsFoundation(StatusResponse(state: .expired, expiresAt: t))
        try expectSameAsFoundation(
            Receipt(attemptId: "att", sessionId: "ses", issuedAt: t, tokenDigest: "47DEQpj8HBSa-_TImW-5JCeuQeRkm5"))
    }

    /// Foundation writes `-0.0` as `-0`, which jansson reads as the integer 0: the RPC path (`JSONValue`) always
    /// wrote `0`, and so does `ProtocolJSON` now.
    @Test func negativeZeroIsZero() throws {
        #expect(try JSONValue(encoding: [-0.0]) == JSONValue.parse([UInt8](JSONEncoder.protocolEncoder.encode([-0.0]))))
        #expect(try ProtocolJSON.encode([-0.0]) == Array("[0]".utf8))
    }

    @Test func nonFiniteNumbersAndHugeIntegersAreRefused() {
        #expect(throws: EncodingError.self) { try ProtocolJSON.encode([Double.nan]) }
        #expect(throws: EncodingError.self) { try ProtocolJSON.encode(["x": Double.infinity]) }
        #expect(throws: EncodingError.self) { try ProtocolJSON.encode([UInt64.max]) }
    }

    @Test func decodingAgreesWithFoundation() throws {
        let bodies = [
            #"{"attemptId":"a","recoveryKey":"k"}"#, #"{"attemptId":"a"}"#, #"{"attemptId":1,"recoveryKey":"k"}"#,
            #"{"attemptId":null,"recoveryKey":"k"}"#, #"{"attemptId":true,"recoveryKey":"k"}"#, "[]", "1", "null",
            #""text""#,
        ]
        for body in bodies { try expectSameDecoding(RevokeByProofRequest.self, body) }
        let shapes = [
            #"{"a":null,"b":null,"c":null}"#, #"{}"#, #"{"a":"x","b":"2026-11-30T16:20:38.123Z","c":[1,2]}"#,
            #"{"a":1}"#, #"{"b":"2026-11-30T16:20:38Z"}"#, #"{"c":[1,"2"]}"#, #"{"c":[1.0,2e0]}"#, #"{"c":[1.5]}"#,
            #"{"c":[1e30]}"#, #"{"c":{}}"#, #"{"c":[null]}"#, #"{"a":["x"]}"#,
        ]
        for body in shapes { try expectSameDecoding(AlwaysPresent.self, body) }
        for body in [
            #"{"kind":"one","inner":{"values":[1,2.5]}}"#, #"{"kind":"three","inner":{"values":[]}}"#,
            #"{"kind":"one","inner":{"values":[true]}}"#, #"{"kind":"one","inner":{}}"#, #"{"kind":"one"}"#,
            #"{"kind":"one","inner":[]}"#,
        ] {
            try expectSameDecoding(Manual.self, body)
        }
        for body in ["[255,0]", "[256]", "[-1]", "[1.0]", "[1.5]", "[null]", #"["1"]"#] {
            try expectSameDecoding([UInt8].self, body)
        }
        for body in [#"{"a":1,"b":2}"#, #"{"a":"1"}"#, "{}", "[]"] { try expectSameDecoding([String: Int].self, body) }
        for body in ["[1, 2.5, -0.0, 1e300]", "[true]"] { try expectSameDecoding([Double].self, body) }
        for body in ["[null, 1]", "[1]"] { try expectSameDecoding([Int?].self, body) }
    }

    @Test func jsonValuesRoundTripThroughTheCoders() throws {
        let value: JSONValue = ["a": [1, 2.5, "x", nil, true], "b": ["c": [:]], "n": nil]
        #expect(try JSONValueDecoder.decode(JSONValue.self, from: value) == value)
        #expect(try JSONValue(encoding: value) == value)
        #expect(try JSONValue(encoding: ["x": value]).decode([String: JSONValue].self) == ["x": value])
    }
}
