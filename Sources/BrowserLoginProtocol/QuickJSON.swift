/// A parser for the plain JSON that RPC messages are made of, in front of
/// jansson: objects, arrays, strings without `\u` escapes, integers that fit
/// in 64 bits, `true`, `false`, `null`. It answers nil — and the caller asks
/// jansson, which then accepts or refuses with its reason — for anything
/// else: numbers with a fraction or an exponent, `\u` escapes, control
/// characters, invalid UTF-8, duplicate or canonically equal keys, nesting
/// deeper than `maximumDepth`, trailing bytes.
///
/// So it is only ever a shortcut: when it answers, jansson (with the flags
/// `JSONValue.parse` uses) would have answered the same value; when it does
/// not, jansson decides. `QuickJSONTests` checks this against jansson over a
/// generated corpus, so speed never costs strictness.
package enum QuickJSON {
    static let maximumDepth = 32

    package static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> JSONValue? {
        var parser = Parser(bytes: bytes)
        guard let value = parser.value(depth: 0) else { return nil }
        parser.skipWhitespace()
        // Not a ternary: `nil` there would be `JSONValue.null` (ExpressibleByNilLiteral).
        guard parser.index == bytes.count else { return nil }
        return value
    }

    /// The members of a JSON-RPC request object (nil: absent).
    package struct RequestMembers {
        package var id: JSONValue?
        package var jsonrpc: JSONValue?
        package var method: JSONValue?
        package var params: JSONValue?
        /// With `paramsAsMembers`: the members of an object `params`, in order
        /// (nil when absent), and `params` is nil.
        package var paramMembers: [(String, JSONValue)]?
    }

    /// At most this many members in `paramMembers` (their names are compared
    /// with each other: a longer list takes the dictionary of the whole parse).
    package static let maximumParamMembers = 16

    /// A request without a dictionary for its top level: `bytes` must be an
    /// object whose keys are only `id`, `jsonrpc`, `method` and `params`, each
    /// at most once, written without escapes (what clients send). Anything
    /// else — another key, a repeated one, a batch — is nil, and the caller
    /// parses the whole text (`parse`, then jansson): what this answers is
    /// what `parse` would have answered, its members picked.
    ///
    /// `paramsAsMembers`: `params` must be absent or an object, whose members
    /// come in `paramMembers` without a dictionary (a method's few params are
    /// looked up by comparing names); anything else is nil.
    package static func requestMembers(_ bytes: UnsafeBufferPointer<UInt8>, paramsAsMembers: Bool = false)
        -> RequestMembers?
    {
        var parser = Parser(bytes: bytes)
        guard let members = parser.requestObject(paramsAsMembers: paramsAsMembers) else { return nil }
        parser.skipWhitespace()
        guard parser.index == bytes.count else { return nil }
        return members
    }

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        /// Consumes `literal` when the input continues with it.
        mutating func take(_ literal: StaticString) -> Bool {
            guard bytes.count - index >= literal.utf8CodeUnitCount, matches(literal, at: index) else { return false }
            index += literal.utf8CodeUnitCount
            return true
        }

        /// An empty object or array: consumes `closing` when it comes first (after whitespace).
        mutating func closesAtOnce(_ closing: UInt8) -> Bool {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == closing else { return false }
            index += 1
            return true
        }

        /// After a member or an element: true at `closing`, false at a comma (either consumed), nil otherwise.
        mutating func next(closing: UInt8) -> Bool? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                return false
            case closing:
                index += 1
                return true
            default: return nil
            }
        }

        mutating func value(depth: Int) -> JSONValue? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                guard depth < QuickJSON.maximumDepth else { return nil }
                return object(depth: depth + 1)
            case UInt8(ascii: "["):
                guard depth < QuickJSON.maximumDepth else { return nil }
                return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string().map(JSONValue.string)
            case UInt8(ascii: "t"):
                guard take("true") else { return nil }
                return .bool(true)
            case UInt8(ascii: "f"):
                guard take("false") else { return nil }
                return .bool(false)
            case UInt8(ascii: "n"):
                guard take("null") else { return nil }
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return integer()
            default: return nil
            }
        }

        mutating func object(depth: Int) -> JSONValue? {
            index += 1  // {
            // Room for a request's four members without growing.
            var members: [String: JSONValue] = Dictionary(minimumCapacity: 4)
            if closesAtOnce(UInt8(ascii: "}")) { return .object(members) }
            while true {
                guard let (key, value) = member(depth: depth) else { return nil }
                // A repeated key (or one equal to another as a Swift string) is jansson's to judge.
                guard members.updateValue(value, forKey: key) == nil else { return nil }
                guard let closed = next(closing: UInt8(ascii: "}")) else { return nil }
                if closed { return .object(members) }
            }
        }

        /// `object`'s members in order, without a dictionary; nil as `object`
        /// is, and for more than `maximumParamMembers`.
        mutating func objectMembers(depth: Int) -> [(String, JSONValue)]? {
            index += 1  // {
            var members: [(String, JSONValue)] = []
            if closesAtOnce(UInt8(ascii: "}")) { return members }
            while true {
                guard members.count < QuickJSON.maximumParamMembers, let (key, value) = member(depth: depth) else {
                    return nil
                }
                guard !members.contains(where: { $0.0 == key }) else { return nil }
                members.append((key, value))
                guard let closed = next(closing: UInt8(ascii: "}")) else { return nil }
                if closed { return members }
            }
        }

        /// One `"name": value` member of an object.
        mutating func member(depth: Int) -> (String, JSONValue)? {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return nil }
            skipWhitespace()
            guard take(":"), let value = value(depth: depth) else { return nil }
            return (key, value)
        }

        /// See `requestMembers`.
        mutating func requestObject(paramsAsMembers: Bool) -> RequestMembers? {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { return nil }
            index += 1
            // Four locals, one struct at the end: assigning members of a struct
            // in place went through its value witnesses, eight calls a request.
            var id: JSONValue?
            var jsonrpc: JSONValue?
            var method: JSONValue?
            var params: JSONValue?
            var paramMembers: [(String, JSONValue)]?
            var seen: UInt8 = 0
            if closesAtOnce(UInt8(ascii: "}")) { return RequestMembers() }
            while true {
                skipWhitespace()
                guard let key = plainKey() else { return nil }
                skipWhitespace()
                guard take(":") else { return nil }
                // A repeated key is jansson's to judge (a member may be `null`: seen is kept apart).
                guard seen & key.rawValue == 0 else { return nil }
                seen |= key.rawValue
                if key == .params && paramsAsMembers {
                    // At depth 2, as `value(depth: 1)` would parse an object here.
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "{"),
                        let members = objectMembers(depth: 2)
                    else { return nil }
                    paramMembers = members
                } else {
                    // Depth 1, as `object` gives the members of a top-level object.
                    guard let member = value(depth: 1) else { return nil }
                    switch key {
                    case .id: id = member
                    case .jsonrpc: jsonrpc = member
                    case .method: method = member
                    case .params: params = member
                    }
                }
                guard let closed = next(closing: UInt8(ascii: "}")) else { return nil }
                if closed {
                    return RequestMembers(
                        id: id, jsonrpc: jsonrpc, method: method, params: params, paramMembers: paramMembers)
                }
            }
        }

        enum RequestKey: UInt8 {
            case id = 1
            case jsonrpc = 2
            case method = 4
            case params = 8
        }

        /// One of the four request keys, written plainly (no escape); nil for any other key.
        mutating func plainKey() -> RequestKey? {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            let start = index + 1
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
                if bytes[end] == UInt8(ascii: "\\") { return nil }
                end += 1
            }
            guard end < bytes.count else { return nil }
            let key: RequestKey
            switch end - start {
            case 2 where matches("id", at: start): key = .id
            case 7 where matches("jsonrpc", at: start): key = .jsonrpc
            case 6 where matches("method", at: start): key = .method
            case 6 where matches("params", at: start): key = .params
            default: return nil
            }
            index = end + 1
            return key
        }

        /// Whether the bytes at `start` are `literal` (the caller has checked there are enough).
        func matches(_ literal: StaticString, at start: Int) -> Bool {
            let text = literal.utf8Start
            for offset in 0..<literal.utf8CodeUnitCount where bytes[start + offset] != text[offset] { return false }
            return true
        }

        mutating func array(depth: Int) -> JSONValue? {
            index += 1  // [
            var elements: [JSONValue] = []
            if closesAtOnce(UInt8(ascii: "]")) { return .array(elements) }
            while true {
                guard let element = value(depth: depth) else { return nil }
                elements.append(element)
                guard let closed = next(closing: UInt8(ascii: "]")) else { return nil }
                if closed { return .array(elements) }
            }
        }

        /// A string with no `\u` escape and no control character, valid UTF-8.
        mutating func string() -> String? {
            index += 1  // "
            let start = index
            var escaped = false
            var ascii = true
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    if escaped { return unescape(raw) }
                    // ASCII is valid UTF-8 as it is: no validation (the common case: keys, methods, ids).
                    return ascii ? String(decoding: raw, as: UTF8.self) : String(validating: raw, as: UTF8.self)
                }
                if byte < 0x20 { return nil }
                if byte >= 0x80 { ascii = false }
                if byte == UInt8(ascii: "\\") {
                    escaped = true
                    index += 1
                    guard index < bytes.count else { return nil }
                    switch bytes[index] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                        UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        break
                    default: return nil  // \u (or an invalid escape): jansson's
                    }
                }
                index += 1
            }
            return nil
        }

        /// `raw` with its one-character escapes replaced, when it is valid UTF-8.
        func unescape(_ raw: UnsafeBufferPointer<UInt8>) -> String? {
            var out: [UInt8] = []
            out.reserveCapacity(raw.count)
            var i = 0
            while i < raw.count {
                var byte = raw[i]
                if byte == UInt8(ascii: "\\") {
                    i += 1
                    switch raw[i] {
                    case UInt8(ascii: "b"): byte = 0x08
                    case UInt8(ascii: "f"): byte = 0x0C
                    case UInt8(ascii: "n"): byte = 0x0A
                    case UInt8(ascii: "r"): byte = 0x0D
                    case UInt8(ascii: "t"): byte = 0x09
                    default: byte = raw[i]  // " \ /
                    }
                }
                out.append(byte)
                i += 1
            }
            return String(validating: out, as: UTF8.self)
        }

        /// `-?(0|[1-9][0-9]*)` within Int64; a fraction or exponent is jansson's.
        mutating func integer() -> JSONValue? {
            let negative = bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            let start = index
            var magnitude: UInt64 = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                let (times, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
                guard !overflow1, !overflow2 else { return nil }
                magnitude = sum
                index += 1
            }
            let digits = index - start
            guard digits > 0, !(digits > 1 && bytes[start] == UInt8(ascii: "0")) else { return nil }
            if index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): return nil
                default: break
                }
            }
            if negative {
                guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
                return .integer(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
            }
            guard magnitude <= UInt64(Int64.max) else { return nil }
            return .integer(Int64(magnitude))
        }
    }
}
