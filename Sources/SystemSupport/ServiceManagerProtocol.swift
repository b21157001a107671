import CLinux

#if canImport(Glibc)
    import Glibc
#endif

/// systemd's service-manager protocols, spoken without libsystemd.
///
/// Readiness and status notifications (sd_notify(3)), the watchdog's
/// interval (sd_watchdog_enabled(3)) and the sockets of socket activation
/// (sd_listen_fds_with_names(3)) are environment variables and one datagram;
/// systemd documents them as stable interfaces meant to be implemented
/// without its library. Linking libsystemd for them cost the daemon ≈ 1.5 MiB
/// of VmRSS at start-up (the library and the liblz4, liblzma and libcap it
/// loads: 676 KiB of their pages, and the loader's work for them).
/// The journal's native protocol is `JournalWriter`.
///
/// Every call is harmless outside systemd: without the variables there is
/// nothing to send and nothing passed.
public enum ServiceManagerProtocol {
    /// The first descriptor passed by socket activation (`SD_LISTEN_FDS_START`).
    public static let firstListenFileDescriptor: Int32 = 3

    // MARK: Notifications

    /// Sends `state` (newline-separated `READY=1`, `STATUS=…`, `WATCHDOG=1`,
    /// `STOPPING=1`, …) to the service manager's socket named by
    /// `$NOTIFY_SOCKET`, as `sd_notify(0, state)` does. Answers whether it was
    /// sent: false without `$NOTIFY_SOCKET` (not started by systemd, or not a
    /// `Type=notify` service) or when it could not be.
    @discardableResult
    public static func notify(_ state: String) -> Bool {
        guard let socket = variable("NOTIFY_SOCKET") else { return false }
        return notify(state, to: socket)
    }

