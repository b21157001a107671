import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A slowloris neighbour of an HTTP listener on 127.0.0.1: `count` connections, each sending a request
/// line and then one header line every `interval`, never the blank line that ends the head. A connection
/// the listener closes is opened again at once, so `count` of them press on it all the time. One thread
/// per connection; `stop()` (or deinit) ends and joins them and closes every socket.
public final class SlowSenders: Sendable {
    public let port: UInt16
    private let core: Core

    public struct Counters: Sendable {
        /// Connections opened, over the run.
        public var opened = 0
        /// Connections the listener closed (end of stream, reset, or an answer and then the end).
        public var closedByListener = 0
        /// Connections refused or reset before the request line could be sent.
        public var refused = 0
        /// Header lines sent, over all connections.
        public var lines = 0
        /// The longest one connection lasted before the listener closed it.
        public var longestHeld: Duration = .zero
    }

    public var counts: Counters { core.counters.withLock { $0 } }

    public init(port: UInt16, count: Int, interval: Duration, target: String = "/callback?code=slow") {
        self.port = port
        let core = Core(port: port)
        self.core = core
        for index in 0..<count {
            core.finished.enter()
            let thread = Thread {
                core.run(index: index, interval: interval, target: target)
                core.finished.leave()
            }
            thread.name = "slow-sender-\(index)"
            thread.start()
        }
    }

    /// The threads hold the core, not this object: dropping it stops them.
    deinit { stop() }

    /// Waits until `count` connections have been opened (at most `timeout`); answers whether they were.
    public func waitUntilOpened(_ count: Int, timeout: Duration = .seconds(30)) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while clock.now < deadline {
            if counts.opened >= count { return true }
            usleep(10_000)
        }
        return false
    }

    /// Ends every connection and joins the threads; idempotent.
    public func stop() {
        core.stopping.store(true, ordering: .relaxed)
        core.finished.wait()
    }
}

/// What the sender threads share.
private final class Core: Sendable {
    let port: UInt16
    let stopping = Atomic<Bool>(false)
    let counters = Mutex(SlowSenders.Counters())
    let finished = DispatchGroup()

    init(port: UInt16) { self.port = port }

    func run(index: Int, interval: Duration, target: String) {
        let clock = ContinuousClock()
        let milliseconds = Int(interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000)
        while !stopping.load(ordering: .relaxed) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { return }
            defer { close(fd) }
            guard connectToLoopback(fd, port: port), sendAll(fd, "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n")
            else {
                counters.withLock { $0.refused += 1 }
                usleep(10_000)
                continue
            }
            let opened = clock.now
            counters.withLock { $0.opened += 1 }
            var line = 0
            while !stopping.load(ordering: .relaxed) {
                // Wait up to the interval for the listener to answer or close; then send the next line.
                var pending = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&pending, 1, Int32(milliseconds)) > 0 {
                    var buffer = [UInt8](repeating: 0, count: 1024)
                    let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                    if n >= 0 || (errno != EAGAIN && errno != EINTR) {
                        // Closed, reset, or answered (an answer ends a slow head too): open another.
                        closedByListener(after: clock.now - opened)
                        break
                    }
                    continue
                }
                line += 1
                guard sendAll(fd, "X-Slow-\(index)-\(line): \(String(repeating: "z", count: 16))\r\n") else {
                    closedByListener(after: clock.now - opened)
                    break
                }
                counters.withLock { $0.lines += 1 }
            }
        }
    }

    private func closedByListener(after held: Duration) {
        counters.withLock {
            $0.closedByListener += 1
            $0.longestHeld = max($0.longestHeld, held)
        }
    }

}

/// Sends `request` as is on a new connection to 127.0.0.1:`port` and answers the status of what comes back
/// before the end of the stream (nil: nothing, or no end within `timeout`). The request should end the
/// connection (HTTP/1.0, or `Connection: close`).
public func loopbackHTTPStatus(port: UInt16, _ request: String, timeout: Duration = .seconds(30)) -> Int? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var wait = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
    guard connectToLoopback(fd, port: port), sendAll(fd, request) else { return nil }
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n > 0 {
            answer += buffer[0..<n]
        } else if n == 0 || errno == ECONNRESET {
            break
        } else if errno != EINTR {
            return nil
        }
    }
    // "HTTP/1.1 400 Bad Request"
    let statusLine = String(decoding: answer.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
    let parts = statusLine.split(separator: " ")
    return parts.count >= 2 ? Int(parts[1]) : nil
}

/// Connects `fd` (an AF_INET stream socket) to 127.0.0.1:`port`.
private func connectToLoopback(_ fd: Int32, port: UInt16) -> Bool {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    } == 0
}

/// Sends all of `text` in one call (small writes on loopback), without SIGPIPE.
private func sendAll(_ fd: Int32, _ text: String) -> Bool {
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
}
