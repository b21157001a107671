import BrowserLoginTestSupport
import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The baseline: a bare NDJSON echo server on a Unix socket, with the
/// broker's I/O model (BrokerRPC's RPCServer): one accept source on its own
/// queue, one non-blocking `DispatchSource` read source per connection,
/// connections spread over two serial I/O queues, 64 KiB reads until the
/// socket is empty (at most two per event, as the broker). Per line it
/// does the least a server can do: find the newline and write the line back.
/// No JSON, no actor, no task hop.
enum EchoServer {
    /// Runs in a child process (`browser-login-bench --echo-server PATH`) until killed.
    static func run(path: String) -> Never {
        signal(SIGPIPE, SIG_IGN)
        let listenFD: Int32
        do { listenFD = try listenUnix(path) } catch {
            log("echo server: \(error)")
            exit(1)
        }
        _ = fcntl(listenFD, F_SETFL, fcntl(listenFD, F_GETFL) | O_NONBLOCK)
        let acceptQueue = DispatchQueue(label: "echo.accept")
        let ioQueues = [DispatchQueue(label: "echo.io.0"), DispatchQueue(label: "echo.io.1")]
        let counter = Counter()
        let source = DispatchSource.makeReadSource(fileDescriptor: listenFD, queue: acceptQueue)
        source.setEventHandler {
            while true {
                let fd = accept(listenFD, nil, nil)
                if fd < 0 { return }
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                counter.add(1)
                EchoConnection(fd: fd, queue: ioQueues[counter.current % ioQueues.count]).start()
            }
        }
        source.resume()
        print("ready")
        fflush(nil)
        while true { pause() }
    }
}

/// One echo connection.
///
/// `@unchecked Sendable`: every member is touched only on `queue` (a serial
/// queue): `start` hops there, and the read source's handlers run there.
private final class EchoConnection: @unchecked Sendable {
    let fd: Int32
    let queue: DispatchQueue
    var source: DispatchSourceRead?
    var pending: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    /// Keeps the connection alive while its source runs.
    var retainSelf: EchoConnection?

    init(fd: Int32, queue: DispatchQueue) {
        self.fd = fd
        self.queue = queue
    }

    func start() {
        queue.async {
            let source = DispatchSource.makeReadSource(fileDescriptor: self.fd, queue: self.queue)
            source.setEventHandler { self.readAvailable() }
            source.setCancelHandler {
                close(self.fd)
                self.retainSelf = nil
            }
            self.source = source
            self.retainSelf = self
            source.resume()
        }
    }

    /// As the broker's `ConnectionIO.readAvailable` reads: on until the
    /// socket is empty (EAGAIN), at most two reads per event, then the rest
    /// after the other connections' events.
    func readAvailable() {
        for _ in 0..<2 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 && errno == EAGAIN { return }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                source?.cancel()
                source = nil
                return
            }
            echoLines(count: n)
            if n == chunk.count { break }
        }
        queue.async { self.readAvailable() }
    }

    /// Writes back every complete line of the `count` bytes read; keeps a partial one for the next read.
    private func echoLines(count n: Int) {
        guard let lastNewline = chunk[0..<n].lastIndex(of: 0x0A) else {
            pending.append(contentsOf: chunk[0..<n])
            return
        }
        if pending.isEmpty {
            writeAll(chunk, count: lastNewline + 1)
        } else {
            pending.append(contentsOf: chunk[0...lastNewline])
            writeAll(pending, count: pending.count)
            pending.removeAll(keepingCapacity: true)
        }
        if lastNewline + 1 < n { pending.append(contentsOf: chunk[(lastNewline + 1)..<n]) }
    }

    private func writeAll(_ bytes: [UInt8], count: Int) {
        var sent = 0
        while sent < count {
            let w = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
            if w < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN {
                    var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&p, 1, 1000)
                    continue
                }
                return
            }
            sent += w
        }
    }
}