    /// Sends `state` as one datagram to `socket`: a path (`/run/…`), or a
    /// name in the abstract namespace when it starts with `@` (the `@`
    /// stands for the leading NUL byte). The datagram socket is opened
    /// close-on-exec for the one message and sent with `MSG_NOSIGNAL`.
    /// Answers whether the whole message was sent; false for any other form
    /// of address (systemd's `vsock:` addresses are not supported).
    @discardableResult
    public static func notify(_ state: String, to socket: String) -> Bool {
        guard let address = UnixSocketAddress(socket) else { return false }
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let message = Array(state.utf8)
        let sent = message.withUnsafeBytes { bytes in
            address.withSockaddr { name, length in
                retryingInterrupted { sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), name, length) }
            }
        }
        return sent == message.count
    }

    // MARK: Watchdog

    /// The watchdog interval in microseconds when the service manager
    /// expects `WATCHDOG=1` pings (`WatchdogSec=`), as
    /// `sd_watchdog_enabled(0, &usec)` answers it; nil otherwise.
    public static func watchdogMicroseconds() -> UInt64? {
        watchdogMicroseconds(usec: variable("WATCHDOG_USEC"), pid: variable("WATCHDOG_PID"), processID: getpid())
    }

    /// The rule of `sd_watchdog_enabled`: `WATCHDOG_USEC` is a positive
    /// number of microseconds (not infinity, `UINT64_MAX`), and it is meant
    /// for this process when `WATCHDOG_PID` is unset or is `processID` (a
    /// child that inherited the variables does not ping).
    public static func watchdogMicroseconds(usec: String?, pid: String?, processID: Int32) -> UInt64? {
        guard let usec, let value = UInt64(usec), value > 0, value != .max else { return nil }
        if let pid, parseProcessID(pid) != processID { return nil }
        return value
    }

    // MARK: Socket activation

    /// The sockets passed by socket activation, with their names
    /// (`FileDescriptorName=`, `LISTEN_FDNAMES`), as
    /// `sd_listen_fds_with_names(1, &names)` answers them: empty when none
    /// were passed to this process. Each is made close-on-exec, and
    /// `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` are removed from the
    /// environment (also when they were not for this process), so no child
    /// inherits them. Call it once, early, before threads that read the
    /// environment start.
    public static func listenFileDescriptors() -> [(fd: Int32, name: String)] {
        takeListenFileDescriptors(
            first: firstListenFileDescriptor, processID: getpid(), variable: variable, unset: { _ = unsetenv($0) })
    }

    /// `listenFileDescriptors()` with its environment, process and first
    /// descriptor given (tests): reads the variables with `variable`,
    /// removes them with `unset`, makes the descriptors close-on-exec.
    static func takeListenFileDescriptors(
        first: Int32, processID: Int32, variable: (String) -> String?, unset: (String) -> Void
    ) -> [(fd: Int32, name: String)] {
        let pid = variable("LISTEN_PID")
        let count = variable("LISTEN_FDS")
        let names = variable("LISTEN_FDNAMES")
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unset(name) }
        guard let n = listenFileDescriptorCount(pid: pid, count: count, processID: processID, first: first) else {
            return []
        }
        // As libsystemd: every passed descriptor is made close-on-exec, even when the names turn out wrong.
        for fd in first..<first + n {
            let flags = fcntl(fd, F_GETFD)
            guard flags >= 0, fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0 else { return [] }
        }
        guard let named = listenFileDescriptorNames(names, count: n) else { return [] }
        return named.enumerated().map { (first + Int32($0.offset), $0.element) }
    }

    /// The descriptors that `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES`
    /// pass to the process `processID`, starting at `first` (3), with their
    /// names; nothing is changed. Empty when `LISTEN_PID` is not
    /// `processID` (the variables were inherited from the process they were
    /// meant for), when `LISTEN_FDS` is not a positive count, or when
    /// `LISTEN_FDNAMES` (colon-separated) names a different number of
    /// descriptors. Without `LISTEN_FDNAMES`, each is named `unknown`.
    public static func listenFileDescriptors(
        pid: String?, count: String?, names: String?, processID: Int32, first: Int32 = firstListenFileDescriptor
    ) -> [(fd: Int32, name: String)] {
        guard let n = listenFileDescriptorCount(pid: pid, count: count, processID: processID, first: first),
            let named = listenFileDescriptorNames(names, count: n)
        else { return [] }
        return named.enumerated().map { (first + Int32($0.offset), $0.element) }
    }

    private static func listenFileDescriptorCount(pid: String?, count: String?, processID: Int32, first: Int32)
        -> Int32?
    {
        guard let pid, parseProcessID(pid) == processID, let count, let n = Int32(count), n > 0,
            n <= Int32.max - first
        else { return nil }
        return n
    }

    /// `LISTEN_FDNAMES` split at every `:` (an empty name stays a name); nil when their number is not `count`.
    private static func listenFileDescriptorNames(_ names: String?, count: Int32) -> [String]? {
        guard let names else { return Array(repeating: "unknown", count: Int(count)) }
        let split = names.isEmpty ? [] : names.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        return split.count == Int(count) ? split : nil
    }

    // MARK: Helpers

    private static func variable(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

    /// A process id: a positive decimal number.
    private static func parseProcessID(_ text: String) -> Int32? {
        guard let pid = Int32(text), pid > 0 else { return nil }
        return pid
    }
}

/// Writes log entries to journald with its native protocol
/// (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/), as `sd_journal_sendv(3)`
/// does, without libsystemd.
///
/// An entry is one datagram to `/run/systemd/journal/socket` holding its
/// fields, each `NAME=value` and a newline; a value with a newline in it is
/// sent in the binary form: the name, a newline, the value's length as a
/// 64-bit little-endian number, the value, a newline. An entry too large
/// for a datagram (`EMSGSIZE`; `ENOBUFS` or `EAGAIN` alike) is written to
/// a memfd, sealed so it can no longer change, and the memfd is passed as
/// the datagram's only content (`SCM_RIGHTS`); journald reads the entry
/// from it.
///
/// The socket is opened once, close-on-exec, with an 8 MiB send buffer
/// asked for (the kernel grants up to twice `net.core.wmem_max`), and
/// shared by every thread: each entry is one `sendto`, and sends are
/// blocking, as libsystemd's are.
public final class JournalWriter: Sendable {
    /// journald's native socket.
    public static let defaultSocketPath = "/run/systemd/journal/socket"
    /// The send buffer asked for: larger entries than the kernel grants go in a memfd.
    public static let requestedSendBufferSize: Int32 = 8 << 20
    /// The writer of the process's log, to journald's socket (opened on first use).
    public static let shared = JournalWriter()

