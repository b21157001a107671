#if canImport(Glibc)
    import Glibc
#endif

/// A free TCP port on 127.0.0.1 (bound to port 0, then released), for a test
/// that must know a server's address before the server starts (to write it
/// into a configuration). Another process could take it in between; the
/// tests that use it start their server at once.
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw HarnessError("bind: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}
