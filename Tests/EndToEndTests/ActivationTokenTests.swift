import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Focus on Wayland (docs/rpc.md): the app's `activationToken` reaches the
/// browser the broker starts as `XDG_ACTIVATION_TOKEN` and
/// `DESKTOP_STARTUP_ID`, for that launch only; the broker's own stale
/// variables never do; the token is never logged or stored. The real
/// broker, over its socket, its bus name and the CLI, with a "browser" that
/// writes down what it was given.
@Suite("Focus tokens for the browser", .dedicatedThread)
struct ActivationTokenTests {
    /// A harness whose browser appends one line per launch to `launches`:
    /// `xdg=VALUE dsi=VALUE` (`-` when the variable is not set).
    static func world() throws -> (h: Harness, launches: String) {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        let launches = h.dir + "/launches"
        let script = h.dir + "/browser.sh"
        let text = """
            #!/bin/sh
            printf 'xdg=%s dsi=%s\\n' "${XDG_ACTIVATION_TOKEN--}" "${DESKTOP_STARTUP_ID--}" >> '\(launches)'

            """
        try installScript(text, at: script)
        h.brokerEnvironment["BROWSER"] = script + " %s"
        // Started directly (not through systemd-run), whatever runs the tests.
        h.brokerEnvironment["INVOCATION_ID"] = ""
        h.brokerEnvironment["BROWSER_LOGIN_FLATPAK_INFO"] = ""
        // What launched the broker handed it tokens long since spent.
        h.brokerEnvironment["XDG_ACTIVATION_TOKEN"] = "stale-broker-xdg-token"
        h.brokerEnvironment["DESKTOP_STARTUP_ID"] = "stale-broker-startup-id"
        return (h, launches)
    }

    /// Writes an executable script. install(1) writes it in a process of its
    /// own: a file this process held open for writing could be inherited by a
    /// child another test forks meanwhile, and exec would then fail (ETXTBSY).
    static func installScript(_ text: String, at path: String) throws {
        let source = path + ".text"
        guard FileManager.default.createFile(atPath: source, contents: Data(text.utf8)) else {
            throw HarnessError("cannot write \(source)")
        }
        let installed = try runProgram("/usr/bin/install", ["-m", "755", source, path])
        guard installed.status == 0 else { throw HarnessError("install failed: \(installed.err)") }
    }

    /// The launch lines once there are `count` of them.
    static func launches(_ path: String, count: Int) throws -> [String] {
        var lines: [String] = []
        try waitUntil(10, "\(count) browser launches") {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            lines = text.split(separator: "\n").map(String.init)
            return lines.count >= count
        }
        return lines
    }

    static func token(_ name: String) -> String { name + "_" + UUID().uuidString.replacingOccurrences(of: "-", with: "") }

