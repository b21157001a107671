import BrokerCore
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

@testable import BrokerVault

/// The vault's failure modes, each in a child process (`vault-probe`) with
/// its own environment: libsecret keeps one Secret Service connection per
/// process, and the shared test keyring must never be locked under the
/// other tests.
@Suite(.dedicatedThread) struct VaultFailureTests {
    /// `vault-probe`, built next to the test bundle.
    static func probePath() throws -> String {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let path = URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("vault-probe").path
        try #require(FileManager.default.isExecutableFile(atPath: path), "vault-probe is not built at \(path)")
        return path
    }

    /// Runs `/bin/sh -c script` with `environment` (killed after `seconds`), returns its stdout lines.
    static func shell(_ script: String, environment: [String: String], in directory: URL, seconds: Int = 60) throws
        -> [String]
    {
        let output = directory.appendingPathComponent("out-\(UUID().uuidString).txt")
        let result = try spawnAndWait(
            ["/usr/bin/timeout", "-s", "KILL", "\(seconds)", "/bin/sh", "-c", script], environment: environment,
            output: output.path, errors: output.path + ".err")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    static func baseEnvironment(_ directory: URL) -> [String: String] {
        [
            "PATH": "/usr/bin:/bin", "HOME": directory.path, "XDG_DATA_HOME": directory.appendingPathComponent("data").path,
            "XDG_RUNTIME_DIR": directory.appendingPathComponent("run").path,
            "XDG_CONFIG_HOME": directory.appendingPathComponent("config").path, "LANG": "C.UTF-8",
        ]
    }

    static func temporaryDirectory() throws -> URL {
        // Short: a bus socket is made inside (Unix socket paths fit 108 bytes).
        let url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "blv-\(UUID().uuidString.prefix(8))")
        for sub in ["data", "run", "config"] {
            try FileManager.default.createDirectory(
                at: url.appendingPathComponent(sub), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        }
        return url
    }

    @Test func aLockedKeyringIsReportedAsLocked() throws {
        let probe = try Self.probePath()
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = """
            exec dbus-run-session -- sh -c '
              printf %s test-keyring-pass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
              gdbus wait --session --timeout 10 org.freedesktop.secrets
              "\(probe)" store c1 a1 before-lock
              gdbus call --session --dest org.freedesktop.secrets --object-path /org/freedesktop/secrets \
                --method org.freedesktop.Secret.Service.Lock "[\\"/org/freedesktop/secrets/collection/login\\"]" >/dev/null
              "\(probe)" health
              "\(probe)" store c1 a2 while-locked
              "\(probe)" lookup c1 a1
              "\(probe)" remove c1 a1
            '
            """
        let lines = try Self.shell(script, environment: Self.baseEnvironment(directory), in: directory)
        try #require(lines.count == 5, "the private keyring did not run: \(lines)")
        #expect(lines[0].hasPrefix("ok "))
        #expect(lines[1].hasPrefix("available=true locked=true"))
        for line in lines[2...4] {
            #expect(line.hasPrefix("locked: The login keyring is locked. Unlock it"), "\(line)")
            #expect(!line.contains("before-lock") && !line.contains("while-locked"), "no secret in a message")
        }
    }

    @Test func noSessionBusIsUnavailableQuickly() throws {
        let probe = try Self.probePath()
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var environment = Self.baseEnvironment(directory)
        // A bus address that names nothing, and no address at all (libsecret then tries to autolaunch).
        environment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(directory.path)/no-such-bus"
        let missing = try Self.shell(
            "\"\(probe)\" store c1 a1 s; \"\(probe)\" health", environment: environment, in: directory)
        environment["DBUS_SESSION_BUS_ADDRESS"] = nil
        let unset = try Self.shell("\"\(probe)\" lookup c1 a1", environment: environment, in: directory)
        for line in missing.prefix(1) + unset {
            #expect(line.hasPrefix("unavailable: The Secret Service is not available"), "\(line)")
            #expect(line.contains("gnome-keyring-daemon") && line.contains("DBUS_SESSION_BUS_ADDRESS"))
            let ms = Int(line.split(separator: "=").last ?? "") ?? .max
            #expect(ms < 3_000, "\(line)")
        }
        #expect(missing.count == 2 && missing[1].hasPrefix("available=false locked=false"), "\(missing)")
    }

    @Test func aBusWithoutASecretServiceIsUnavailable() throws {
        let probe = try Self.probePath()
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // A bus of its own with no service directories, so nothing can be
        // activated as org.freedesktop.secrets.
        let configuration = directory.appendingPathComponent("bus.conf")
        try writeSessionBusConfiguration(
            at: configuration.path, socketDirectory: directory.appendingPathComponent("run").path, services: false)
        let lines = try Self.shell(
            "exec dbus-run-session --config-file='\(configuration.path)' -- sh -c '\"\(probe)\" store c1 a1 s; \"\(probe)\" health'",
            environment: Self.baseEnvironment(directory), in: directory)
        try #require(lines.count == 2, "\(lines)")
        #expect(lines[0].hasPrefix("unavailable: The Secret Service is not available"), "\(lines[0])")
        #expect(lines[1].hasPrefix("available=false"), "\(lines[1])")
    }
}
