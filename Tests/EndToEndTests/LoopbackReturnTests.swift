import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import DesktopEntry
import Foundation
import Testing

/// Browser Login clients that return over loopback (docs/desktop.md, "When the browser does not come
/// back"): the real broker, the reference server registering `http://127.0.0.1/callback`, the real keyring,
/// and XDG directories of the test's own that say which handler is the default, which xdg-open is on PATH
/// and how the default browser is packaged.
struct HandbackWorld {
    let h: Harness
    let scheme: String
    var client: String { "com.example.notes" }

    /// `returnUrls`: what the client file lists (and the server registers). The desktop is empty: no
    /// handler, a host browser (`/bin/true`) as the default, no desktop session, an xdg-open 1.2.1.
    init(scheme: String = "com.example.notes", returnUrls: [String]) throws {
        h = try Harness()
        self.scheme = scheme
        try h.startServer(extraConfig: [
            "clients": [
                ["clientId": "com.example.notes", "appName": "Example Notes", "returnUrls": returnUrls, "policy": "confirm"]
            ]
        ])
        h.writeClient(returnURL: returnUrls[0], extra: returnUrls.dropFirst().map { "ReturnUrl=\($0)\n" }.joined())
        for sub in ["data-home/applications", "etc-xdg", "bin"] {
            try FileManager.default.createDirectory(atPath: h.dir + "/" + sub, withIntermediateDirectories: true)
        }
        h.brokerEnvironment["XDG_DATA_HOME"] = h.dir + "/data-home"
        h.brokerEnvironment["XDG_CONFIG_DIRS"] = h.dir + "/etc-xdg"
        h.brokerEnvironment["PATH"] = h.dir + "/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        for name in ["XDG_CURRENT_DESKTOP", "DESKTOP_SESSION", "KDE_FULL_SESSION", "GNOME_DESKTOP_SESSION_ID"] {
            h.brokerEnvironment[name] = ""
        }
        try xdgOpen(version: "1.2.1")
        try application("test-browser.desktop", exec: "/bin/true %u", types: ["http", "https"])
        try defaults([("https", "test-browser.desktop"), ("http", "test-browser.desktop")])
    }

    func write(_ relative: String, _ text: String, executable: Bool = false) throws {
        let path = h.dir + "/" + relative
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        if executable { chmod(path, 0o755) }
    }

    /// An xdg-open that answers `--version` as xdg-utils does, first on the broker's PATH.
    func xdgOpen(version: String) throws {
        try write(
            "bin/xdg-open",
            "#!/bin/sh\ncase \"$1\" in\n    --version)\n    echo \"xdg-open \(version)\"\n    exit 0\n    ;;\nesac\nexit 4\n",
            executable: true)
    }

    func application(_ id: String, exec: String, types: [String], extra: String = "") throws {
        try write(
            "data-home/applications/" + id,
            "[Desktop Entry]\nType=Application\nName=\(id)\nExec=\(exec)\n\(extra)MimeType="
                + types.map { "x-scheme-handler/\($0);" }.joined() + "\n")
    }

    func defaults(_ pairs: [(String, String)]) throws {
        try write(
            "config/mimeapps.list", "[Default Applications]\n" + pairs.map { "x-scheme-handler/\($0.0)=\($0.1);\n" }.joined())
    }

    /// The broker's URL handler for the client's scheme, and whether it is the default.
    func brokerHandler(isDefault: Bool, browser: String = "test-browser.desktop") throws {
        try application(DesktopEntry.fileName, exec: binDirectory + "/browser-login finish %u", types: [scheme])
        try application("other.desktop", exec: "/bin/true %u", types: [scheme])
        try defaults([
            ("https", browser), ("http", browser), (scheme, isDefault ? DesktopEntry.fileName : "other.desktop"),
        ])
    }

    /// The scripted user agent as the browser: it signs in on the hosted page and then goes where the page
    /// sends it with curl, as a browser follows the page's navigation (a custom scheme fails there).
    func scriptedBrowser() {
        h.useScriptedUserAgent()
        h.brokerEnvironment["DEMO_DELIVER"] = "/usr/bin/curl -fsS -o /dev/null"
        h.brokerEnvironment["DEMO_LOG"] = h.dir + "/agent.log"
        _ = FileManager.default.createFile(atPath: h.dir + "/agent.log", contents: nil)
    }

    func start(openBrowser: Bool = true) throws -> JSONValue {
        try h.rpc().call("login.start", params: ["client": .string(client), "openBrowser": .bool(openBrowser)])
    }

    func status(_ attempt: JSONValue) throws -> JSONValue {
        try h.rpc().call(
            "login.status", params: ["attemptId": attempt["attemptId"] ?? .null, "reconcile": false])
    }

    func waitSignedIn() throws {
        try waitUntil(120, "the session") {
            try h.rpc().call("session.get", params: ["client": .string(client)])["status"] == "signedIn"
        }
    }

    /// The broker's "attempt created" line for `attempt`.
    func createdLine(_ attempt: JSONValue) -> String {
        let id = attempt["attemptId"]?.stringValue ?? "?"
        let log = (try? String(contentsOfFile: h.brokerLog, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").last { $0.contains("attempt created") && $0.contains(id) }.map(String.init) ?? ""
    }

    /// The listener's port, from the loopback return URL in `text` (`http://127.0.0.1:PORT/callback`).
    static func port(in text: String) -> UInt16? {
        guard let start = text.range(of: "http://127.0.0.1:") else { return nil }
        return UInt16(text[start.upperBound...].prefix { $0.isNumber })
    }
}

@Suite(.dedicatedThread) struct LoopbackReturnTests {
    static let both = ["com.example.notes:/callback", "http://127.0.0.1/callback"]

    /// The client lists a scheme and a loopback URL, and its scheme's handler is the broker's and the
    /// default: the scheme is used. Another application taking the scheme over (after a restart: the
    /// broker reads the desktop at most every 30 s): the same client returns over loopback.
    @Test func aHandlerThatIsNotTheDefaultSendsTheSignInOverLoopback() throws {
        let world = try HandbackWorld(returnUrls: Self.both)
        defer { world.h.stopAll() }
        try world.brokerHandler(isDefault: true)
        try world.h.startBroker()
        let viaScheme = try world.start(openBrowser: false)
        #expect(viaScheme["returnVia"] == "scheme", "\(viaScheme)")
        #expect(world.createdLine(viaScheme).contains("scheme-handler-ok"), "\(world.createdLine(viaScheme))")
        _ = try world.h.rpc().call("login.cancel", params: ["attemptId": viaScheme["attemptId"] ?? .null])

        try world.brokerHandler(isDefault: false)
        world.scriptedBrowser()
        try world.h.restartBroker()
        let attempt = try world.start()
        #expect(attempt["returnVia"] == "loopback", "\(attempt)")
        try world.waitSignedIn()
        let status = try world.status(attempt)
        #expect(status["state"] == "completed")
        #expect(status["returnVia"] == "loopback")
        let line = world.createdLine(attempt)
        #expect(line.contains("loopback") && line.contains("handler-not-default"), "\(line)")
        #expect(!line.contains("127.0.0.1:"), "the port and URL stay out of the log: \(line)")
    }

    /// xdg-open 1.1.3 (outside GNOME, KDE, …) takes a scheme with a digit for a file name: the client with
    /// such a scheme and a loopback URL returns over loopback although its handler is the default.
    @Test func anXdgOpenThatManglesTheSchemeSendsTheSignInOverLoopback() throws {
        let world = try HandbackWorld(
            scheme: "org.example.app2", returnUrls: ["org.example.app2:/callback", "http://127.0.0.1/callback"])
        defer { world.h.stopAll() }
        try world.brokerHandler(isDefault: true)
        try world.xdgOpen(version: "1.1.3")
        world.scriptedBrowser()
        try world.h.startBroker()
        let attempt = try world.start()
        #expect(attempt["returnVia"] == "loopback", "\(attempt)")
        try world.waitSignedIn()
        #expect(try world.status(attempt)["returnVia"] == "loopback")
        #expect(world.createdLine(attempt).contains("xdg-open-mangles-scheme"), "\(world.createdLine(attempt))")
        // Doctor says the same of this desktop.
        let doctor = try world.h.cli(["doctor", "--json"])
        #expect(doctor.out.contains("xdg-open 1.1.3 takes org.example.app2: URLs for file names"), "\(doctor.out)")
    }

    /// A Flatpak default browser: the broker runs `flatpak run APP-ID URL` (a recording `flatpak` first on
    /// PATH, which then plays the browser) and the sign-in returns over loopback.
    @Test func aFlatpakDefaultBrowserIsRunWithFlatpakAndReturnsOverLoopback() throws {
        let world = try HandbackWorld(returnUrls: Self.both)
        defer { world.h.stopAll() }
        let calls = world.h.dir + "/flatpak-calls"
        try world.write(
            "bin/flatpak",
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '\(calls)'\nfor last; do :; done\nexec '\(binDirectory)/browser-login-demo-agent' \"$last\"\n",
            executable: true)
        try world.application(
            "org.mozilla.firefox.desktop",
            exec:
                "flatpak run --branch=stable --arch=x86_64 --command=firefox --file-forwarding org.mozilla.firefox @@u %u @@",
            types: ["http", "https"], extra: "X-Flatpak=org.mozilla.firefox\n")
        try world.brokerHandler(isDefault: true, browser: "org.mozilla.firefox.desktop")
        world.scriptedBrowser()
        world.h.brokerEnvironment["BROWSER"] = "/bin/false"
        try world.h.startBroker()
        let attempt = try world.start()
        #expect(attempt["returnVia"] == "loopback", "\(attempt)")
        try world.waitSignedIn()
        let recorded = try String(contentsOfFile: calls, encoding: .utf8)
        let authorizeUrl = try #require(attempt["authorizeUrl"]?.stringValue)
        #expect(recorded == "run org.mozilla.firefox \(authorizeUrl)\n", "\(recorded)")
        #expect(world.createdLine(attempt).contains("flatpak-browser"), "\(world.createdLine(attempt))")
    }

    /// A Snap default browser: the sign-in returns over loopback (snapd would ask before handing a scheme on).
    @Test func aSnapDefaultBrowserSendsTheSignInOverLoopback() throws {
        let world = try HandbackWorld(returnUrls: Self.both)
        defer { world.h.stopAll() }
        try world.write("bin/firefox-snap", "#!/bin/sh\nexit 0\n", executable: true)
        try world.application(
            "firefox_firefox.desktop",
            exec: "env BAMF_DESKTOP_FILE_HINT=/var/lib/snapd/desktop/applications/firefox_firefox.desktop firefox-snap %u",
            types: ["http", "https"], extra: "X-SnapInstanceName=firefox\n")
        try world.brokerHandler(isDefault: true, browser: "firefox_firefox.desktop")
        world.scriptedBrowser()
        try world.h.startBroker()
        let attempt = try world.start()
        #expect(attempt["returnVia"] == "loopback", "\(attempt)")
        try world.waitSignedIn()
        #expect(world.createdLine(attempt).contains("snap-browser"), "\(world.createdLine(attempt))")
    }

    /// The broker restarts while a loopback attempt waits: its listener opens again on the same port, and
    /// the browser's callback (authorized before the restart) still signs in.
    @Test func aWaitingLoopbackAttemptListensAgainAfterARestart() throws {
        let world = try HandbackWorld(returnUrls: ["http://127.0.0.1/callback"])
        defer { world.h.stopAll() }
        try world.h.startBroker()
        let attempt = try world.start(openBrowser: false)
        let authorizeUrl = try #require(attempt["authorizeUrl"]?.stringValue)
        let callback = try world.h.browser().signInAndAuthorize(
            authorizeURL: authorizeUrl, email: world.h.testEmail, code: "000000")
        try world.h.restartBroker()
        let delivered = try runProgram("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", callback])
        #expect(delivered.out == "200", "\(delivered)")
        try world.waitSignedIn()
        #expect(try world.status(attempt)["state"] == "completed")
    }

    /// Hostile requests on a Browser Login attempt's listener: another Host, another path, a forged code —
    /// refused, the attempt still waits; the genuine callback signs in and gets the listener's page and
    /// headers; the same callback again changes nothing (the listener closed with the attempt, and
    /// `login.finish` answers the completed attempt and sends nothing).
    @Test func hostileRequestsOnABrowserLoginListenerChangeNothing() throws {
        let world = try HandbackWorld(returnUrls: ["http://127.0.0.1/callback"])
        defer { world.h.stopAll() }
        try world.h.startBroker()
        let rpc = try world.h.rpc()
        let attempt = try world.start(openBrowser: false)
        let id = try #require(attempt["attemptId"]?.stringValue)
        let authorizeUrl = try #require(attempt["authorizeUrl"]?.stringValue)
        let callback = try world.h.browser().signInAndAuthorize(
            authorizeURL: authorizeUrl, email: world.h.testEmail, code: "000000")
        let port = try #require(HandbackWorld.port(in: callback))
        let target = try #require(callback.range(of: "/callback?").map { String(callback[$0.lowerBound...]) })
        let forged = target.replacingOccurrences(of: "code=", with: "code=x")
        let pathless = target.replacingOccurrences(of: "/callback?", with: "/callback/?")
        for (request, expected) in [
            ("GET \(target) HTTP/1.0\r\n\r\n", 400),
            ("GET \(target) HTTP/1.1\r\nHost: rebound.example:\(port)\r\nConnection: close\r\n\r\n", 400),
            ("GET \(pathless) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n", 404),
            ("GET \(forged) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n", 400),
        ] {
            #expect(loopbackHTTPStatus(port: port, request) == expected, "\(request.prefix(50))")
            #expect(try attemptState(rpc, id) == "waiting")
        }
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signingIn")

        let genuine = try runProgram("/usr/bin/curl", ["-sS", "-i", callback])
        #expect(genuine.out.hasPrefix("HTTP/1.1 200"), "\(genuine.out.prefix(200))")
        for header in [
            "Cache-Control: no-store", "Referrer-Policy: no-referrer", "Content-Security-Policy: default-src 'none'",
        ] {
            #expect(genuine.out.contains(header), "\(header)")
        }
        #expect(genuine.out.contains("You are signed in to Example Notes"))
        let session = try rpc.call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"] == "signedIn")
        #expect(try attemptState(rpc, id) == "completed")

        // Again: the listener has closed with its attempt; pasted, the callback answers and sends nothing.
        try waitUntil(10, "the listener to close") {
            loopbackHTTPStatus(
                port: port, "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n",
                timeout: .seconds(5)) == nil
        }
        let repeated = try world.h.cli(["finish", callback])
        #expect(repeated.status == 0, "\(repeated.err)")
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"]) == session)
        #expect(try attemptState(rpc, id) == "completed")
        // A callback on another port of the same path is not this attempt's return URL.
        let otherPort = callback.replacingOccurrences(
            of: "127.0.0.1:\(port)/", with: "127.0.0.1:\(port == 65535 ? 1 : port + 1)/")
        let moved = try world.h.cli(["finish", otherPort])
        #expect(moved.status != 0)
        #expect(moved.err.contains("CALLBACK_MISMATCH") || moved.err.contains("not the return URL"), "\(moved.err)")
    }
}