    @Test func theTokenReachesTheBrowserForOneLaunchAndIsNeverKept() throws {
        let (h, path) = try Self.world()
        defer { h.stopAll() }
        try DBusAPITests.start(h)
        let rpc = try h.rpc()
        let startToken = Self.token("wayland-start")
        let resumeToken = Self.token("x11-resume")
        let busToken = Self.token("dbus-start")

        let attempt = try rpc.call(
            "login.start", params: ["client": "com.example.notes", "activationToken": .string(startToken)])
        #expect(attempt["state"] == "waiting")
        let attemptId = try #require(attempt["attemptId"]?.stringValue)
        #expect(try Self.launches(path, count: 1)[0] == "xdg=\(startToken) dsi=\(startToken)")

        _ = try rpc.call("login.resume", params: ["attemptId": .string(attemptId), "activationToken": .string(resumeToken)])
        #expect(try Self.launches(path, count: 2)[1] == "xdg=\(resumeToken) dsi=\(resumeToken)")

        // Without a token: neither variable, not the broker's own, not the last app's.
        _ = try rpc.call("login.resume", params: ["attemptId": .string(attemptId)])
        #expect(try Self.launches(path, count: 3)[2] == "xdg=- dsi=-")
        _ = try rpc.call("login.start", params: ["client": "com.example.notes"])
        #expect(try Self.launches(path, count: 4)[3] == "xdg=- dsi=-")

        // Over D-Bus, the option goes straight through (the waiting attempt is reopened).
        let started = try DBusAPITests.ok(h, "Start", "com.example.notes", "{'activationToken': <'\(busToken)'>}")
        #expect(DBusAPITests.member("attemptId", in: started) == attemptId)
        #expect(try Self.launches(path, count: 5)[4] == "xdg=\(busToken) dsi=\(busToken)")

        // No browser, no launch: the token goes nowhere.
        _ = try rpc.call(
            "login.resume",
            params: ["attemptId": .string(attemptId), "openBrowser": false, "activationToken": .string(Self.token("unused"))])
        _ = try rpc.call("login.cancel", params: ["attemptId": .string(attemptId)])
        #expect(try Self.launches(path, count: 5).count == 5)

        // Used once, kept nowhere: not in the debug log, not in the state database.
        let log = (try? String(contentsOfFile: h.brokerLog, encoding: .utf8)) ?? ""
        #expect(log.contains("browser opened"))
        let database = h.databaseBytes()
        #expect(!database.isEmpty)
        for secret in [startToken, resumeToken, busToken, "stale-broker-xdg-token", "stale-broker-startup-id"] {
            #expect(!log.contains(secret), "the broker log holds a token")
            #expect(!database.contains(secret), "the state database holds a token")
        }
    }

