#if canImport(Glibc)
    import Glibc
#endif

/// How messages are delimited on one connection.
public enum RPCFraming: Sendable, Hashable {
    /// One JSON text per line (`\n`, `\r\n` tolerated; empty lines skipped).
    case ndjson
    /// LSP-style `Content-Length: N\r\n\r\n` headers before each message.
    case contentLength
}

/// Why the byte stream of a connection cannot go on. After either, the
/// decoder yields nothing more and the connection is closed.
public enum RPCFrameError: Error, Sendable, Hashable {
    /// A message is over `RPCFrameDecoder.maxMessageSize` (answered `-32600`).
    case oversize
    /// The `Content-Length` headers are broken (answered `-32700`).
    case malformedHeader
}

/// What the decoder found in the bytes fed so far.
public enum RPCFrameEvent: Sendable, Hashable {
    case message([UInt8])
    case failure(RPCFrameError)
}

/// An incremental, pure framing decoder: feed it bytes as they arrive, in
/// pieces of any size, and take the complete messages.
///
/// When the framing is not fixed in advance, the first byte that is not
/// whitespace decides: `C` or `c` (the start of `Content-Length:` or
/// `Content-Type:`) selects `.contentLength`; anything else (`{`, `[`, …)
/// selects `.ndjson`.
public struct RPCFrameDecoder: Sendable {
    /// 1 MiB: the largest message body accepted.
    public static let defaultMaxMessageSize = 1_048_576
    /// The largest header block of one `Content-Length` message.
    public static let maxHeaderSize = 8_192

    public private(set) var framing: RPCFraming?
    public let maxMessageSize: Int
    /// Set once a failure was returned; the decoder then ignores its input.
    public private(set) var failed = false

    private var buffer: [UInt8] = []
    /// Bytes of `buffer` before this index are consumed.
    private var start = 0
    /// NDJSON: bytes before this index (from `start`) hold no newline.
    private var scanned = 0
    /// Content-Length: the length of the body being read, once its headers are complete.
    private var bodyLength: Int?

    public init(framing: RPCFraming? = nil, maxMessageSize: Int = RPCFrameDecoder.defaultMaxMessageSize) {
        self.framing = framing
        self.maxMessageSize = maxMessageSize
    }

    /// Bytes fed but not yet part of a message.
    public var bufferedCount: Int { buffer.count - start }