/// The loopback sign-in through a real browser with no scheme handler registered at all: headless
/// Chromium runs the hosted page, which navigates to the broker's listener; the listener's page says
/// the sign-in is done.
@Suite(.dedicatedThread, .enabled(if: HeadlessChromium.isReady))
struct LoopbackChromiumTests {
    @Test func chromiumSignsInOverLoopbackWithNoSchemeHandler() throws {
        let world = try HandbackWorld(returnUrls: ["http://127.0.0.1/callback"])
        defer { world.h.stopAll() }
        try world.h.startBroker()
        #expect(
            DesktopSetup(environment: world.h.environment()).defaultApplication(for: "x-scheme-handler/com.example.notes") == nil)
        let attempt = try world.start(openBrowser: false)
        #expect(attempt["returnVia"] == "loopback")
        let authorizeUrl = try #require(attempt["authorizeUrl"]?.stringValue)
        let run = try HeadlessChromium.run(Self.agent, [authorizeUrl, world.h.testEmail], in: world.h.dir)
        #expect(run.status == 0, "\(run.err)")
        let lines = run.out.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("http://127.0.0.1:") == true, "\(run.out)")
        #expect(lines.first?.hasSuffix("/callback") == true, "\(run.out)")
        #expect(lines.dropFirst().first == "Signed in", "\(run.out)")
        try world.waitSignedIn()
        let status = try world.status(attempt)
        #expect(status["state"] == "completed")
        #expect(status["returnVia"] == "loopback")
        #expect(world.createdLine(attempt).contains("only-loopback"), "\(world.createdLine(attempt))")
    }

    /// Signs in with the test code, continues, and prints where the page took the browser (without its
    /// query) and the title of the page found there.
    static let agent =
        HeadlessChromium.prelude + #"""
            try:
                wait = WebDriverWait(driver, 30)
                driver.get(sys.argv[1])
                wait.until(ready.visibility_of_element_located((By.ID, "email"))).send_keys(sys.argv[2])
                driver.find_element(By.CSS_SELECTOR, "#email-form button[type=submit]").click()
                wait.until(ready.visibility_of_element_located((By.ID, "code"))).send_keys("000000")
                driver.find_element(By.CSS_SELECTOR, "#code-form button[type=submit]").click()
                wait.until(ready.element_to_be_clickable((By.ID, "continue"))).click()
                wait.until(lambda d: d.current_url.startswith("http://127.0.0.1:") and d.title)
                print(driver.current_url.split("?")[0], flush=True)
                print(driver.title, flush=True)
            except Exception as error:
                print("chromium: %s at %s: %s" % (type(error).__name__, driver.current_url.split("?")[0],
                      driver.find_element(By.TAG_NAME, "body").text[:300]), file=sys.stderr)
                sys.exit(1)
            finally:
                driver.quit()
            """#
}
