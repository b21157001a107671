import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A session bus configuration like the system's session.conf, but listening
/// in `socketDirectory` (not /tmp), with the standard service directories
/// (so `$XDG_DATA_HOME/dbus-1/services` activates) unless `services` is false.
public func writeSessionBusConfiguration(at path: String, socketDirectory: String, services: Bool = true) throws {
    let text = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
          "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <keep_umask/>
          <listen>unix:dir=\(socketDirectory)</listen>
          <auth>EXTERNAL</auth>
          \(services ? "<standard_session_servicedirs/>" : "")
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>

        """
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
}

/// Runs `program` with the process's environment plus `env`; answers its standard output.
@discardableResult
public func runWithEnvironment(_ program: String, _ args: [String], env: [String: String]) throws -> String {
    var environment = ProcessInfo.processInfo.environment
    for (k, v) in env { environment[k] = v }
    return try spawnAndWait([program] + args, environment: environment).stdout
}

/// A dbus-daemon and an unlocked gnome-keyring of one test's own, so that
/// what the test stores, removes or locks never meets another test's items
/// (the broker's session item is keyed by the client id alone, and tests
/// running in parallel share client ids). Both fork away from the test:
/// `stop()` (also run by `deinit`, and when `init` fails half-way) stops each
/// by its pid.
public final class PrivateKeyring: @unchecked Sendable {
    // Safe: `stopped` is only touched by `stop()`, which the owning test (or
    // the last reference's deinit) calls from one task.
    public let address: String
    public let busPid: Int32
    public private(set) var keyringPid: Int32 = 0
    public let dir: String
    private var stopped = false

    public init(dir: String) throws {
        self.dir = dir
        try FileManager.default.createDirectory(atPath: dir + "/run", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true)
        chmod(dir + "/run", 0o700)
        try writeSessionBusConfiguration(at: dir + "/bus.conf", socketDirectory: dir + "/run", services: false)
        let launch = try Self.run(
            "/usr/bin/dbus-daemon",
            ["--config-file=\(dir)/bus.conf", "--fork", "--print-address=1", "--print-pid=1"], env: [:])
        let lines = launch.split(separator: "\n").map(String.init)
        guard lines.count >= 2, let pid = Int32(lines[1]) else { throw HarnessError("dbus-daemon did not start: \(launch)") }
        address = lines[0]
        busPid = pid
        do {
            let env = [
                "DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": dir + "/run", "XDG_DATA_HOME": dir + "/data",
            ]
            // gnome-keyring prints its environment once it is on the bus; the
            // default collection is made by storing one item.
            let owner = try Self.run(
                "/bin/sh",
                [
                    "-c",
                    """
                    printf %s private-pass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
                    gdbus wait --session --timeout 10 org.freedesktop.secrets
                    gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
                      --method org.freedesktop.DBus.GetConnectionUnixProcessID org.freedesktop.secrets
                    printf x | secret-tool store --label=probe test probe
                    """,
                ], env: env)
            // "(uint32 1234,)"
            keyringPid = Int32(owner.split(whereSeparator: { !$0.isNumber }).last ?? "") ?? 0
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// The environment that puts a program on this bus.
    public var environment: [String: String] { ["DBUS_SESSION_BUS_ADDRESS": address] }

    public func lock() throws {
        _ = try Self.run(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", "/org/freedesktop/secrets",
                "--method", "org.freedesktop.Secret.Service.Lock", "['/org/freedesktop/secrets/collection/login']",
            ], env: environment)
    }

    /// `secret-tool lookup` on this keyring: the secret of the item with these attributes.
    public func lookup(_ attributes: [String: String]) -> String? {
        keyringLookup(attributes, busAddress: address)
    }

    /// Stops the keyring, then the bus, and waits until both are gone. Idempotent.
    public func stop() {
        if stopped { return }
        stopped = true
        terminate(keyringPid)
        terminate(busPid)
    }

    @discardableResult
    public static func run(_ program: String, _ args: [String], env: [String: String]) throws -> String {
        try runWithEnvironment(program, args, env: env)
    }
}

/// `secret-tool lookup` for a broker item (the test reads the real keyring):
/// on the bus at `busAddress`, else the session's.
public func keyringLookup(_ attributes: [String: String], busAddress: String? = nil) -> String? {
    var environment = ProcessInfo.processInfo.environment
    if let busAddress { environment["DBUS_SESSION_BUS_ADDRESS"] = busAddress }
    let argv = ["/usr/bin/secret-tool", "lookup"] + attributes.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
    guard let result = try? spawnAndWait(argv, environment: environment) else { return nil }
    return result.status == 0 ? result.stdout : nil
}