    /// Where entries are sent (a test's socket in tests).
    public let socketPath: String
    private let address: UnixSocketAddress?
    private let requestedSendBufferSize: Int32
    /// The datagram socket, or -1 when it could not be opened (each send then opens one for itself).
    private let fd: Int32

    /// `sendBufferSize`: what is asked for the socket's send buffer (a smaller one in tests, so that a
    /// modest entry takes the memfd path).
    public init(socketPath: String = JournalWriter.defaultSocketPath, sendBufferSize: Int32 = requestedSendBufferSize) {
        self.socketPath = socketPath
        self.requestedSendBufferSize = sendBufferSize
        address = UnixSocketAddress(socketPath)
        fd = Self.openSocket(sendBufferSize: sendBufferSize)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// The socket's send buffer as the kernel set it: an entry larger than
    /// this (less a few bytes of bookkeeping) does not fit in a datagram.
    public var sendBufferSize: Int {
        var size: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard fd >= 0, getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0 else { return 0 }
        return Int(size)
    }

    /// Sends one entry of `NAME=value` fields. Answers whether journald's
    /// socket took it: false when `fields` is empty or a field has no `=`,
    /// when nothing listens on the socket (unlike libsystemd, which then
    /// answers success and drops the entry), or when neither a datagram nor
    /// a memfd could carry it.
    @discardableResult
    public func send(_ fields: [String]) -> Bool {
        guard let datagram = Self.datagram(fields), let address else { return false }
        let socket = fd >= 0 ? fd : Self.openSocket(sendBufferSize: requestedSendBufferSize)
        guard socket >= 0 else { return false }
        defer { if socket != fd { close(socket) } }
        let sent = datagram.withUnsafeBytes { bytes in
            address.withSockaddr { name, length in
                retryingInterrupted { sendto(socket, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), name, length) }
            }
        }
        if sent >= 0 { return sent == datagram.count }
        switch errno {
        case EMSGSIZE, ENOBUFS, EAGAIN: return Self.sendInMemoryFile(datagram, socket: socket, to: address)
        default: return false
        }
    }

