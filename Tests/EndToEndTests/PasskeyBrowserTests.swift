import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Headless Chromium with a WebAuthn virtual authenticator, driven by
/// Selenium (`scripts/passkey-agent.py`; `scripts/install-deps --browser`
/// installs Chromium, and Selenium through scripts/selenium).
enum PasskeyBrowser {
    static let agent = repositoryRoot + "/scripts/passkey-agent.py"
    /// The project's Selenium environment (scripts/selenium).
    static let python = HeadlessChromium.python
    static var isInstalled: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver")
            && (try? runProgram(python, ["-c", "import selenium"], timeout: 30))?.status == 0
    }
    /// `BL_REQUIRE_BROWSER` is set (CI): the test never skips.
    static var shouldRun: Bool {
        isInstalled || !(ProcessInfo.processInfo.environment["BL_REQUIRE_BROWSER"] ?? "").isEmpty
    }

    /// Runs the agent; answers its `name=value` lines.
    static func run(_ h: Harness, _ mode: String, _ url: String, _ environment: [String: String]) throws -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        // Chromium's profile and Selenium's files stay in the test's directory.
        for name in ["home", "tmp"] {
            try FileManager.default.createDirectory(atPath: h.dir + "/" + name, withIntermediateDirectories: true)
        }
        env["HOME"] = h.dir + "/home"
        env["TMPDIR"] = h.dir + "/tmp"
        env["PASSKEY_FILE"] = h.dir + "/passkeys.json"
        env["PASSKEY_EMAIL"] = h.testEmail
        env.merge(environment) { _, new in new }
        let result = try runProgram(python, [agent, mode, url], environment: env, timeout: 120)
        #expect(result.status == 0, "passkey-agent \(mode): \(result.err)")
        var lines: [String: String] = [:]
        for line in result.out.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { lines[String(parts[0])] = String(parts[1]) }
        }
        return lines
    }
}

/// Passkeys for real (docs/server.md, "Passkeys"): the hosted page at
/// `http://localhost:PORT` registers a passkey in Chromium after a sign-in
/// with a code, and a fresh browser holding only that passkey signs in with
/// it and continues a native attempt of the real broker to a session whose
/// `authMethod` is `passkey`. Without user verification the browser refuses.
@Suite("Passkeys in Chromium", .dedicatedThread, .enabled(if: PasskeyBrowser.shouldRun))
struct PasskeyBrowserTests {
    @Test func aPasskeyMadeInChromiumSignsInAndContinuesANativeAttempt() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let origin = try onAFreeLoopbackPort { port in
            let origin = "http://localhost:\(port)"
            try h.startServer(
                port: port, extraConfig: ["publicOrigin": origin, "passkeyRpIds": ["login.example.com", "localhost"]])
            return origin
        }
        h.serverOrigin = origin
        h.writeClient()
        try h.startBroker()
        let rpc = try h.rpc()
        func start() throws -> String {
            let attempt = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
            let url = attempt["authorizeUrl"]?.stringValue ?? ""
            #expect(url.hasPrefix(origin + "/"))
            return url
        }
        func finish(_ callback: String?) throws {
            let finished = try h.cli(["finish", callback ?? ""])
            #expect(finished.status == 0, "\(finished.err)")
        }

        // Signed in with the test account's code, the page adds a passkey; the sign-in continues.
        let registered = try PasskeyBrowser.run(h, "register", try start(), [:])
        #expect(registered["status"] == "Passkey added.")
        #expect(registered["credentials"] == "1")
        try finish(registered["callback"])
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["authMethod"] == "test")
        #expect(try rpc.call("session.signOut", params: ["client": "com.example.notes"])["status"] == "signedOut")

        // A fresh browser that holds only the passkey: no code, no cookie.
        let signedIn = try PasskeyBrowser.run(h, "signin", try start(), ["PASSKEY_RENAME": "Work laptop"])
        #expect(signedIn["account"] == h.testEmail)
        #expect(signedIn["passkeys"] == "1")
        #expect(signedIn["renamed"] == "Work laptop")
        try finish(signedIn["callback"])
        let session = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] == "signedIn")
        #expect(session["authMethod"] == "passkey")
        #expect(session["account"]?["email"]?.stringValue == h.testEmail)

        #expect(try rpc.call("session.signOut", params: ["client": "com.example.notes"])["status"] == "signedOut")

        // An authenticator that does not verify the user: the browser refuses, the page says so.
        let refused = try PasskeyBrowser.run(h, "signin", try start(), ["PASSKEY_UV": "0"])
        #expect(refused["refused"] == "The passkey request was cancelled or not allowed.")
        #expect(refused["callback"] == nil)
    }
}
