import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `argv` with `environment`, stdout and stderr to files, and waits.
///
/// Not Foundation's `Process`: it spawns with the calling thread's signal
/// mask, and test threads block SIGTERM, so `dbus-run-session` could never
/// stop its bus and would hang. This resets the mask and the dispositions.
func spawnAndWait(_ argv: [String], environment: [String: String], output: URL) throws -> (status: Int32, stdout: String) {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    var all = sigset_t()
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attributes, &empty)
    // Default dispositions for the signals that can be reset.
    sigdelset(&all, SIGKILL)
    sigdelset(&all, SIGSTOP)
    posix_spawnattr_setsigdefault(&attributes, &all)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, output.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, output.path + ".err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)

    let cArguments = argv.map { strdup($0) } + [nil]
    let cEnvironment = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        cArguments.forEach { free($0) }
        cEnvironment.forEach { free($0) }
    }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, argv[0], &actions, &attributes, cArguments, cEnvironment)
    guard spawned == 0 else { throw SpawnError.failed(argv[0], spawned) }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
    return (status, text)
}

enum SpawnError: Error {
    case failed(String, Int32)
}
