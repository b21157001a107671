import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Calls `body` with the `sockaddr_un` of `path` and its length.
public func withUnixAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    precondition(bytes.count < MemoryLayout.size(ofValue: address.sun_path), "socket path too long: \(path)")
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
    return withUnsafePointer(to: &address) { p in
        p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
    }
}

/// A Unix datagram socket standing in for systemd's `NOTIFY_SOCKET`.
public final class NotifySocket: Sendable {
    public let path: String
    public let fd: Int32

    /// Binds, or throws with nothing left open. (The socket is made before `self`: a class initializer that
    /// throws once every stored property is set still runs `deinit`, which would close it twice.)
    public convenience init(path: String) throws {
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        guard withUnixAddress(path, { bind(fd, $0, $1) }) == 0 else {
            let code = errno
            close(fd)
            throw HarnessError("cannot bind the notify socket \(path): errno \(code)")
        }
        self.init(path: path, fd: fd)
    }

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next message, or nil after `timeoutMilliseconds`.
    public func receive(timeoutMilliseconds: Int32 = 100) -> String? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, timeoutMilliseconds) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }

    /// Waits for a datagram containing `READY=1`; answers the time it arrived (monotonic ns).
    public func waitForReady(timeoutMilliseconds: Int32 = 15_000) throws -> UInt64 {
        let deadline = nowNanos() + UInt64(timeoutMilliseconds) * 1_000_000
        while nowNanos() < deadline {
            let remaining = Int32((deadline - min(deadline, nowNanos())) / 1_000_000) + 1
            guard let message = receive(timeoutMilliseconds: remaining) else { continue }
            let at = nowNanos()
            if message.split(separator: "\n").contains("READY=1") { return at }
        }
        throw HarnessError("no READY=1 within \(timeoutMilliseconds) ms")
    }
}
