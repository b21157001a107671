import BrokerCore

/// The frames the broker and its HTTP helper (`browser-login-http`) exchange
/// over a socket pair: the broker sends requests and cancellations, the helper
/// answers each request once, with a response or a transport error.
///
/// A frame is a 32-bit little-endian length, then that many bytes: a kind
/// byte, a 64-bit request id, then the kind's fields in a fixed order.
/// Integers are little-endian; a byte string is its 32-bit length, then its
/// bytes; an optional is a byte 0 (absent) or 1, then the value. Both ends are
/// built from this file, so the format has no version: a frame that does not
/// decode exactly (a short field, bytes left over, an unknown kind) is a
/// broken peer, and the connection is dropped.
public enum HTTPHelperWire {
    /// No frame is longer (a request body or an answer is at most a few MiB).
    public static let maximumFrameBytes = 64 << 20

    /// The proxy of one request, chosen by the broker (it holds the desktop's
    /// proxy settings): libcurl's reading of the environment, none, or this one.
    /// Loopback URLs never use one, whatever this says.
    public enum Proxy: Sendable, Equatable {
        case environment
        case direct
        case url(String)
    }

    public enum Frame: Sendable, Equatable {
        case request(id: UInt64, HTTPRequest, proxy: Proxy)
        case cancel(id: UInt64)
        case response(id: UInt64, HTTPResponse)
        case failure(id: UInt64, HTTPTransportError)
    }

    private enum Kind: UInt8 {
        case request = 1, cancel, response, failure
    }

    /// The frame with its length prefix, ready to write.
    public static func encode(_ frame: Frame) -> [UInt8] {
        var w = Writer()
        w.bytes = [0, 0, 0, 0]
        switch frame {
        case .request(let id, let request, let proxy):
            w.u8(Kind.request.rawValue)
            w.u64(id)
            w.string(request.method)
            w.string(request.url)
            w.headers(request.headers)
            w.optional(request.body) { $0.data($1) }
            w.u64(UInt64(max(0, request.timeoutMilliseconds)))
            w.u64(UInt64(max(0, request.connectTimeoutMilliseconds)))
            w.u64(UInt64(max(0, request.maximumResponseBytes)))
            w.optional(request.caFile) { $0.string($1) }
            w.u8(request.changesState ? 1 : 0)
            switch proxy {
            case .environment: w.u8(0)
            case .direct: w.u8(1)
            case .url(let url):
                w.u8(2)
                w.string(url)
            }
        case .cancel(let id):
            w.u8(Kind.cancel.rawValue)
            w.u64(id)
        case .response(let id, let response):
            w.u8(Kind.response.rawValue)
            w.u64(id)
            w.u64(UInt64(max(0, response.status)))
            w.headers(response.headers)
            w.data(response.body)
        case .failure(let id, let error):
            w.u8(Kind.failure.rawValue)
            w.u64(id)
            switch error {
            case .notSent(let m):
                w.u8(0)
                w.string(m)
            case .noAnswer(let m):
                w.u8(1)
                w.string(m)
            case .responseTooLarge:
                w.u8(2)
                w.string("")
            case .invalidRequest(let m):
                w.u8(3)
                w.string(m)
            }
        }
        let length = UInt32(w.bytes.count - 4)
        for i in 0..<4 { w.bytes[i] = UInt8(truncatingIfNeeded: length >> (8 * UInt32(i))) }
        return w.bytes
    }

    /// One frame's bytes (without the length prefix); nil unless they decode exactly.
    public static func decode(_ payload: ArraySlice<UInt8>) -> Frame? {
        var r = Reader(bytes: payload)
        guard let kind = r.u8().flatMap(Kind.init(rawValue:)), let id = r.u64() else { return nil }
        let frame: Frame
        switch kind {
        case .request:
            guard let method = r.string(), let url = r.string(), let headers = r.headers(),
                let body = r.optional({ $0.data() }), let timeout = r.int(), let connectTimeout = r.int(),
                let maximum = r.int(), let caFile = r.optional({ $0.string() }), let changes = r.u8(), changes <= 1,
                let proxyKind = r.u8()
            else { return nil }
            let proxy: Proxy
            switch proxyKind {
            case 0: proxy = .environment
            case 1: proxy = .direct
            case 2:
                guard let url = r.string() else { return nil }
                proxy = .url(url)
            default: return nil
            }
            let request = HTTPRequest(
                method: method, url: url, headers: headers, body: body, timeoutMilliseconds: timeout,
                connectTimeoutMilliseconds: connectTimeout, maximumResponseBytes: maximum, caFile: caFile,
                changesState: changes == 1)
            frame = .request(id: id, request, proxy: proxy)
        case .cancel:
            frame = .cancel(id: id)
        case .response:
            guard let status = r.int(), let headers = r.headers(), let body = r.data() else { return nil }
            frame = .response(id: id, HTTPResponse(status: status, headers: headers, body: body))
        case .failure:
            guard let which = r.u8(), let message = r.string() else { return nil }
            let error: HTTPTransportError
            switch which {
            case 0: error = .notSent(message)
            case 1: error = .noAnswer(message)
            case 2: error = .responseTooLarge
            case 3: error = .invalidRequest(message)
            default: return nil
            }
            frame = .failure(id: id, error)
        }
        return r.atEnd ? frame : nil
    }

