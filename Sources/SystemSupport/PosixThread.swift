#if canImport(Glibc)
    import Glibc
#endif

/// A detached POSIX thread for blocking work (a `waitpid`, a GLib main loop):
/// what Foundation's `Thread` gave, without Foundation.
public enum PosixThread {
    /// Runs `body` on a new detached thread named `name` (the kernel keeps
    /// the first 15 bytes). Returns false when no thread could be made.
    @discardableResult
    public static func detach(name: String? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
        let context = Unmanaged.passRetained(ThreadBody(name: name, run: body)).toOpaque()
        var thread = pthread_t()
        guard pthread_create(&thread, nil, threadEntry, context) == 0 else {
            Unmanaged<ThreadBody>.fromOpaque(context).release()
            return false
        }
        pthread_detach(thread)
        return true
    }

    /// Names the calling thread (`/proc/thread-self/comm`, what `pthread_setname_np` writes).
    static func setName(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}

private final class ThreadBody: Sendable {
    let name: String?
    let run: @Sendable () -> Void
    init(name: String?, run: @escaping @Sendable () -> Void) {
        self.name = name
        self.run = run
    }
}

private func threadEntry(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let context else { return nil }
    let body = Unmanaged<ThreadBody>.fromOpaque(context).takeRetainedValue()
    if let name = body.name { PosixThread.setName(name) }
    body.run()
    return nil
}
