import Testing

@testable import CurlSupport

@Suite("libcurl wrapper: answer headers")
struct CurlHeaderTests {
    private func headers(_ lines: [String]) -> [CurlHeader] {
        let sink = TransferSink(limit: nil, cancellation: nil)
        for line in lines {
            let bytes = Array(line.utf8)
            bytes.withUnsafeBufferPointer { sink.receiveHeaderLine($0) }
        }
        return sink.headers
    }

    @Test func namesKeepTheirCaseAndValuesLoseOptionalWhitespace() {
        #expect(
            headers(["HTTP/1.1 200 OK\r\n", "Content-Type:  application/json \t\r\n", "X-Empty:\r\n", "\r\n"]) == [
                CurlHeader("Content-Type", "application/json"), CurlHeader("X-Empty", ""),
            ])
    }

    /// RFC 9112 §5.2: a user agent replaces each obs-fold with one space and
    /// keeps the continuation in the previous field's value.
    @Test func anObsoleteFoldedLineContinuesThePreviousValue() {
        #expect(
            headers([
                "HTTP/1.1 200 OK\r\n", "X-Long: first\r\n", " second\r\n", "\t third \r\n", "X-Empty:\r\n", "  more\r\n",
                "Retry-After: 5\r\n",
            ]) == [CurlHeader("X-Long", "first second third"), CurlHeader("X-Empty", "more"), CurlHeader("Retry-After", "5")])
    }

    @Test func aFoldBeforeAnyHeaderAndLinesWithoutAColonAreDropped() {
        #expect(headers(["HTTP/1.1 200 OK\r\n", " stray\r\n", "garbage\r\n", "A: b\r\n"]) == [CurlHeader("A", "b")])
    }

    @Test func onlyTheFinalResponsesHeadersAreKept() {
        #expect(
            headers(["HTTP/1.1 100 Continue\r\n", "X-Interim: 1\r\n", "\r\n", "HTTP/1.1 201 Created\r\n", "Location: /x\r\n"])
                == [CurlHeader("Location", "/x")])
    }

    @Test func aBodyOverTheLimitIsRefused() {
        let sink = TransferSink(limit: 4, cancellation: nil)
        let ok = [UInt8]("abc".utf8).withUnsafeBufferPointer { sink.receiveBody($0) }
        let over = [UInt8]("de".utf8).withUnsafeBufferPointer { sink.receiveBody($0) }
        #expect(ok && !over && sink.tooLarge && sink.body == Array("abc".utf8))
    }
}