    /// Cuts a byte stream into frames: `append` what was read, then take
    /// `next()` until nil. A length over `maximumFrameBytes` makes it `broken`.
    public struct Stream: Sendable {
        private var buffer: [UInt8] = []
        private var start = 0
        public private(set) var broken = false

        public init() {}

        public mutating func append(_ bytes: UnsafeRawBufferPointer) {
            if start > 0, start == buffer.count {
                buffer.removeAll(keepingCapacity: true)
                start = 0
            } else if start > 1 << 16 {
                buffer.removeSubrange(0..<start)
                start = 0
            }
            buffer.append(contentsOf: bytes)
        }

        /// The next complete frame's payload, or nil (wait for more bytes, or `broken`).
        public mutating func next() -> ArraySlice<UInt8>? {
            guard !broken, buffer.count - start >= 4 else { return nil }
            var length = 0
            for i in 0..<4 { length |= Int(buffer[start + i]) << (8 * i) }
            guard length <= HTTPHelperWire.maximumFrameBytes else {
                broken = true
                return nil
            }
            guard buffer.count - start - 4 >= length else { return nil }
            let payload = buffer[(start + 4)..<(start + 4 + length)]
            start += 4 + length
            return payload
        }
    }

    private struct Writer {
        var bytes: [UInt8] = []
        mutating func u8(_ v: UInt8) { bytes.append(v) }
        mutating func u32(_ v: UInt32) { for i in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        mutating func u64(_ v: UInt64) { for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) } }
        mutating func data(_ v: [UInt8]) {
            u32(UInt32(v.count))
            bytes.append(contentsOf: v)
        }
        mutating func string(_ v: String) { data(Array(v.utf8)) }
        mutating func headers(_ v: [HTTPHeader]) {
            u32(UInt32(v.count))
            for h in v {
                string(h.name)
                string(h.value)
            }
        }
        mutating func optional<T>(_ v: T?, _ write: (inout Writer, T) -> Void) {
            if let v {
                u8(1)
                write(&self, v)
            } else {
                u8(0)
            }
        }
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var index: Int
        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            index = bytes.startIndex
        }
        var atEnd: Bool { index == bytes.endIndex }
        mutating func u8() -> UInt8? {
            guard index < bytes.endIndex else { return nil }
            defer { index += 1 }
            return bytes[index]
        }
        mutating func fixed(_ count: Int) -> UInt64? {
            guard bytes.endIndex - index >= count else { return nil }
            var v: UInt64 = 0
            for i in 0..<count { v |= UInt64(bytes[index + i]) << (8 * UInt64(i)) }
            index += count
            return v
        }
        mutating func u64() -> UInt64? { fixed(8) }
        /// A 64-bit count that fits an `Int`.
        mutating func int() -> Int? { u64().flatMap { $0 <= UInt64(Int.max) ? Int($0) : nil } }
        mutating func data() -> [UInt8]? {
            guard let count = fixed(4).map(Int.init), bytes.endIndex - index >= count else { return nil }
            defer { index += count }
            return Array(bytes[index..<(index + count)])
        }
        mutating func string() -> String? { data().flatMap { String(validating: $0, as: UTF8.self) } }
        mutating func headers() -> [HTTPHeader]? {
            guard let count = fixed(4).map(Int.init), count <= (bytes.endIndex - index) / 8 else { return nil }
            var result: [HTTPHeader] = []
            for _ in 0..<count {
                guard let name = string(), let value = string() else { return nil }
                result.append(HTTPHeader(name, value))
            }
            return result
        }
        mutating func optional<T>(_ read: (inout Reader) -> T?) -> T?? {
            switch u8() {
            case 0: return .some(nil)
            case 1: return read(&self).map { .some($0) }
            default: return nil
            }
        }
    }
}
