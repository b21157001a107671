import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// `scripts/with-keyring`, the real script, from an environment without a
/// session bus (as on CI), with a temporary directory of the test's own as
/// its `$TMPDIR` and `$HOME`.
@Suite("scripts/with-keyring", .dedicatedThread)
struct WithKeyringScriptTests {
    static let script = repositoryRoot + "/scripts/with-keyring"

    static func run(_ tmp: String, _ shell: String) throws -> (status: Int32, out: String, err: String) {
        let environment = [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp,
            "LANG": "C.UTF-8", "WITH_KEYRING": script,
        ]
        return try runProgram(script, ["/bin/sh", "-c", shell], environment: environment, timeout: 60)
    }

    /// A with-keyring run inside another (scripts/demo run by the test suite)
    /// uses the keyring that is there and leaves it running: it once took
    /// the outer run's keyring for its own, from the environment it
    /// inherited, and stopped it when it ended, so every later keyring call
    /// of the outer run failed ("The name :1.0 was not provided by any
    /// .service files").
    @Test func aNestedRunLeavesTheOuterKeyringRunning() throws {
        let tmp = try TemporaryDirectory("blk")
        let run = try Self.run(
            tmp.path,
            """
            owner() {
              gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \\
                --method org.freedesktop.DBus.GetConnectionUnixProcessID org.freedesktop.secrets 2>&1 | tr -dc '0-9'
            }
            echo "before=$(owner)"
            "$WITH_KEYRING" sh -c 'echo nested=$DBUS_SESSION_BUS_ADDRESS'
            echo "outer=$DBUS_SESSION_BUS_ADDRESS"
            echo "after=$(owner)"
            printf %s kept | timeout 10 secret-tool store --label=with-keyring test with-keyring
            echo "lookup=$(timeout 10 secret-tool lookup test with-keyring)"
            """)
        #expect(run.status == 0, "\(run.out)\n\(run.err)")
        var values: [String: String] = [:]
        for line in run.out.split(separator: "\n") {
            let pair = line.split(separator: "=", maxSplits: 1).map(String.init)
            if pair.count == 2 { values[pair[0]] = pair[1] }
        }
        let before = try #require(values["before"], "\(run.out)\n\(run.err)")
        #expect(!before.isEmpty, "no keyring on the outer bus: \(run.out)\n\(run.err)")
        #expect(values["nested"] == values["outer"], "the nested run made a bus of its own: \(run.out)")
        #expect(values["after"] == before, "the nested run stopped the outer keyring: \(run.out)\n\(run.err)")
        #expect(values["lookup"] == "kept", "the outer keyring no longer serves: \(run.out)\n\(run.err)")
        #expect(
            (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) == [],
            "left behind in TMPDIR: \((try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? [])")
    }
}
