import BrokerLoopback
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A test failure outside an expectation (a socket that cannot connect…).
struct TestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One HTTP answer as read off the socket.
struct RawResponse {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: String

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// A blocking TCP connection to the listener, with a 30 s receive timeout as a
/// safety net (a test never relies on it: it asserts end of stream instead).
final class RawConnection {
    let fd: Int32

    /// Connects, or throws with nothing left open. (The socket is made before `self`: a class initializer
    /// that throws once every stored property is set still runs `deinit`, which would close it twice.)
    convenience init(host: LoopbackHost, port: UInt16) throws {
        let family = host == .ipv4 ? AF_INET : AF_INET6
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestError("socket: errno \(errno)") }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withSocketAddress(host: host, port: port) { Glibc.connect(fd, $0, $1) }
        guard connected == 0 else {
            let code = errno
            Glibc.close(fd)
            throw TestError("connect: errno \(code)")
        }
        self.init(fd: fd)
    }

    private init(fd: Int32) { self.fd = fd }

    deinit { Glibc.close(fd) }

    func send(_ text: String) { send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }  // the peer closed: what is read next tells
            offset += n
        }
    }

    /// Everything until the peer closes; `eof` is false if the safety timeout hit first.
    func readToEnd() -> (bytes: [UInt8], eof: Bool) {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 {
                all += buffer[0..<n]
            } else if n == 0 || errno == ECONNRESET {
                return (all, true)
            } else if errno != EINTR {
                return (all, false)
            }
        }
    }

    /// Reads to the end and parses one answer (nil if nothing came).
    func response() throws -> RawResponse? {
        let (bytes, eof) = readToEnd()
        guard eof else { throw TestError("no end of stream within the safety timeout") }
        guard !bytes.isEmpty else { return nil }
        return try parseResponse(bytes)
    }
}

/// Parses a status line, headers and the rest as the body (the connection was closed after it).
func parseResponse(_ bytes: [UInt8]) throws -> RawResponse {
    let text = String(decoding: bytes, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw TestError("no end of headers in \(text)") }
    let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
    let statusParts = lines[0].split(separator: " ")
    guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw TestError("bad status line \(lines[0])") }
    var headers: [(String, String)] = []
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.append(
            (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
    }
    return RawResponse(status: status, headers: headers, body: String(text[split.upperBound...]))
}

/// One request on a connection of its own, `Connection: close`.
func get(
    _ target: String, host: LoopbackHost = .ipv4, port: UInt16, method: String = "GET", extraHeaders: String = "",
    body: String = ""
) throws -> RawResponse? {
    let connection = try RawConnection(host: host, port: port)
    let authority = host == .ipv4 ? "127.0.0.1:\(port)" : "[::1]:\(port)"
    connection.send(
        "\(method) \(target) HTTP/1.1\r\nHost: \(authority)\r\n\(extraHeaders)Connection: close\r\n\r\n\(body)")
    return try connection.response()
}

func withSocketAddress<R>(host: LoopbackHost, port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
    if host == .ipv4 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        _ = inet_pton(AF_INET, host.rawValue, &address.sin_addr)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
    var address = sockaddr_in6()
    address.sin6_family = sa_family_t(AF_INET6)
    address.sin6_port = port.bigEndian
    _ = inet_pton(AF_INET6, host.rawValue, &address.sin6_addr)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
    }
}

/// Whether this machine has an IPv6 loopback address to bind.
let ipv6LoopbackAvailable: Bool = {
    let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { Glibc.close(fd) }
    return withSocketAddress(host: .ipv6, port: 0) { bind(fd, $0, $1) } == 0
}()

/// What `deliver` was called with, in order.
final class Deliveries: Sendable {
    private let urls = Mutex<[String]>([])
    let page: LoopbackPage

    init(page: LoopbackPage = LoopbackPage(status: 200, title: "Signed in", message: "You can close this tab.")) {
        self.page = page
    }

    var all: [String] { urls.withLock { $0 } }

    func deliver(_ url: String) async -> LoopbackPage {
        urls.withLock { $0.append(url) }
        return page
    }
}

/// A latch a delivery waits on until the test opens it.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters = []
    }
}