    /// Adds bytes and returns the messages (and at most one failure, last) they complete.
    public mutating func feed(_ bytes: some Collection<UInt8>) -> [RPCFrameEvent] {
        guard !failed else { return [] }
        buffer.append(contentsOf: bytes)
        var events: [RPCFrameEvent] = []
        if framing == nil {
            guard let first = buffer[start...].firstIndex(where: { !Self.isWhitespace($0) }) else {
                // Only whitespace so far: drop it, it decides nothing.
                buffer.removeAll(keepingCapacity: true)
                start = 0
                scanned = 0
                return []
            }
            framing = (buffer[first] == UInt8(ascii: "C") || buffer[first] == UInt8(ascii: "c")) ? .contentLength : .ndjson
            // Leading whitespace is dropped however the reads split it, so the
            // first message never depends on the read boundaries.
            start = first
            scanned = first
        }
        switch framing {
        case .ndjson?: decodeLines(into: &events)
        case .contentLength?: decodeHeaderFramed(into: &events)
        case nil: break
        }
        compact()
        return events
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    private mutating func fail(_ error: RPCFrameError, into events: inout [RPCFrameEvent]) {
        failed = true
        events.append(.failure(error))
        buffer = []
        start = 0
        scanned = 0
    }

    private mutating func compact() {
        if start > 0 && (start >= buffer.count || start >= 65_536) {
            buffer.removeSubrange(0..<start)
            scanned = max(0, scanned - start)
            start = 0
        }
    }

    // MARK: NDJSON

    private mutating func decodeLines(into events: inout [RPCFrameEvent]) {
        while !failed {
            let from = max(start, scanned)
            guard let newline = Self.firstNewline(in: buffer, from: from) else {
                scanned = buffer.count
                // A line may end with "\r" that is not part of the message.
                if buffer.count - start > maxMessageSize + 1 { fail(.oversize, into: &events) }
                return
            }
            var end = newline
            if end > start && buffer[end - 1] == 0x0D { end -= 1 }
            let line = buffer[start..<end]
            start = newline + 1
            scanned = start
            if line.count > maxMessageSize {
                fail(.oversize, into: &events)
                return
            }
            if line.allSatisfy(Self.isWhitespace) { continue }
            events.append(.message(Array(line)))
        }
    }

    /// The index of the first `\n` of `bytes` at or after `from` (`memchr`: a word at a time).
    private static func firstNewline(in bytes: [UInt8], from: Int) -> Int? {
        bytes.withUnsafeBufferPointer { all -> Int? in
            guard from < all.count, let base = all.baseAddress,
                let found = memchr(base + from, 0x0A, all.count - from)
            else { return nil }
            return UnsafeRawPointer(base).distance(to: found)
        }
    }

    // MARK: Content-Length

    private mutating func decodeHeaderFramed(into events: inout [RPCFrameEvent]) {
        while !failed {
            if let length = bodyLength {
                guard buffer.count - start >= length else { return }
                events.append(.message(Array(buffer[start..<(start + length)])))
                start += length
                bodyLength = nil
                continue
            }
            do {
                guard let (headerEnd, length) = try parseHeaders() else { return }
                start = headerEnd
                bodyLength = length
            } catch {
                fail(error, into: &events)
            }
        }
    }

    /// Parses a complete header block at `start`: returns where the body
    /// starts and its length; nil when more bytes are needed.
    private mutating func parseHeaders() throws(RPCFrameError) -> (Int, Int)? {
        // Blank lines between messages are tolerated.
        while buffer.count - start >= 1 {
            if buffer[start] == 0x0A {
                start += 1
            } else if buffer[start] == 0x0D, buffer.count - start >= 2, buffer[start + 1] == 0x0A {
                start += 2
            } else {
                break
            }
        }
        var lineStart = start
        var length: Int?
        while true {
            guard let newline = buffer[lineStart...].firstIndex(of: 0x0A) else {
                if buffer.count - start > Self.maxHeaderSize { throw .malformedHeader }
                return nil
            }
            if newline - start > Self.maxHeaderSize { throw .malformedHeader }
            var end = newline
            if end > lineStart && buffer[end - 1] == 0x0D { end -= 1 }
            let line = buffer[lineStart..<end]
            lineStart = newline + 1
            if line.isEmpty {
                guard let length else { throw .malformedHeader }
                return (lineStart, length)
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { throw .malformedHeader }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
            guard name.lowercased() == "content-length" else { continue }
            let value = line[(colon + 1)...].drop(while: { $0 == 0x20 || $0 == 0x09 })
            let digits = value.reversed().drop(while: { $0 == 0x20 || $0 == 0x09 }).reversed()
            guard !digits.isEmpty, digits.count <= 19,
                digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let parsed = Int(String(decoding: digits, as: UTF8.self))
            else { throw .malformedHeader }
            if let length, length != parsed { throw .malformedHeader }
            if parsed > maxMessageSize { throw .oversize }
            length = parsed
        }
    }
}

/// Frames outgoing messages.
public enum RPCFrameEncoder {
    /// `body` is consumed: a reply made with room for its newline gets it in place, without a copy.
    public static func encode(_ body: consuming [UInt8], framing: RPCFraming) -> [UInt8] {
        switch framing {
        case .ndjson:
            // Serialised JSON never holds a raw newline: it is always escaped.
            var out = body
            out.append(0x0A)
            return out
        case .contentLength:
            var out = Array("Content-Length: \(body.count)\r\n\r\n".utf8)
            out.append(contentsOf: body)
            return out
        }
    }
}
