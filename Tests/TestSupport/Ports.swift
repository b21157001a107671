#if canImport(Glibc)
    import Glibc
#endif

/// A free TCP port on 127.0.0.1, for a test that must know a server's address
/// before the server starts (to write it into a configuration). It is taken
/// below the kernel's ephemeral range (`ip_local_port_range`), where the
/// suite's many outgoing loopback connections get their local ports: a port
/// from `bind(0)` is one of those, and a connection made elsewhere in the
/// suite between its release and the server's `bind` took it ("address in
/// use"). A port below the range is bound here to prove it free, then
/// released; another test could still pick the same one in between, which
/// the random choice makes rare. Falls back to `bind(0)` if no port is found.
public func freeLoopbackPort() throws -> Int {
    let ephemeralStart = ephemeralRangeStart()
    if ephemeralStart > 11_000 {
        for _ in 0..<64 {
            let candidate = Int.random(in: 10_000..<ephemeralStart)
            if (try? bindLoopback(port: candidate)) != nil { return candidate }
        }
    }
    return try bindLoopback(port: 0)
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
private func ephemeralRangeStart() -> Int {
    guard let file = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r") else { return 32_768 }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 64)
    guard fgets(&buffer, Int32(buffer.count), file) != nil else { return 32_768 }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32_768
}

/// Binds a TCP socket on 127.0.0.1 to `port` (0: any), closes it, and answers the port it had.
private func bindLoopback(port: Int) throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port)).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw HarnessError("bind: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Starts something that must know its port before it binds (a server whose
/// configuration names its own origin) on a port from `freeLoopbackPort()`,
/// and, when another process took that port between the probe and the bind,
/// starts it again on another port: at most `tries` starts in all. The
/// window cannot be closed from here, only made harmless. A failure counts
/// as a taken port when its description says "address in use" (the login
/// server's words, in-process or in its log); any other failure is thrown
/// at once.
public func onAFreeLoopbackPort<T>(tries: Int = 5, _ start: (Int) throws -> T) throws -> T {
    var tried = 1
    while true {
        let port = try freeLoopbackPort()
        do {
            return try start(port)
        } catch let error where tried < tries && "\(error)".contains("address in use") {
            tried += 1
        }
    }
}
