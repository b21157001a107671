import BrokerCore

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a configuration file (a client file, broker.conf) so that no file can block or bloat the reader:
/// only a regular file is read; it is opened non-blocking (a FIFO put in its place cannot hold `open`),
/// checked with `fstat` on the descriptor that is read, and read to at most `maximumSize` bytes. Anything
/// else is refused with a problem naming the file and why.
enum ConfigFileRead {
    /// A client file or broker.conf is a few hundred bytes; this is far above any real one.
    static let maximumSize = 64 * 1024

    static func read(_ path: String) -> Result<[UInt8], ConfigProblem> {
        func refused(_ why: String) -> Result<[UInt8], ConfigProblem> {
            .failure(ConfigProblem(.error, file: path, key: nil, why))
        }
        // The name first (without opening: opening a device can have effects of its own), then the
        // descriptor itself (the name may have been replaced in between).
        var status = stat()
        guard stat(path, &status) == 0 else { return refused("cannot be read: \(errorText(errno))") }
        if let why = refusal(status) { return refused(why) }
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return refused("cannot be read: \(errorText(errno))") }
        defer { close(fd) }
        guard fstat(fd, &status) == 0 else { return refused("cannot be read: \(errorText(errno))") }
        if let why = refusal(status) { return refused(why) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while bytes.count <= maximumSize {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return refused("cannot be read: \(errorText(errno))") }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        guard bytes.count <= maximumSize else { return refused(tooLarge) }
        return .success(bytes)
    }

    private static let tooLarge =
        "is larger than \(maximumSize / 1024) KiB, the most a configuration file may hold; it is not read"

    /// Why a file of this kind or size is not read (nil: it is read).
    private static func refusal(_ status: stat) -> String? {
        let kind: String? =
            switch status.st_mode & S_IFMT {
            case S_IFREG: nil
            case S_IFIFO: "a FIFO (named pipe)"
            case S_IFDIR: "a directory"
            case S_IFCHR: "a character device"
            case S_IFBLK: "a block device"
            case S_IFSOCK: "a socket"
            default: "not a regular file"
            }
        if let kind { return "is \(kind), not a regular file; only regular files are read — remove it or put a file there" }
        return status.st_size > maximumSize ? tooLarge : nil
    }

    private static func errorText(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}
