#if canImport(Glibc)
    import Glibc
#endif

/// The one way the programs start other programs: `posix_spawn` with the
/// signals back at their defaults and unblocked (the broker ignores SIGTERM
/// while it watches it; a child must not inherit that), descriptors above 2
/// closed, standard input `/dev/null`, and an argv that never goes through a shell.
public struct Subprocess: Sendable {
    public let pid: pid_t

    /// Starts `program` (an absolute path) with `arguments`. Standard input
    /// comes from `stdin` (nil: `/dev/null`), standard output goes to `stdout`
    /// (nil: `/dev/null`); standard error to `/dev/null` unless `inheritStandardError`.
    public static func spawn(
        program: String, arguments: [String], environment: [String: String], stdin: Int32? = nil,
        stdout: Int32? = nil, inheritStandardError: Bool = false
    ) -> Subprocess? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdin {
            posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let stdout {
            posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        if !inheritStandardError { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
        // Every other descriptor closed in the child (glibc skips ones already closed).
        let open = FileSystem.directoryEntries("/proc/self/fd") ?? []
        for fd in open.compactMap({ Int32($0) }) where fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, program, &actions, &attributes, argv, envp) == 0 else { return nil }
        return Subprocess(pid: pid)
    }

    /// Runs `program` to completion; answers its exit status (127 when it
    /// could not be started, 128+N when killed by signal N) and its standard output.
    public static func run(program: String, arguments: [String], environment: [String: String]) -> (
        status: Int32, output: String
    ) {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return (127, "") }
        let child = spawn(program: program, arguments: arguments, environment: environment, stdout: fds[1])
        close(fds[1])
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while child != nil {
            let n = chunk.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            output += chunk[..<n]
        }
        close(fds[0])
        guard let child else { return (127, "") }
        return (child.wait(), String(decoding: output, as: UTF8.self))
    }

    /// Runs `argv` (its program found on `PATH`) to completion; nil when the program is not installed.
    public static func run(_ argv: [String], environment: [String: String]) -> (status: Int32, output: String)? {
        guard let program = findProgram(argv[0], environment: environment) else { return nil }
        return run(program: program, arguments: Array(argv.dropFirst()), environment: environment)
    }

    /// Waits for the child and reaps it: its exit status, or 128+N when killed by signal N.
    public func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return 127 }
        }
        return Self.exitCode(status)
    }

    /// The exit status if the child has ended (and reaps it), nil while it runs.
    public func poll() -> Int32? {
        var status: Int32 = 0
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == 0 { return nil }
        return rc == pid ? Self.exitCode(status) : 127
    }

    /// Reaps the child whenever it ends, on a thread of its own, so that a
    /// long-running child (a browser) leaves no zombie.
    public func reapInBackground() {
        let pid = pid
        PosixThread.detach(name: "reap-child") {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
    }

    /// The absolute path of `name` on `$PATH` (default `/usr/local/bin:/usr/bin:/bin`), if executable.
    public static func findProgram(_ name: String, environment: [String: String]) -> String? {
        if name.hasPrefix("/") { return access(name, X_OK) == 0 ? name : nil }
        let path = environment["PATH"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            let candidate = dir + "/" + name
            if access(candidate, X_OK) == 0 { return String(candidate) }
        }
        return nil
    }

    private static func exitCode(_ status: Int32) -> Int32 {
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }
}
