import Testing

@testable import BrokerRPC

@Suite struct FramingTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Feeds `input` in pieces of `size` bytes and collects every event.
    static func decode(_ input: [UInt8], pieces size: Int, framing: RPCFraming? = nil, max: Int = 1_048_576) -> (
        [RPCFrameEvent], RPCFraming?
    ) {
        var decoder = RPCFrameDecoder(framing: framing, maxMessageSize: max)
        var events: [RPCFrameEvent] = []
        var index = 0
        while index < input.count {
            let end = min(input.count, index + size)
            events += decoder.feed(input[index..<end])
            index = end
        }
        return (events, decoder.framing)
    }

    static func messages(_ texts: [String]) -> [RPCFrameEvent] { texts.map { .message(bytes($0)) } }

    /// (stream, expected events, expected framing)
    static let cases: [(String, [RPCFrameEvent], RPCFraming)] = [
        ("{\"a\":1}\n[2]\n", messages(["{\"a\":1}", "[2]"]), .ndjson),
        ("{\"a\":1}\r\n{\"b\":2}\r\n", messages(["{\"a\":1}", "{\"b\":2}"]), .ndjson),
        ("\n\r\n{}\n\n   \n\r\n[]\n", messages(["{}", "[]"]), .ndjson),
        ("{}\n{\"incomplete\":", messages(["{}"]), .ndjson),
        ("Content-Length: 7\r\n\r\n{\"a\":1}Content-Length: 2\r\n\r\n[]", messages(["{\"a\":1}", "[]"]), .contentLength),
        ("content-length: 2\r\n\r\n{}", messages(["{}"]), .contentLength),
        ("CONTENT-LENGTH:2\r\n\r\n{}", messages(["{}"]), .contentLength),
        ("cOnTeNt-LeNgTh:   2  \r\n\r\n{}", messages(["{}"]), .contentLength),
        (
            "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
            messages(["{}"]), .contentLength
        ),
        ("Content-Length: 2\r\nContent-Type: x\r\n\r\n{}", messages(["{}"]), .contentLength),
        // The length counts UTF-8 bytes: "é" is two.
        ("Content-Length: 8\r\n\r\n{\"é\":1}Content-Length: 2\r\n\r\n{}", messages(["{\"é\":1}", "{}"]), .contentLength),
        // The body may hold newlines; a partial body is not a message yet.
        ("Content-Length: 4\r\n\r\n[\n1]Content-Length: 10\r\n\r\n{}", messages(["[\n1]"]), .contentLength),
        ("Content-Length: 0\r\n\r\n", messages([""]), .contentLength),
        ("Content-Length: x\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
        ("Content-Type: x\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
        ("Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
        ("Content-Length 2\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
        ("Content-Length: -2\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
        ("Content-Length: 1048577\r\n\r\n{}", [.failure(.oversize)], .contentLength),
        ("Content-Length: 99999999999999999999999\r\n\r\n{}", [.failure(.malformedHeader)], .contentLength),
    ]

    @Test(arguments: 0..<cases.count)
    func tableAtEverySplit(index: Int) {
        let (stream, expected, framing) = Self.cases[index]
        let input = Self.bytes(stream)
        for size in 1...input.count {
            let (events, decided) = Self.decode(input, pieces: size)
            #expect(events == expected, "piece size \(size)")
            #expect(decided == framing)
        }
    }

    @Test func oversizeLineWithoutNewline() {
        var decoder = RPCFrameDecoder(maxMessageSize: 1_048_576)
        #expect(decoder.feed(Array(repeating: UInt8(ascii: "x"), count: 1_048_577)).isEmpty)
        #expect(decoder.feed([UInt8(ascii: "x")]) == [.failure(.oversize)])
        #expect(decoder.failed)
        #expect(decoder.feed(Self.bytes("{}\n")).isEmpty)
    }

    @Test func exactLimitIsAccepted() {
        let line = [UInt8(ascii: "[")] + Array(repeating: UInt8(ascii: " "), count: 1_048_574) + [UInt8(ascii: "]")]
        #expect(line.count == 1_048_576)
        let (events, _) = Self.decode(line + Self.bytes("\r\n"), pieces: 100_000)
        #expect(events == [.message(line)])
        let (over, _) = Self.decode(line + Self.bytes(" \n"), pieces: 100_000)
        #expect(over == [.failure(.oversize)])
    }

    @Test func oversizeLineIsAFailureAfterEarlierMessages() {
        let stream = Self.bytes("{}\n") + Array(repeating: UInt8(ascii: "x"), count: 2000) + Self.bytes("\n{}\n")
        let (events, _) = Self.decode(stream, pieces: 333, max: 1000)
        #expect(events == [.message(Self.bytes("{}")), .failure(.oversize)])
    }

    @Test func oversizeHeaderBlock() {
        let stream = Self.bytes("Content-Type: ") + Array(repeating: UInt8(ascii: "a"), count: 10_000)
        let (events, _) = Self.decode(stream, pieces: 1000)
        #expect(events == [.failure(.malformedHeader)])
    }

    @Test func manyMessagesAtRandomSplits() {
        var stream: [UInt8] = []
        var expected: [RPCFrameEvent] = []
        for n in 0..<300 {
            let body = Self.bytes(
                "{\"jsonrpc\":\"2.0\",\"id\":\(n),\"method\":\"m\",\"params\":{\"s\":\"\(String(repeating: "é", count: n % 17))\"}}"
            )
            stream += body + (n % 2 == 0 ? Self.bytes("\n") : Self.bytes("\r\n"))
            expected.append(.message(body))
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            var decoder = RPCFrameDecoder()
            var events: [RPCFrameEvent] = []
            var index = 0
            while index < stream.count {
                let end = min(stream.count, index + Int.random(in: 1...700, using: &generator))
                events += decoder.feed(stream[index..<end])
                index = end
            }
            #expect(events == expected)
            #expect(decoder.bufferedCount == 0)
        }
    }

    @Test func fixedFramingIsNotGuessed() {
        var decoder = RPCFrameDecoder(framing: .contentLength)
        #expect(decoder.feed(Self.bytes("{}\n")) == [.failure(.malformedHeader)])
    }

    @Test func encoder() {
        #expect(RPCFrameEncoder.encode(Self.bytes("{}"), framing: .ndjson) == Self.bytes("{}\n"))
        #expect(
            RPCFrameEncoder.encode(Self.bytes("{\"é\":1}"), framing: .contentLength)
                == Self.bytes("Content-Length: 8\r\n\r\n{\"é\":1}"))
    }
}