    /// Under systemd the browser is started by `systemd-run --user`, whose unit
    /// gets the user manager's environment: the token goes by `--setenv=NAME`
    /// (the value from systemd-run's own environment), never in an argv. A
    /// stand-in `systemd-run` on PATH writes down its arguments and environment.
    @Test func underSystemdTheTokenGoesBySetenvNotInTheArguments() throws {
        let (h, path) = try Self.world()
        defer { h.stopAll() }
        let bin = h.dir + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        let arguments = h.dir + "/systemd-run.args"
        let text = """
            #!/bin/sh
            printf '%s\\n' "$*" >> '\(arguments)'
            printf 'xdg=%s dsi=%s\\n' "${XDG_ACTIVATION_TOKEN--}" "${DESKTOP_STARTUP_ID--}" >> '\(path)'

            """
        try Self.installScript(text, at: bin + "/systemd-run")
        h.brokerEnvironment["INVOCATION_ID"] = "0123456789abcdef"
        h.brokerEnvironment["PATH"] = bin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        try h.startBroker()
        let rpc = try h.rpc()
        let token = Self.token("wayland-unit")
        let attempt = try rpc.call(
            "login.start", params: ["client": "com.example.notes", "activationToken": .string(token)])
        let attemptId = try #require(attempt["attemptId"]?.stringValue)
        #expect(try Self.launches(path, count: 1)[0] == "xdg=\(token) dsi=\(token)")
        _ = try rpc.call("login.resume", params: ["attemptId": .string(attemptId)])
        #expect(try Self.launches(path, count: 2)[1] == "xdg=- dsi=-")
        let lines = try String(contentsOfFile: arguments, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(lines.first?.contains("--setenv=XDG_ACTIVATION_TOKEN --setenv=DESKTOP_STARTUP_ID --") == true)
        #expect(lines.last?.contains("--setenv") == false)
        #expect(!lines.joined().contains(token))
        #expect(lines.allSatisfy { $0.hasPrefix("--user ") })
    }

    /// An OpenID Connect client's sign-in opens the browser the same way (here its `Browser=`).
    @Test func aProviderSignInPassesTheTokenToo() throws {
        var launches = ""
        let world = try ProviderWorld(extraAfterStart: { h, _ in
            launches = h.dir + "/launches"
            let script = h.dir + "/browser.sh"
            try Self.installScript(
                """
                #!/bin/sh
                printf 'xdg=%s dsi=%s\\n' "${XDG_ACTIVATION_TOKEN--}" "${DESKTOP_STARTUP_ID--}" >> '\(launches)'

                """, at: script)
            h.brokerEnvironment["INVOCATION_ID"] = ""
            h.brokerEnvironment["XDG_ACTIVATION_TOKEN"] = "stale-broker-xdg-token"
            return "Browser=\(script) %u"
        })
        let rpc = try world.h.rpc()
        let token = Self.token("provider")
        let attempt = try rpc.call(
            "login.start", params: ["client": "com.example.chat", "activationToken": .string(token)])
        #expect(attempt["state"] == "waiting")
        let attemptId = try #require(attempt["attemptId"]?.stringValue)
        #expect(try Self.launches(launches, count: 1) == ["xdg=\(token) dsi=\(token)"])
        _ = try rpc.call("login.resume", params: ["attemptId": .string(attemptId)])
        #expect(try Self.launches(launches, count: 2)[1] == "xdg=- dsi=-")
        _ = try rpc.call("login.cancel", params: ["attemptId": .string(attemptId)])
        let log = (try? String(contentsOfFile: world.h.brokerLog, encoding: .utf8)) ?? ""
        #expect(!log.contains(token) && !world.h.databaseBytes().contains(token))
    }

    @Test func aMalformedTokenIsInvalidParamsAndIsNotRepeated() throws {
        let (h, path) = try Self.world()
        defer { h.stopAll() }
        try h.startBroker()
        let rpc = try h.rpc()
        let bad = ["", "has-a space", "tab\there", "new\nline", "caf\u{e9}", String(repeating: "a", count: 257)]
        for token in bad {
            let refused = try rpcFailure(
                rpc, "login.start", ["client": "com.example.notes", "activationToken": .string(token)])
            #expect(refused.code == .invalidParams)
            #expect(refused.message.contains("'activationToken' must be 1 to 256 visible ASCII characters"))
            #expect(token.isEmpty || !refused.message.contains(token))
        }
        let notAString = try rpcFailure(rpc, "login.start", ["client": "com.example.notes", "activationToken": 7])
        #expect(notAString.message == "'activationToken' must be a string")
        let resume = try rpcFailure(rpc, "login.resume", ["attemptId": "at_doesNotExist00", "activationToken": "a b"])
        #expect(resume.code == .invalidParams)
        // 256 is the limit, not past it; nothing was started by the refusals.
        let longest = String(repeating: "t", count: 256)
        _ = try rpc.call("login.start", params: ["client": "com.example.notes", "activationToken": .string(longest)])
        #expect(try Self.launches(path, count: 1) == ["xdg=\(longest) dsi=\(longest)"])
    }

    @Test func theCLIPassesItsOwnTokenOnceOrTheOneGiven() throws {
        let (h, path) = try Self.world()
        defer { h.stopAll() }
        try h.startBroker()
        let inherited = Self.token("terminal")
        var environment = h.environment()
        environment["XDG_ACTIVATION_TOKEN"] = inherited
        let cli = binDirectory + "/browser-login"
        let start = try runProgram(
            cli, ["--socket", h.socketPath, "start", "--json", "com.example.notes"], environment: environment)
        #expect(start.status == 0, "\(start.err)")
        #expect(try Self.launches(path, count: 1)[0] == "xdg=\(inherited) dsi=\(inherited)")
        let attemptId = try #require(try JSONValue.parse(Array(start.out.utf8))["attemptId"]?.stringValue)

        let given = Self.token("flag")
        let resume = try runProgram(
            cli, ["--socket", h.socketPath, "resume", "--activation-token", given, attemptId], environment: environment)
        #expect(resume.status == 0, "\(resume.err)")
        #expect(try Self.launches(path, count: 2)[1] == "xdg=\(given) dsi=\(given)")

        // An inherited value that cannot be a token is left out, not an error.
        environment["XDG_ACTIVATION_TOKEN"] = "not a token"
        let again = try runProgram(cli, ["--socket", h.socketPath, "resume", attemptId], environment: environment)
        #expect(again.status == 0, "\(again.err)")
        #expect(try Self.launches(path, count: 3)[2] == "xdg=- dsi=-")
        let refused = try runProgram(
            cli, ["--socket", h.socketPath, "resume", "--activation-token", "a b", attemptId], environment: environment)
        #expect(refused.status != 0)
        #expect(refused.err.contains("activationToken"))
    }
}
