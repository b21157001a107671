import Testing

@testable import BrowserLoginProtocol

/// `QuickJSON` may only ever be a shortcut: on a generated corpus of JSON
/// texts and near-misses (duplicate and canonically equal keys, escapes,
/// control characters, invalid UTF-8, integers at the 64-bit edges, numbers
/// jansson reads as reals, deep nesting, and random byte mutations of all of
/// them), every text it accepts, jansson accepts with the same value, byte
/// for byte once serialized.
@Suite struct QuickJSONTests {
    /// SplitMix64: a fixed seed gives the same corpus on every run.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
        mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    }

    static let strings: [[UInt8]] =
        [
            "", "client", "com.example.notes", "é", "e\u{301}", "日本", "🔑", "a b", "x/y",
        ].map { Array("\"\($0)\"".utf8) }
        + [
            #""a\nb""#, #""q\"q""#, #""back\\slash""#, #""sl\/ash""#, #""\b\f\r\t""#, #""\u0041""#, #""\u0000""#,
            #""\ud83d\udd11""#, #""\ud800""#, #""\x""#, "\"tab\there\"", "\"nul\u{0}\"",
        ].map { Array($0.utf8) } + [
            [0x22, 0xC3, 0x28, 0x22],  // invalid continuation
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // a surrogate in UTF-8
            [0x22, 0xC0, 0xAF, 0x22],  // overlong
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // beyond U+10FFFF
            [0x22, 0x7F, 0x22],
        ]
    static let keys: [String] = ["client", "id", "jsonrpc", "method", "params", "é", "e\u{301}", "", "a\\\"b"]
    static let numbers: [String] = [
        "0", "-0", "1", "-1", "42", "01", "-", "1.0", "1.5", "1e3", "1E-2", "-0.0", "2.", ".5",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551616", "1e400", "123456789012345678901234567890",
    ]
    static let literals = ["true", "false", "null", "tru", "nul", "True", "nulll", "falsey"]
    static let whitespace: [[UInt8]] = [[], [0x20], [0x0A], [0x09, 0x0D], [0x0C], [0xC2, 0xA0]]

    static func value(_ r: inout Random, depth: Int) -> [UInt8] {
        var out: [UInt8] = []
        func ws(_ r: inout Random) { if r.chance(30) { out += r.pick(whitespace) } }
        switch depth > 6 ? r.below(3) : r.below(6) {
        case 0: out += r.pick(strings)
        case 1: out += Array(r.pick(numbers).utf8)
        case 2: out += Array(r.pick(literals).utf8)
        case 3, 4:
            out.append(UInt8(ascii: "{"))
            for i in 0..<r.below(4) {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                ws(&r)
                out += Array("\"\(r.pick(keys))\"".utf8)
                ws(&r)
                out.append(UInt8(ascii: ":"))
                out += value(&r, depth: depth + 1)
                ws(&r)
            }
            out.append(UInt8(ascii: "}"))
        default:
            out.append(UInt8(ascii: "["))
            for i in 0..<r.below(4) {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                ws(&r)
                out += value(&r, depth: depth + 1)
            }
            out.append(UInt8(ascii: "]"))
        }
        return out
    }

    static func mutate(_ bytes: inout [UInt8], _ r: inout Random) {
        let noise: [UInt8] = [0x00, 0x22, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x5C, 0x20, 0x30, 0x2D, 0xFF, 0x80]
        switch r.below(5) {
        case 0 where !bytes.isEmpty: bytes.remove(at: r.below(bytes.count))
        case 1: bytes.insert(r.pick(noise), at: r.below(bytes.count + 1))
        case 2 where !bytes.isEmpty: bytes.removeLast(r.below(bytes.count) + 1)
        case 3: bytes += r.pick([[0x20], [0x2C], [0x7D], Array("{}".utf8), [0x00]])
        default:
            if !bytes.isEmpty {
                let start = r.below(bytes.count)
                bytes.insert(contentsOf: bytes[start..<min(bytes.count, start + r.below(8))], at: r.below(bytes.count))
            }
        }
    }

    func quick(_ bytes: [UInt8]) -> JSONValue? { bytes.withUnsafeBufferPointer(QuickJSON.parse) }

    @Test func everyTextItAcceptsJanssonAcceptsTheSame() {
        var r = Random(state: 0x5EED_1234)
        var accepted = 0
        var refusedByJansson = 0
        let cases = 30_000
        for n in 0..<cases {
            var bytes = Self.value(&r, depth: 0)
            if n % 3 != 0 {
                for _ in 0...r.below(3) { Self.mutate(&bytes, &r) }
            }
            let jansson = try? JSONValue.jansson(bytes)
            if jansson == nil { refusedByJansson += 1 }
            guard let fast = quick(bytes) else { continue }
            accepted += 1
            #expect(jansson != nil, "QuickJSON accepted what jansson refuses: \(bytes)")
            #expect(jansson?.serialized() == fast.serialized(), "QuickJSON and jansson differ on \(bytes)")
        }
        // The corpus exercises both sides: the shortcut answers often, and refusals are common.
        #expect(accepted > cases / 10, "QuickJSON accepted only \(accepted) of \(cases)")
        #expect(refusedByJansson > cases / 5, "jansson refused only \(refusedByJansson) of \(cases)")
    }

    /// The requests apps send take the shortest path (a request's members, no dictionary for its top level).
    @Test func plainRequestsTakeTheShortestPath() {
        for text in [
            #"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"client":"com.example.notes"}}"#,
            #" { "method" : "broker.info", "jsonrpc" : "2.0", "id" : "a" } "#,
        ] {
            let method = Array(text.utf8).withUnsafeBufferPointer { QuickJSON.requestMembers($0)?.method }
            #expect(method == "session.get" || method == "broker.info", "\(text)")
        }
        for text in [#"{"jsonrpc":"2.0","id":1,"method":"m","extra":1}"#, #"[{"jsonrpc":"2.0","method":"m"}]"#] {
            let answered = Array(text.utf8).withUnsafeBufferPointer { QuickJSON.requestMembers($0) != nil }
            #expect(!answered, "\(text)")
        }
    }

    @Test func theBrokersOwnMessagesTakeTheShortcut() {
        let messages = [
            #"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"client":"com.example.notes"}}"#,
            #"{"jsonrpc":"2.0","id":"a-7","method":"login.start","params":{"client":"c","openBrowser":false}}"#,
            #"[{"jsonrpc":"2.0","id":1,"method":"broker.info"},{"jsonrpc":"2.0","method":"events.subscribe","params":{}}]"#,
            #" {"jsonrpc":"2.0","id":-9223372036854775808,"method":"x","params":[null,true,false,"a\"b\\c\n"]} "#,
        ]
        for text in messages {
            let fast = quick(Array(text.utf8))
            #expect(fast != nil, "\(text)")
            #expect(fast == (try? JSONValue.jansson(Array(text.utf8))))
        }
    }

    @Test func whatItLeavesToJanssonStillParses() throws {
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        for text in [deep, #"{"a":1.5}"#, #"{"a":"\u00e9"}"#, #"{"a":1e2}"#] {
            #expect(quick(Array(text.utf8)) == nil, "\(text)")
            #expect(try JSONValue.parse(Array(text.utf8)) == (try JSONValue.jansson(Array(text.utf8))))
        }
        #expect(throws: JSONParseError.self) { try JSONValue.parse(Array(#"{"a":1,"a":2}"#.utf8)) }
    }
}
