import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The Python and Node client libraries (clients/) run their own test suites
/// against a real world: the reference server, the broker binary under the
/// harness's headless keyring, and the scripted user agent as "the browser",
/// so that a library's `start` signs in by itself. The suites read:
///
/// - `BROWSER_LOGIN_SOCKET`: the broker's socket;
/// - `BL_TEST_CLIENT`: a client any program may use (`com.example.notes`);
/// - `BL_TEST_BOUND_CLIENT`: a client whose `Peers=` names another program;
/// - `BL_TEST_EMAIL`: the account the user agent signs in with;
/// - `BL_TEST_CLI`, `BL_TEST_BIN`: the `browser-login` CLI and the binaries.
@Suite("Client libraries", .dedicatedThread)
struct ClientLibraryTests {
    /// A signed-out world and the environment a library's suite gets.
    static func world() throws -> (Harness, [String: String]) {
        let h = try Harness()
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.bound", "Bound Notes", "com.example.bound:/callback"),
        ])
        h.writeClient()
        h.writeClient(
            file: "bound.conf", id: "com.example.bound", appName: "Bound Notes",
            returnURL: "com.example.bound:/callback", extra: "Peers=/usr/bin/true")
        h.useScriptedUserAgent()
        try h.startBroker()
        var env = h.environment()
        // The user agent is the broker's; the suites are apps, not browsers.
        for name in ["BROWSER", "DEMO_SERVER_ORIGIN", "DEMO_EMAIL", "DEMO_CODE", "DEMO_DELIVER"] { env[name] = nil }
        env["BROWSER_LOGIN_SOCKET"] = h.socketPath
        env["BL_TEST_CLIENT"] = "com.example.notes"
        env["BL_TEST_BOUND_CLIENT"] = "com.example.bound"
        env["BL_TEST_EMAIL"] = h.testEmail
        env["BL_TEST_CLI"] = binDirectory + "/browser-login"
        env["BL_TEST_BIN"] = binDirectory
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return (h, env)
    }

    /// Runs a suite to its end; a failure shows its output and the broker's
    /// log. `skipped` tells, from the output, whether any test skipped: in this
    /// world every test has what it needs, so a skip is a failure.
    static func runSuite(_ argv: [String], skipped: (String) -> Bool) throws {
        let (h, env) = try world()
        let run = try runProgram(argv[0], Array(argv.dropFirst()), environment: env, directory: repositoryRoot, timeout: 600)
        let output = run.out + run.err
        #expect(
            run.status == 0,
            "\(argv.joined(separator: " ")) exited \(run.status)\n\(output)\n\(h.brokerPostMortem())")
        #expect(!skipped(output), "tests skipped in a world that has everything:\n\(output)")
    }

    @Test func thePythonLibrarysSuitePasses() throws {
        try Self.runSuite([
            "/usr/bin/python3", "-m", "unittest", "discover", "-s", "clients/python/tests", "-t", "clients/python", "-v",
        ]) { $0.contains("skipped=") }
    }

    @Test func theNodeLibrarysSuitePasses() throws {
        try Self.runSuite(["/usr/bin/node", "--test", "clients/node/test/"]) { !$0.contains("# skipped 0") }
    }

    /// The README's Python example, as written there, signs in and calls the API.
    @Test func theREADMEsPythonExampleRuns() throws {
        let readme = try String(contentsOfFile: repositoryRoot + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "```python\nfrom browser_login import Broker"))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let code = String(readme[readme.index(start.lowerBound, offsetBy: "```python\n".count)..<end.lowerBound])
        let (h, world) = try Self.world()
        var env = world
        env["PYTHONPATH"] = repositoryRoot + "/clients/python"
        let run = try runProgram("/usr/bin/python3", ["-c", code], environment: env, timeout: 120)
        #expect(run.status == 0, "\(run.out)\n\(run.err)\n\(h.brokerPostMortem())")
        #expect(run.out.contains(h.testEmail))
    }
}
