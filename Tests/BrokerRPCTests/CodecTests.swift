import Foundation
import Synchronization
import Testing

@testable import BrokerRPC

@Suite struct JSONValueTests {
    @Test(
        arguments: [
            ("1", JSONValue.integer(1)),
            ("1.0", .double(1.0)),
            ("true", .bool(true)),
            ("false", .bool(false)),
            ("null", .null),
            ("-9223372036854775808", .integer(.min)),
            ("\"a\\u0000b\"", .string("a\u{0}b")),
            ("\"\\u00e9\\ud83d\\ude00\"", .string("é😀")),
            ("[1,true,1.5,\"x\",null]", [1, true, 1.5, "x", nil]),
            ("{\"b\":{\"c\":[]},\"a\":1}", ["a": 1, "b": ["c": []]]),
            ("  {}  ", [:]),
        ] as [(String, JSONValue)])
    func parses(text: String, expected: JSONValue) throws {
        #expect(try JSONValue.parse(text) == expected)
    }

    @Test func keepsTrueAndOneApart() throws {
        let value = try JSONValue.parse("[true,1]")
        #expect(value[0] == .bool(true))
        #expect(value[1] == .integer(1))
        #expect(value[0] != value[1])
        #expect(value[0]?.intValue == nil)
        #expect(value[1]?.boolValue == nil)
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\":1,\"a\":2}", "nul", "1 2", "\"\\ud800\"", "99999999999999999999"])
    func refuses(text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    @Test func refusesInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
    }

    @Test(
        arguments: [
            (JSONValue.object(["b": 1, "a": ["x": "/", "é": nil], "A": false]), #"{"A":false,"a":{"x":"/","é":null},"b":1}"#),
            (.string("q\"\\\n\r\t\u{1}\u{7F}</"), #""q\"\\\n\r\t\u0001\u007f</""#),
            (.double(1.0), "1.0"),
            (.double(0.1), "0.1"),
            (.double(1e-7), "1e-07"),
            (.double(.infinity), "null"),
            (.integer(-42), "-42"),
            (.array([]), "[]"),
            ([1, [2, [3]]], "[1,[2,[3]]]"),
        ] as [(JSONValue, String)])
    func serialises(value: JSONValue, expected: String) {
        #expect(value.jsonText == expected)
    }

    @Test func roundTripsThroughJansson() throws {
        let value: JSONValue = [
            "int": 9_007_199_254_740_993, "neg": -1, "d": 3.25, "e": 1e300, "s": "snow ☃ \u{0} end",
            "arr": [nil, true, false, [:]], "nested": ["k": ["deep": [1.5]]],
        ]
        #expect(try JSONValue.parse(value.serialized()) == value)
    }

    @Test func accessors() {
        let value: JSONValue = ["s": "x", "i": 3, "d": 2.5, "b": true, "a": [1], "o": [:], "n": nil]
        #expect(value["s"]?.stringValue == "x")
        #expect(value["i"]?.intValue == 3)
        #expect(value["i"]?.doubleValue == 3)
        #expect(value["d"]?.doubleValue == 2.5)
        #expect(value["d"]?.intValue == nil)
        #expect(value["b"]?.boolValue == true)
        #expect(value["a"]?.arrayValue == [1])
        #expect(value["o"]?.objectValue == [:])
        #expect(value["n"]?.isNull == true)
        #expect(value["missing"] == nil)
        #expect(value["a"]?[5] == nil)
        #expect(JSONValue.integer(1)["x"] == nil)
    }

    struct View: Codable, Equatable {
        var client: String
        var status: String
        var count: Int
        var reason: String?
        var tags: [String]
    }

    @Test func bridgesCodable() throws {
        let view = View(client: "com.example.notes", status: "signedIn", count: 2, reason: nil, tags: ["a/b"])
        let json = try JSONValue(encoding: view)
        #expect(json["client"] == "com.example.notes")
        #expect(json["count"] == .integer(2))
        #expect(try json.decode(View.self) == view)
        let decoded: View = try json.decode()
        #expect(decoded == view)
    }

    @Test func decodingErrorNamesThePathNotTheValue() {
        let json: JSONValue = ["client": "secret-value", "status": 5, "count": 1, "tags": []]
        #expect(throws: JSONCodingError.decodingFailed("wrong type at 'status'")) { try json.decode(View.self) }
    }

    @Test func isCodableItself() throws {
        let value: JSONValue = ["a": [1, 2.5, "x", true, nil]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == value)
    }
}

/// The server's view of messages: codec plus dispatcher, without a socket.
@Suite struct CodecTests {
    /// echo → params; fail → application error; slow → sleeps; else method not found.
    static let perform: @Sendable (RPCRequest) async -> Result<JSONValue, RPCError> = { request in
        switch request.method {
        case "echo": return .success(request.params ?? "no params")
        case "fail": return .failure(.application(code: "ATTEMPT_EXPIRED", message: "Start again.", extra: ["attemptId": "a1"]))
        case "positional":
            if case .array? = request.params { return .failure(.invalidParams("named params only")) }
            return .success(true)
        case "crash": return .failure(.internalError())
        default: return .failure(.methodNotFound(request.method))
        }
    }

    static func reply(_ text: String) async throws -> JSONValue? {
        guard let bytes = await RPCDispatcher.reply(to: Array(text.utf8), perform: perform) else { return nil }
        return try JSONValue.parse(bytes)
    }

    /// (request, expected id, expected error code or nil for success)
    @Test(arguments: [
        (#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#, JSONValue.integer(1), Int64?.none),
        (#"{"jsonrpc":"2.0","id":"abc","method":"echo"}"#, "abc", nil),
        (#"{"jsonrpc":"2.0","id":null,"method":"echo"}"#, nil, nil),
        (#"{"jsonrpc":"2.0","id":2,"method":"echo","params":null}"#, 2, nil),
        (#"{"jsonrpc":"2.0","id":1,"method":"echo""#, nil, -32700),
        ("not json", nil, -32700),
        (#"{"jsonrpc":"2.0","id":1,"id":2,"method":"echo"}"#, nil, -32700),
        (#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#, 3, -32601),
        (#"{"jsonrpc":"2.0","id":4,"method":"positional","params":[1,2]}"#, 4, -32602),
        (#"{"jsonrpc":"2.0","id":5,"method":"crash"}"#, 5, -32603),
        (#"{"jsonrpc":"2.0","id":6,"method":"fail"}"#, 6, -32000),
        (#"{"jsonrpc":"1.0","id":7,"method":"echo"}"#, 7, -32600),
        (#"{"id":8,"method":"echo"}"#, 8, -32600),
        (#"{"jsonrpc":"2.0","id":9,"method":5}"#, 9, -32600),
        (#"{"jsonrpc":"2.0","id":10,"method":"echo","params":"x"}"#, 10, -32600),
        (#"{"jsonrpc":"2.0","id":1.5,"method":"echo"}"#, nil, -32600),
        (#"{"jsonrpc":"2.0","id":2.0,"method":"echo"}"#, nil, -32600),
        (#"{"jsonrpc":"2.0","id":{"x":1},"method":"echo"}"#, nil, -32600),
        (#"{"jsonrpc":"2.0","id":true,"method":"echo"}"#, nil, -32600),
        (#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#, nil, -32600),
        ("1", nil, -32600),
        (#""hello""#, nil, -32600),
        ("[]", nil, -32600),
    ])
    func single(request: String, id: JSONValue, code: Int64?) async throws {
        let response = try #require(try await Self.reply(request))
        #expect(response["jsonrpc"] == "2.0")
        #expect(response["id"] == id)
        if let code {
            #expect(response["error"]?["code"] == .integer(code))
            #expect(response["error"]?["message"]?.stringValue?.isEmpty == false)
            #expect(response["result"] == nil)
        } else {
            #expect(response["error"] == nil)
            #expect(response["result"] != nil)
        }
    }

    @Test func nullParamsAreAbsent() async throws {
        let response = try await Self.reply(#"{"jsonrpc":"2.0","id":1,"method":"echo","params":null}"#)
        #expect(response?["result"] == "no params")
        #expect(
            RPCCodec.decodeIncoming(Array(#"{"jsonrpc":"2.0","method":"m","params":null}"#.utf8))
                == .single(.request(RPCRequest(id: nil, method: "m", params: nil))))
    }

    /// Requests of every kind, plain or not, valid or not.
    static let corpus = [
        #"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"client":"com.example.notes"}}"#,
        #"{"jsonrpc":"2.0","id":"a","method":"broker.info","params":{}}"#,
        #"{"jsonrpc":"2.0","id":null,"method":"m"}"#, #"{"jsonrpc":"2.0","method":"m","params":[1,2,{"a":[]}]}"#,
        #"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"m"}"#, #"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
        #"{"jsonrpc":"2.0","id":true,"method":"m"}"#, #"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
        #"{"jsonrpc":"1.0","id":1,"method":"m"}"#, #"{"jsonrpc":"2.0","id":1,"method":7}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#, #"{"jsonrpc":"2.0","id":1,"method":"\u006d"}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m\n","params":{"é":"e\u0301"}}"#, #"{"jsonrpc":"2.0","id":1}"#,
        #"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"},3,[]]"#, "[]", "[1]", "{}", "null",
        "1", #""x""#, #"{"jsonrpc":"2.0","id":1,"method":"m"} x"#, #"{"jsonrpc":"2.0","id":1,"method":"m""#, "",
        " \n\t{ \"jsonrpc\" : \"2.0\" , \"id\" : 01 , \"method\" : \"m\" }",
        #"{"jsonrpc":"2.0","i\u0064":1,"method":"m"}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","extra":1}"#,
        #"{"jsonrpc":"2.0","id":null,"id":null,"method":"m"}"#, #"{"jsonrpc":"2.0","params":null,"params":{},"method":"m"}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","x":1,"x":2}"#, #"{"jsonrpc":"2.0","id":1,"method":"m",}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m"}}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"client":"é"}}"#,
        #"{"method":"m","params":{"a":{"b":{"c":[[[[]]]]}}},"jsonrpc":"2.0","id":"x"}"#,
        // What the fast path's params must turn away: repeated names (also as Swift strings), too many, other kinds.
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"é":1,"é":2}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"\u0061":1,"a":2}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"e\u0301":1}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"# + (0..<17).map { #""p\#($0)":\#($0)"# }.joined(separator: ",")
            + "}}",
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"# + (0..<16).map { #""p\#($0)":\#($0)"# }.joined(separator: ",")
            + "}}",
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","params":[]}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{}}"#, #"{"jsonrpc":"2.0","method":"m","params":{"a":1}}"#,
        #"{"params":{"client":"x"},"id":7,"method":"session.get","jsonrpc":"2.0"}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":{"a":1,"a":2}}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,}}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a"}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}"#, #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":01}}"#,
        #"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k\"q":"v\n","n":-0,"t":true,"z":null}}"#,
    ]

    /// Requests take QuickJSON when they are plain; the answer is the one jansson's tree gives, valid or not.
    @Test(arguments: corpus)
    func theShortcutDecodesAsJansson(_ text: String) {
        let bytes = Array(text.utf8)
        #expect(RPCCodec.decodeIncoming(bytes) == RPCCodec.decodeIncomingWithJansson(bytes), "\(text)")
    }

    /// The fast path's reading of a request (`plainRequest`: id, method, params
    /// members) is what the decoder reads: where it answers, the decoder has
    /// the same single request; where it does not, the decoder is left to.
    @Test(arguments: corpus)
    func theFastPathReadsRequestsAsTheDecoderDoes(_ text: String) {
        let bytes = Array(text.utf8)
        guard let plain = RPCCodec.plainRequest(bytes) else { return }
        guard case .single(.request(let request)) = RPCCodec.decodeIncomingWithJansson(bytes) else {
            Issue.record("the fast path took what is not a single request: \(text)")
            return
        }
        #expect(request.id == plain.id, "\(text)")
        #expect(request.method == plain.method, "\(text)")
        let names = plain.params.map(\.0)
        guard Set(names).count == names.count else {
            Issue.record("the fast path gave a name twice: \(text)")
            return
        }
        switch request.params {
        case nil: #expect(plain.params.isEmpty, "\(text)")
        case .object(let object)?:
            #expect(object == Dictionary(uniqueKeysWithValues: plain.params), "\(text)")
        default: Issue.record("the fast path took params that are not an object: \(text)")
        }
    }

    /// Plain requests of the kinds apps send do take the fast path.
    @Test func plainRequestsTakeTheFastPath() throws {
        let plain = try #require(
            RPCCodec.plainRequest(
                Array(#"{"jsonrpc":"2.0","id":3,"method":"session.get","params":{"client":"com.example.notes"}}"#.utf8)))
        #expect(plain.id == .integer(3))
        #expect(plain.method == "session.get")
        #expect(plain.params.count == 1 && plain.params[0].0 == "client" && plain.params[0].1 == "com.example.notes")
        #expect(RPCCodec.plainRequest(Array(#"{"jsonrpc":"2.0","id":"x","method":"broker.info"}"#.utf8))?.params.isEmpty == true)
        #expect(RPCCodec.plainRequest(Array(#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}"#.utf8)) == nil)
    }

    @Test func paramsKinds() {
        #expect(
            RPCCodec.element(["jsonrpc": "2.0", "id": 1, "method": "m", "params": [1]])
                == .request(RPCRequest(id: .integer(1), method: "m", params: [1])))
        #expect(
            RPCCodec.element(["jsonrpc": "2.0", "id": 1, "method": "m", "params": ["a": 1]])
                == .request(RPCRequest(id: .integer(1), method: "m", params: ["a": 1])))
    }

    @Test func applicationErrorCarriesData() async throws {
        let response = try #require(try await Self.reply(#"{"jsonrpc":"2.0","id":6,"method":"fail"}"#))
        #expect(
            response["error"] == [
                "code": -32000, "message": "Start again.", "data": ["code": "ATTEMPT_EXPIRED", "attemptId": "a1"],
            ])
        let error = try #require(RPCError(json: response["error"]!))
        #expect(error.applicationCode == "ATTEMPT_EXPIRED")
    }

    @Test(arguments: [
        #"{"jsonrpc":"2.0","method":"echo"}"#,
        #"{"jsonrpc":"2.0","method":"nope","params":{}}"#,
        #"{"jsonrpc":"2.0","method":"fail"}"#,
        #"[{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"nope"}]"#,
    ])
    func notificationsGetNoReply(request: String) async throws {
        #expect(try await Self.reply(request) == nil)
    }

    @Test func mixedBatch() async throws {
        let batch = """
            [{"jsonrpc":"2.0","id":1,"method":"echo","params":{"n":1}},
             {"jsonrpc":"2.0","method":"echo"},
             1,
             {"foo":"boo"},
             {"jsonrpc":"2.0","id":"x","method":"nope"},
             {"jsonrpc":"2.0","id":7,"method":5},
             {"jsonrpc":"2.0","id":8,"method":"fail"}]
            """
        let response = try #require(try await Self.reply(batch)?.arrayValue)
        #expect(response.count == 6)
        let byID = response.map { ($0["id"]!, $0["error"]?["code"]?.intValue) }
        #expect(byID.map(\.0) == [1, nil, nil, "x", 7, 8])
        #expect(byID.map(\.1) == [nil, -32600, -32600, -32601, -32600, -32000])
        #expect(response[0]["result"] == ["n": 1])
    }

    @Test func batchLimits() async throws {
        let element = #"{"jsonrpc":"2.0","id":1,"method":"echo"}"#
        let hundred = "[" + Array(repeating: element, count: 100).joined(separator: ",") + "]"
        #expect(try await Self.reply(hundred)?.arrayValue?.count == 100)
        let tooMany = "[" + Array(repeating: element, count: 101).joined(separator: ",") + "]"
        let response = try #require(try await Self.reply(tooMany))
        #expect(response["error"]?["code"] == -32600)
        #expect(response["id"] == .null)
    }

    @Test func batchOfInvalidElements() async throws {
        let response = try #require(try await Self.reply("[1,2,3]")?.arrayValue)
        #expect(response.count == 3)
        #expect(response.allSatisfy { $0["error"]?["code"] == -32600 && $0["id"] == .null })
    }

    @Test func batchRunsConcurrently() async throws {
        // Counts elements in flight at once, rather than timing the batch.
        let inFlight = Mutex((now: 0, most: 0))
        let perform: @Sendable (RPCRequest) async -> Result<JSONValue, RPCError> = { _ in
            inFlight.withLock {
                $0.now += 1
                $0.most = max($0.most, $0.now)
            }
            try? await Task.sleep(for: .milliseconds(200))
            inFlight.withLock { $0.now -= 1 }
            return .success(true)
        }
        let element = #"{"jsonrpc":"2.0","id":1,"method":"slow"}"#
        let batch = Array(("[" + Array(repeating: element, count: 20).joined(separator: ",") + "]").utf8)
        let reply = await RPCDispatcher.reply(to: batch, perform: perform)
        #expect(inFlight.withLock { $0.most } > 1)
        #expect(try JSONValue.parse(try #require(reply)).arrayValue?.count == 20)
    }

    @Test func clientSideDecoding() {
        #expect(
            RPCCodec.decodeClientMessage(Array(#"{"jsonrpc":"2.0","method":"session.changed","params":{"session":{}}}"#.utf8))
                == .notification(method: "session.changed", params: ["session": [:]]))
        #expect(
            RPCCodec.decodeClientMessage(Array(#"{"jsonrpc":"2.0","id":3,"result":null}"#.utf8))
                == .response(RPCResponse(id: .integer(3), result: nil)))
        #expect(
            RPCCodec.decodeClientMessage(Array(#"[{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"m"}}]"#.utf8))
                == .batch([RPCResponse(id: .integer(3), error: RPCError(code: .methodNotFound, message: "m"))]))
        #expect(RPCCodec.decodeClientMessage(Array(#"{"jsonrpc":"2.0","id":3}"#.utf8)) == nil)
        #expect(RPCCodec.decodeClientMessage(Array("nope".utf8)) == nil)
    }

    @Test func encodesResponsesAndNotifications() {
        #expect(
            String(decoding: RPCCodec.encode(RPCResponse(id: .string("a"), result: ["x": 1])), as: UTF8.self)
                == #"{"id":"a","jsonrpc":"2.0","result":{"x":1}}"#)
        #expect(
            String(decoding: RPCCodec.encodeNotification(method: "login.changed", params: nil), as: UTF8.self)
                == #"{"jsonrpc":"2.0","method":"login.changed"}"#)
        #expect(
            String(decoding: RPCCodec.encode(RPCResponse(id: .null, error: .parseError())), as: UTF8.self)
                == #"{"error":{"code":-32700,"message":"Parse error"},"id":null,"jsonrpc":"2.0"}"#)
    }
}

@Suite("Pre-serialized results")
struct PreSerializedResultTests {
    @Test(arguments: [RPCID.integer(7), .string("a\"b"), .null])
    func aPreSerializedResultEncodesLikeTheResponse(id: RPCID) {
        let result: JSONValue = ["status": "signedIn", "account": ["email": "a@example.com"], "reason": nil]
        #expect(
            RPCCodec.encode(id: id, serializedResult: result.serialized())
                == RPCCodec.encode(RPCResponse(id: id, result: result)))
    }
}

/// An error repeats at most 64 bytes of any string of its input.
@Suite struct InputEchoTests {
    @Test func aLongStringIsQuotedByItsFirstBytes() {
        #expect(InputEcho.quote("short") == "short")
        let long = String(repeating: "é", count: 600_000)
        let quoted = InputEcho.quote(long)
        #expect(quoted.utf8.count <= 64)
        #expect(quoted.hasSuffix("…"))
        #expect(RPCError.methodNotFound(String(repeating: "m", count: 1_048_000)).message.utf8.count < 100)
    }

    @Test func anErrorThatRepeatsItsInputIsScrubbed() {
        let name = String(repeating: "x", count: 8 << 20)
        let request = RPCRequest(id: .integer(1), method: "session.get", params: ["client": .string(name), name: 1])
        let error = InputEcho.scrub(.invalidParams("no client '\(name)' is configured"), of: request)
        #expect(error.message.utf8.count < 64 + 40)
        #expect(error.message.hasPrefix("no client 'xxx"))
        #expect(error.message.hasSuffix("…' is configured"))
        // A message of the broker's own words stays as it was; any message is at most 1 KiB.
        #expect(InputEcho.scrub("plain", of: [.string(name)]) == "plain")
        #expect(InputEcho.scrub(String(repeating: "a", count: 5000), of: []).utf8.count <= 1024)
    }
}

@Suite struct LongIDTests {
    @Test func aStringIDOver64BytesIsRefusedWithANullID() {
        let long = String(repeating: "i", count: 65)
        let text = #"{"jsonrpc":"2.0","id":"\#(long)","method":"broker.info"}"#
        #expect(RPCCodec.plainRequest(Array(text.utf8)) == nil)
        guard case .single(.invalid(let id, let error)) = RPCCodec.decodeIncoming(Array(text.utf8)) else {
            Issue.record("not refused")
            return
        }
        #expect(id == .null)
        #expect(error.code == .invalidRequest)
        let short = #"{"jsonrpc":"2.0","id":"\#(String(repeating: "i", count: 64))","method":"broker.info"}"#
        #expect(RPCCodec.plainRequest(Array(short.utf8)) != nil)
    }
}
