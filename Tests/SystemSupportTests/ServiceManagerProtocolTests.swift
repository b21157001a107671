import Foundation
import Synchronization
import Testing

@testable import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// A Unix datagram socket the test binds, standing in for systemd's
/// notification socket or journald's native socket. Its address is built
/// here, independently of the code under test.
private final class DatagramSocket {
    /// As the code under test is given it: a path, or `@name` for the abstract namespace.
    let address: String
    let fd: Int32

    /// Binds `address`, or throws with nothing left open (the descriptor is made before `self`, so a
    /// failed bind never reaches `deinit`).
    static func bind(_ address: String) throws -> DatagramSocket {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var storage = sockaddr_un()
        storage.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(address.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 } else { unlink(address) }
        withUnsafeMutableBytes(of: &storage.sun_path) { $0.copyBytes(from: bytes) }
        // offsetof(sun_path) is 2; a path counts its NUL, an abstract name does not.
        let length = socklen_t(2 + bytes.count + (abstract ? 0 : 1))
        let bound = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(.init(rawValue: code) ?? .EIO)
        }
        return DatagramSocket(address: address, fd: fd)
    }

    private init(address: String, fd: Int32) {
        self.address = address
        self.fd = fd
    }

    deinit {
        close(fd)
        if !address.hasPrefix("@") { unlink(address) }
    }

    /// The next datagram's bytes and the descriptors passed with it (`SCM_RIGHTS`), or nil after a second.
    func receive() -> (bytes: [UInt8], descriptors: [Int32])? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 1000) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let controlSize = 256
        let control = UnsafeMutableRawPointer.allocate(byteCount: controlSize, alignment: 8)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: controlSize)
        let received = buffer.withUnsafeMutableBytes { raw -> (Int, Int) in
            var vector = iovec(iov_base: raw.baseAddress, iov_len: raw.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                var message = msghdr()
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = control
                message.msg_controllen = controlSize
                let n = recvmsg(fd, &message, Int32(MSG_CMSG_CLOEXEC))
                return (n, message.msg_controllen)
            }
        }
        guard received.0 >= 0 else { return nil }
        // At most one control message in these tests: SOL_SOCKET / SCM_RIGHTS, then its descriptors.
        var descriptors: [Int32] = []
        let header = 16  // CMSG_ALIGN(sizeof(struct cmsghdr)) on 64-bit Linux
        if received.1 >= header {
            let length = control.load(as: Int.self)
            let level = control.load(fromByteOffset: 8, as: Int32.self)
            let type = control.load(fromByteOffset: 12, as: Int32.self)
            if level == SOL_SOCKET, type == Int32(SCM_RIGHTS) {
                for offset in stride(from: header, to: length, by: 4) {
                    descriptors.append(control.load(fromByteOffset: offset, as: Int32.self))
                }
            }
        }
        return (Array(buffer[0..<received.0]), descriptors)
    }
}

private let socketCounter = Atomic<Int>(0)

