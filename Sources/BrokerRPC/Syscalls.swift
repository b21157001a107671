import Glibc

// Every system call of BrokerRPC goes through this file: EINTR is retried
// here and nowhere else, and failures become `Errno` values.

/// A raw `errno` value with readable names for the ones this library handles.
public struct Errno: Error, RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    public static let interrupted = Errno(rawValue: EINTR)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let noSuchFile = Errno(rawValue: ENOENT)
    public static let notDirectory = Errno(rawValue: ENOTDIR)
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    public static let permissionDenied = Errno(rawValue: EACCES)
    public static let notPermitted = Errno(rawValue: EPERM)
    public static let tooManyOpenFiles = Errno(rawValue: EMFILE)
    public static let tooManyOpenFilesInSystem = Errno(rawValue: ENFILE)
    public static let brokenPipe = Errno(rawValue: EPIPE)
    public static let connectionReset = Errno(rawValue: ECONNRESET)
    public static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    public static let addressInUse = Errno(rawValue: EADDRINUSE)
    public static let invalidArgument = Errno(rawValue: EINVAL)

    private static let names: [Int32: String] = [
        EINTR: "EINTR", EAGAIN: "EAGAIN", ENOENT: "ENOENT", ENOTDIR: "ENOTDIR", ECONNREFUSED: "ECONNREFUSED",
        EACCES: "EACCES", EPERM: "EPERM", EMFILE: "EMFILE", ENFILE: "ENFILE", EPIPE: "EPIPE", ECONNRESET: "ECONNRESET",
        ENAMETOOLONG: "ENAMETOOLONG", EADDRINUSE: "EADDRINUSE", EINPROGRESS: "EINPROGRESS", EINVAL: "EINVAL",
        ENOTSOCK: "ENOTSOCK",
    ]

    /// The symbolic name (`EAGAIN`), or the number.
    public var description: String { Self.names[rawValue] ?? "errno \(rawValue)" }

    static var current: Errno { Errno(rawValue: errno) }
}

/// Credentials of a socket peer: the layout of Linux's `struct ucred`
/// (which Glibc only declares under `_GNU_SOURCE`).
struct PeerCredentials {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// What `lstat` says about a path.
struct FileStatus: Equatable {
    var isSocket: Bool
    var isDirectory: Bool
    var device: UInt64
    var inode: UInt64
}

enum Syscalls {
    /// Runs `body` until it does not fail with EINTR; -1 becomes the errno.
    @inline(__always)
    private static func retrying<T: BinaryInteger>(_ body: () -> T) throws(Errno) -> T {
        while true {
            let result = body()
            if result != -1 { return result }
            let error = Errno.current
            if error != .interrupted { throw error }
        }
    }

    static var effectiveUID: UInt32 { geteuid() }

    static func unixStreamSocket() throws(Errno) -> Int32 {
        try retrying { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
    }

    /// Calls `body` with a `sockaddr_un` for `path`; `.nameTooLong` when it does not fit.
    private static func withAddress<R>(
        _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R
    ) throws(Errno) -> R {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity, !bytes.contains(0) else { throw .nameTooLong }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    static func bind(_ fd: Int32, path: String) throws(Errno) {
        let result = try withAddress(path) { address, length in Glibc.bind(fd, address, length) }
        if result == -1 { throw Errno.current }
    }

    /// Connects; EINTR on a blocking connect leaves it in progress, so it is not retried.
    static func connect(_ fd: Int32, path: String) throws(Errno) {
        let result = try withAddress(path) { address, length in Glibc.connect(fd, address, length) }
        if result == -1 { throw Errno.current }
    }

    static func listen(_ fd: Int32, backlog: Int32) throws(Errno) {
        _ = try retrying { Glibc.listen(fd, backlog) }
    }

    /// Accepts one connection; nil when none is pending.
    static func accept(_ fd: Int32) throws(Errno) -> Int32? {
        do {
            return try retrying { Glibc.accept(fd, nil, nil) }
        } catch .wouldBlock {
            return nil
        }
    }

    /// Sets `O_NONBLOCK` and `FD_CLOEXEC`.
    static func makeNonBlockingCloseOnExec(_ fd: Int32) throws(Errno) {
        let flags = try retrying { fcntl(fd, F_GETFL) }
        _ = try retrying { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        let descriptorFlags = try retrying { fcntl(fd, F_GETFD) }
        _ = try retrying { fcntl(fd, F_SETFD, descriptorFlags | FD_CLOEXEC) }
    }

    static func peerCredentials(_ fd: Int32) throws(Errno) -> PeerCredentials {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        _ = try retrying { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) }
        guard length == socklen_t(MemoryLayout<PeerCredentials>.size) else { throw .invalidArgument }
        return credentials
    }

    /// Whether `fd` is a listening stream socket (for a descriptor passed in by systemd).
    static func isListeningStreamSocket(_ fd: Int32) throws(Errno) -> Bool {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying { getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &length) }
        var type: Int32 = 0
        length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying { getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) }
        return value != 0 && type == Int32(SOCK_STREAM.rawValue)
    }

    /// Reads into `buffer` (up to its count); 0 at end of stream.
    static func read(_ fd: Int32, into buffer: inout [UInt8]) throws(Errno) -> Int {
        try retrying { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
    }

    /// Sends `bytes[offset...]` without ever raising SIGPIPE; returns how many were sent.
    static func send(_ fd: Int32, _ bytes: [UInt8], from offset: Int) throws(Errno) -> Int {
        try retrying {
            bytes.withUnsafeBytes { all in
                Glibc.send(fd, all.baseAddress.map { $0 + offset }, all.count - offset, Int32(MSG_NOSIGNAL))
            }
        }
    }

    /// Closes once: on Linux the descriptor is gone even when close reports EINTR.
    static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    static func shutdownWrite(_ fd: Int32) {
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    /// Waits for `events` on `fd`; returns the revents, 0 on timeout.
    static func poll(_ fd: Int32, events: Int16, timeoutMilliseconds: Int32) throws(Errno) -> Int16 {
        var descriptor = pollfd(fd: fd, events: events, revents: 0)
        let ready = try retrying { Glibc.poll(&descriptor, 1, timeoutMilliseconds) }
        return ready == 0 ? 0 : descriptor.revents
    }

    static func lstat(_ path: String) throws(Errno) -> FileStatus? {
        var status = stat()
        do {
            _ = try retrying { Glibc.lstat(path, &status) }
        } catch .noSuchFile {
            return nil
        }
        let type = status.st_mode & S_IFMT
        return FileStatus(
            isSocket: type == S_IFSOCK, isDirectory: type == S_IFDIR,
            device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }

    static func mkdir(_ path: String, mode: mode_t) throws(Errno) {
        _ = try retrying { Glibc.mkdir(path, mode) }
    }

    static func chmod(_ path: String, mode: mode_t) throws(Errno) {
        _ = try retrying { Glibc.chmod(path, mode) }
    }

    static func unlink(_ path: String) throws(Errno) {
        _ = try retrying { Glibc.unlink(path) }
    }
}