    /// The native protocol's serialization of `fields`: what is sent, in a
    /// datagram or a memfd. Nil when `fields` is empty or a field has no `=`.
    public static func datagram(_ fields: [String]) -> [UInt8]? {
        guard !fields.isEmpty else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(fields.reduce(0) { $0 + $1.utf8.count + 9 })
        for field in fields {
            let bytes = Array(field.utf8)
            guard let equals = bytes.firstIndex(of: UInt8(ascii: "=")) else { return nil }
            let value = bytes[(equals + 1)...]
            if value.contains(UInt8(ascii: "\n")) {
                out.append(contentsOf: bytes[..<equals])
                out.append(UInt8(ascii: "\n"))
                withUnsafeBytes(of: UInt64(value.count).littleEndian) { out.append(contentsOf: $0) }
                out.append(contentsOf: value)
            } else {
                out.append(contentsOf: bytes)
            }
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }

    private static func openSocket(sendBufferSize: Int32) -> Int32 {
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var size = sendBufferSize
        // Best effort: an entry larger than the buffer granted goes in a memfd.
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// Writes `datagram` to a sealed memfd and sends the memfd alone (`SCM_RIGHTS`) to `address`.
    private static func sendInMemoryFile(_ datagram: [UInt8], socket: Int32, to address: UnixSocketAddress) -> Bool {
        let file = memfd_create("journal-entry", UInt32(MFD_CLOEXEC | MFD_ALLOW_SEALING))
        guard file >= 0 else { return false }
        defer { close(file) }
        let written = datagram.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let n = retryingInterrupted { write(file, bytes.baseAddress! + offset, bytes.count - offset) }
                guard n > 0 else { return false }
                offset += n
            }
            return true
        }
        // journald maps the file only once it can no longer change (or it would have to copy it).
        guard written, fcntl(file, FileSeal.add, FileSeal.all) == 0 else { return false }
        // One control message, SOL_SOCKET / SCM_RIGHTS with the descriptor (CMSG_SPACE and CMSG_LEN by hand).
        let align = MemoryLayout<Int>.size
        func aligned(_ n: Int) -> Int { (n + align - 1) & ~(align - 1) }
        let header = aligned(MemoryLayout<cmsghdr>.size)
        let space = header + aligned(MemoryLayout<Int32>.size)
        let control = UnsafeMutableRawPointer.allocate(byteCount: space, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: space)
        control.storeBytes(
            of: header + MemoryLayout<Int32>.size, toByteOffset: MemoryLayout<cmsghdr>.offset(of: \.cmsg_len)!,
            as: Int.self)
        control.storeBytes(
            of: SOL_SOCKET, toByteOffset: MemoryLayout<cmsghdr>.offset(of: \.cmsg_level)!, as: Int32.self)
        control.storeBytes(
            of: Int32(SCM_RIGHTS), toByteOffset: MemoryLayout<cmsghdr>.offset(of: \.cmsg_type)!, as: Int32.self)
        control.storeBytes(of: file, toByteOffset: header, as: Int32.self)
        let sent = address.withSockaddr { name, length in
            var message = msghdr()
            message.msg_name = UnsafeMutableRawPointer(mutating: name)
            message.msg_namelen = length
            message.msg_control = control
            message.msg_controllen = space
            return retryingInterrupted { sendmsg(socket, &message, Int32(MSG_NOSIGNAL)) }
        }
        return sent >= 0
    }
}

/// The file seals of fcntl(2) (`F_ADD_SEALS`, `F_SEAL_*`: kernel ABI), which
/// the Glibc module leaves out; `<linux/fcntl.h>` would clash with glibc's
/// own `struct flock`.
enum FileSeal {
    static let add: Int32 = 1024 + 9  // F_LINUX_SPECIFIC_BASE + 9
    static let get: Int32 = 1024 + 10
    static let seal: Int32 = 0x1
    static let shrink: Int32 = 0x2
    static let grow: Int32 = 0x4
    static let write: Int32 = 0x8
    /// No more seals, no size change, no write: the file's content is final.
    static let all = seal | shrink | grow | write
}

/// A Unix socket address: a path, or a name in the abstract namespace when
/// it starts with `@` (the form of `$NOTIFY_SOCKET`: the `@` becomes the
/// leading NUL byte, and the length counts no terminating NUL).
struct UnixSocketAddress: Sendable {
    private var storage = sockaddr_un()
    let length: socklen_t

    /// Nil unless `address` is an absolute path or `@name`, fits `sun_path` and has no NUL byte.
    init?(_ address: String) {
        var bytes = Array(address.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "/") || first == UInt8(ascii: "@"), !bytes.contains(0)
        else { return nil }
        let abstract = first == UInt8(ascii: "@")
        let capacity = MemoryLayout.size(ofValue: storage.sun_path)
        guard abstract ? bytes.count > 1 && bytes.count <= capacity : bytes.count < capacity else { return nil }
        if abstract { bytes[0] = 0 }
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { $0.copyBytes(from: bytes) }
        length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}

/// `body` again while it fails with `EINTR`.
private func retryingInterrupted<T: BinaryInteger>(_ body: () -> T) -> T {
    while true {
        let result = body()
        if result != -1 || errno != EINTR { return result }
    }
}