/// A fresh socket path in the tests' temporary directory (short: `sun_path` holds 108 bytes).
private func socketPath(_ name: String) -> String {
    let directory = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
    let n = socketCounter.add(1, ordering: .relaxed).newValue
    return "\(directory)/smp-\(getpid())-\(n)-\(name).sock"
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("systemd's notification, watchdog and socket-activation protocols")
struct ServiceManagerProtocolTests {
    @Test func notifySendsTheStateAsOneDatagramToAPathSocket() throws {
        let socket = try DatagramSocket.bind(socketPath("notify"))
        #expect(ServiceManagerProtocol.notify("READY=1\nSTATUS=serving 2 client(s)", to: socket.address))
        let received = try #require(socket.receive())
        #expect(received.bytes == bytes("READY=1\nSTATUS=serving 2 client(s)"))
        #expect(received.descriptors.isEmpty)
    }

    @Test func notifyReachesASocketInTheAbstractNamespace() throws {
        let name = "@browser-login-test/notify/\(getpid())/\(UInt64.random(in: 0...UInt64.max))"
        let socket = try DatagramSocket.bind(name)
        #expect(ServiceManagerProtocol.notify("WATCHDOG=1", to: name))
        #expect(socket.receive()?.bytes == bytes("WATCHDOG=1"))
        // A path with the same name does not exist: the `@` really was the abstract namespace.
        #expect(access(String(name.dropFirst()), F_OK) != 0)
    }

    @Test func notifyAnswersFalseWhenItCannotSend() throws {
        // Nothing bound there.
        #expect(!ServiceManagerProtocol.notify("READY=1", to: socketPath("absent")))
        // Not an address: relative, empty, a bare `@`, a vsock address, too long for sun_path.
        for address in ["run/notify", "", "@", "vsock:2:1234", "/" + String(repeating: "x", count: 120)] {
            #expect(!ServiceManagerProtocol.notify("READY=1", to: address), "\(address)")
        }
        // Without $NOTIFY_SOCKET (the tests run outside a notify service) there is nothing to send.
        if getenv("NOTIFY_SOCKET") == nil { #expect(!ServiceManagerProtocol.notify("READY=1")) }
    }

    @Test func theWatchdogIntervalIsForThisProcessOnly() {
        let me = getpid()
        let watchdog = { (usec: String?, pid: String?, me: Int32) in
            ServiceManagerProtocol.watchdogMicroseconds(usec: usec, pid: pid, processID: me)
        }
        #expect(watchdog("30000000", nil, me) == 30_000_000)
        #expect(watchdog("30000000", "\(me)", me) == 30_000_000)
        // Inherited from a parent that has the watchdog: not ours.
        #expect(watchdog("30000000", "\(me == 1 ? 2 : 1)", me) == nil)
        #expect(watchdog("30000000", "not a pid", me) == nil)
        #expect(watchdog("30000000", "0", me) == nil)
        // Off, infinite, or not a number.
        #expect(watchdog(nil, nil, me) == nil)
        #expect(watchdog("0", nil, me) == nil)
        #expect(watchdog("18446744073709551615", nil, me) == nil)
        #expect(watchdog("30s", nil, me) == nil)
        #expect(watchdog("-1", nil, me) == nil)
    }

    @Test func listenFileDescriptorsArePassedToThisProcessOnly() {
        let me = getpid()
        let parse = { (pid: String?, count: String?, names: String?) in
            ServiceManagerProtocol.listenFileDescriptors(pid: pid, count: count, names: names, processID: me)
                .map { "\($0.fd):\($0.name)" }
        }
        #expect(parse("\(me)", "2", "broker.sock:varlink") == ["3:broker.sock", "4:varlink"])
        #expect(parse("\(me)", "1", "broker.sock") == ["3:broker.sock"])
        // Without names each is "unknown"; an empty name between two colons stays a name.
        #expect(parse("\(me)", "2", nil) == ["3:unknown", "4:unknown"])
        #expect(parse("\(me)", "3", "a::c") == ["3:a", "4:", "5:c"])
        // For another process (inherited by a child): none.
        #expect(parse("\(me == 1 ? 2 : 1)", "2", "broker.sock:varlink") == [])
        #expect(parse(nil, "1", "broker.sock") == [])
        // Not a positive count, or names that do not match it: none.
        for count in [nil, "0", "-1", "one", ""] { #expect(parse("\(me)", count, nil) == [], "\(count ?? "nil")") }
        #expect(parse("\(me)", "2", "broker.sock") == [])
        #expect(parse("\(me)", "1", "") == [])
    }

    @Test func takingTheListenFileDescriptorsMakesThemCloseOnExecAndRemovesTheVariables() throws {
        // Two descriptors at numbers of the test's choosing, inheritable (dup2 clears FD_CLOEXEC).
        var pipeEnds: [Int32] = [0, 0]
        try #require(pipe(&pipeEnds) == 0)
        defer { pipeEnds.forEach { _ = close($0) } }
        var first: Int32 = 700
        while fcntl(first, F_GETFD) >= 0 || fcntl(first + 1, F_GETFD) >= 0 { first += 2 }
        try #require(dup2(pipeEnds[0], first) == first && dup2(pipeEnds[1], first + 1) == first + 1)
        defer {
            close(first)
            close(first + 1)
        }
        let cloexec = { (fd: Int32) in fcntl(fd, F_GETFD) & FD_CLOEXEC != 0 }
        #expect(!cloexec(first) && !cloexec(first + 1))

        var removed: [String] = []
        // Meant for another process: nothing taken, the descriptors untouched, the variables removed all the same.
        let foreign: [String: String] = ["LISTEN_PID": "1", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "in:out"]
        let none = ServiceManagerProtocol.takeListenFileDescriptors(
            first: first, processID: getpid() == 1 ? 2 : getpid(), variable: { foreign[$0] }, unset: { removed.append($0) })
        #expect(none.isEmpty)
        #expect(!cloexec(first) && !cloexec(first + 1))
        #expect(Set(removed) == ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"])

        removed = []
        let mine: [String: String] = ["LISTEN_PID": "\(getpid())", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "in:out"]
        let taken = ServiceManagerProtocol.takeListenFileDescriptors(
            first: first, processID: getpid(), variable: { mine[$0] }, unset: { removed.append($0) })
        #expect(taken.map(\.fd) == [first, first + 1])
        #expect(taken.map(\.name) == ["in", "out"])
        #expect(cloexec(first) && cloexec(first + 1))
        #expect(Set(removed) == ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"])
    }
}

@Suite("The journal's native protocol")
struct JournalWriterTests {
    /// `NAME=value\n`; a value with a newline: `NAME\n`, its length as a little-endian 64-bit number, the value, `\n`.
    @Test func fieldsAreFramedAsTheNativeProtocolSays() {
        let expected: [UInt8] =
            bytes("MESSAGE=signed in\nPRIORITY=6\nEMPTY=\nSTACK\n") + [13, 0, 0, 0, 0, 0, 0, 0]
            + bytes("line 1\nline 2\n") + bytes("CLIENT=a=b\n")
        #expect(
            JournalWriter.datagram([
                "MESSAGE=signed in", "PRIORITY=6", "EMPTY=", "STACK=line 1\nline 2", "CLIENT=a=b",
            ]) == expected)
        // A value of just a newline, and one of 256 bytes with one: the length is little-endian.
        #expect(JournalWriter.datagram(["X=\n"]) == bytes("X\n") + [1, 0, 0, 0, 0, 0, 0, 0] + bytes("\n\n"))
        let long = String(repeating: "y", count: 255) + "\n"
        #expect(JournalWriter.datagram(["Y=" + long]) == bytes("Y\n") + [0, 1, 0, 0, 0, 0, 0, 0] + bytes(long + "\n"))
        // Not an entry: no fields, or a field without `=`.
        #expect(JournalWriter.datagram([]) == nil)
        #expect(JournalWriter.datagram(["MESSAGE=x", "PRIORITY"]) == nil)
    }

    @Test func anEntryIsOneDatagramOnTheSocket() throws {
        let socket = try DatagramSocket.bind(socketPath("journal"))
        let writer = JournalWriter(socketPath: socket.address)
        #expect(writer.send(["MESSAGE=signed in", "PRIORITY=6", "STACK=line 1\nline 2"]))
        let received = try #require(socket.receive())
        #expect(
            received.bytes
                == bytes("MESSAGE=signed in\nPRIORITY=6\nSTACK\n") + [13, 0, 0, 0, 0, 0, 0, 0] + bytes("line 1\nline 2\n"))
        #expect(received.descriptors.isEmpty)
        // The socket is kept: a second entry goes the same way.
        #expect(writer.send(["MESSAGE=again"]))
        #expect(socket.receive()?.bytes == bytes("MESSAGE=again\n"))
        #expect(!writer.send(["no equals sign"]))
    }

    @Test func anEntryTooLargeForADatagramIsPassedInASealedMemfd() throws {
        let socket = try DatagramSocket.bind(socketPath("journal-big"))
        // A 64 KiB send buffer asked for (the kernel doubles it): a 300 KiB entry does not fit in a datagram.
        let writer = JournalWriter(socketPath: socket.address, sendBufferSize: 64 << 10)
        #expect(writer.sendBufferSize < 300 << 10)
        let fields = ["MESSAGE=" + String(repeating: "x", count: 300 << 10), "PRIORITY=4", "STACK=a\nb"]
        #expect(writer.send(fields))
        let received = try #require(socket.receive())
        #expect(received.bytes.isEmpty)
        #expect(received.descriptors.count == 1)
        let fd = try #require(received.descriptors.first)
        defer { close(fd) }
        // Sealed against every change, so journald can map it. F_GET_SEALS (1034): F_SEAL_SEAL 1,
        // F_SEAL_SHRINK 2, F_SEAL_GROW 4, F_SEAL_WRITE 8.
        #expect(fcntl(fd, 1034) == 0xF)
        let expected = try #require(JournalWriter.datagram(fields))
        #expect(Self.content(of: fd) == expected)
        #expect(expected.suffix(18) == bytes("STACK\n") + [3, 0, 0, 0, 0, 0, 0, 0] + bytes("a\nb\n"))
    }

    /// With the send buffer the writer asks for (8 MiB, granted up to twice `net.core.wmem_max`), a 300 KiB
    /// entry arrives whole: as one datagram where the buffer holds it, else in a memfd.
    @Test func aLargeEntryArrivesWhole() throws {
        let socket = try DatagramSocket.bind(socketPath("journal-300k"))
        let writer = JournalWriter(socketPath: socket.address)
        let fields = ["MESSAGE=" + String(repeating: "z", count: 300 << 10), "PRIORITY=6"]
        let expected = try #require(JournalWriter.datagram(fields))
        #expect(writer.send(fields))
        let received = try #require(socket.receive())
        if let fd = received.descriptors.first {
            defer { close(fd) }
            #expect(writer.sendBufferSize < expected.count + 32)
            #expect(received.bytes.isEmpty)
            #expect(Self.content(of: fd) == expected)
        } else {
            #expect(received.bytes == expected)
        }
    }

    /// The whole content of a file, read from offset 0.
    private static func content(of fd: Int32) -> [UInt8]? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        var content = [UInt8](repeating: 0, count: Int(info.st_size))
        guard pread(fd, &content, content.count, 0) == content.count else { return nil }
        return content
    }

    @Test func anEntryNoOneListensForIsNotSent() {
        #expect(!JournalWriter(socketPath: socketPath("no-journald")).send(["MESSAGE=lost"]))
        #expect(!JournalWriter(socketPath: "relative/socket").send(["MESSAGE=lost"]))
    }
}
