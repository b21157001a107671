import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The GLib and Qt example apps of docs/apps/ (examples/apps/), built by
/// their own Makefiles out of tree and run against the real broker on the
/// harness's session bus: a sign-in that the scripted user agent finishes,
/// the account, the API call, sign-out, and the broker's errors by name.
@Suite("D-Bus app examples", .dedicatedThread)
struct DBusAppExamplesTests {
    /// Why the Qt example cannot be built here, or nil when it can.
    static let qtMissing: String? = {
        guard (try? spawnAndWait(["/usr/bin/pkg-config", "--exists", "Qt5DBus", "Qt5Core"]))?.status == 0 else {
            return "Qt 5 QtDBus is not installed (qtbase5-dev; scripts/install-deps installs it)"
        }
        let bin =
            (try? spawnAndWait(["/usr/bin/pkg-config", "--variable=host_bins", "Qt5Core"]))?.stdout
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        for tool in ["qdbusxml2cpp", "moc"] where !FileManager.default.isExecutableFile(atPath: bin + "/" + tool) {
            return "Qt's \(tool) is not installed (qtbase5-dev-tools; scripts/install-deps installs it)"
        }
        return nil
    }()

    @Test func theGLibExampleSignsInAndCallsTheAPI() throws {
        try exercise(example: "glib", program: "glib-signin")
    }

    @Test(.enabled(if: DBusAppExamplesTests.qtMissing == nil, "\(DBusAppExamplesTests.qtMissing ?? "")"))
    func theQtExampleSignsInAndCallsTheAPI() throws {
        try exercise(example: "qt", program: "qt-signin")
    }

    /// The pages show the code the tests build and run, as it is.
    @Test func theDocsShowTheTestedCode() throws {
        let pages = [
            "glib": ["glib-signin.c", "Makefile"], "qt": ["qt-signin.cpp", "qt-types.h", "qt-annotate.awk", "Makefile"],
        ]
        for (example, files) in pages {
            let page = try String(contentsOfFile: repositoryRoot + "/docs/apps/\(example).md", encoding: .utf8)
            for file in files {
                let code = try String(
                    contentsOfFile: repositoryRoot + "/examples/apps/\(example)/\(file)", encoding: .utf8)
                #expect(
                    page.contains("\n" + code + "```\n"),
                    "docs/apps/\(example).md does not show examples/apps/\(example)/\(file) as it is")
            }
        }
    }

    /// Builds examples/apps/EXAMPLE with `make O=DIR`; answers the program's path.
    func build(example: String, program: String, into dir: String) throws -> String {
        let result = try runProgram(
            "/usr/bin/make", ["-C", repositoryRoot + "/examples/apps/" + example, "O=" + dir], timeout: 300)
        guard result.status == 0 else {
            throw HarnessError("make for examples/apps/\(example) failed:\n\(result.out)\(result.err)")
        }
        return dir + "/" + program
    }

    func exercise(example: String, program: String) throws {
        let h = try Harness()
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.mine", "Mine", "com.example.mine:/callback"),
            ("com.example.bound", "Bound", "com.example.bound:/callback"),
        ])
        // /proc/PID/exe names the program with its symbolic links resolved.
        let app = URL(fileURLWithPath: try build(example: example, program: program, into: h.dir + "/build"))
            .resolvingSymlinksInPath().path
        h.writeClient()
        // Bound to the example itself: its signals reach it only through Subscribe.
        h.writeClient(
            file: "mine.conf", id: "com.example.mine", appName: "Mine", returnURL: "com.example.mine:/callback",
            extra: "Peers=\(app)")
        h.writeClient(
            file: "bound.conf", id: "com.example.bound", appName: "Bound", returnURL: "com.example.bound:/callback",
            extra: "Peers=/usr/bin/true")
        // The broker's "browser" is the scripted user agent: it signs in on
        // the hosted page and hands the callback to `browser-login finish`.
        h.useScriptedUserAgent()
        try h.startBroker()
        let run = { (arguments: [String]) in try runProgram(app, arguments, environment: h.environment(), timeout: 90) }

        let unknown = try run(["com.example.nothing"])
        #expect(unknown.status == 1, "\(unknown)")
        #expect(unknown.err.contains("error CLIENT_UNKNOWN: "), "\(unknown)")

        let forbidden = try run(["com.example.bound"])
        #expect(forbidden.status == 1, "\(forbidden)")
        #expect(forbidden.err.contains("error CLIENT_FORBIDDEN: "), "\(forbidden)")
        #expect(!forbidden.out.contains("client com.example.bound"), "ListClients showed a client this program may not use")

        let first = try run(["com.example.notes"])
        try #require(first.status == 0, "\(first)\nbroker log:\n\(h.broker?.output ?? "")")
        #expect(first.out.contains("client com.example.notes: Example Notes at \(h.serverOrigin)\n"), "\(first)")
        #expect(first.out.contains("com.example.notes: signedOut\n"), "\(first)")
        #expect(first.out.contains("starting a sign-in"), "\(first)")
        #expect(first.out.contains("signedIn as \(h.testEmail)"), "\(first)")
        #expect(first.out.contains("GET /api/me: status 200\n"), "\(first)")
        // The authorize URL (it carries the server's attempt id) is never shown.
        #expect(!(first.out + first.err).contains("attempt="), "\(first)")

        let second = try run(["com.example.notes", "--sign-out"])
        try #require(second.status == 0, "\(second)")
        #expect(second.out.contains("com.example.notes: signedIn\n"), "\(second)")
        #expect(!second.out.contains("starting a sign-in"), "signed in already, yet it started a sign-in: \(second)")
        #expect(second.out.contains("GET /api/me: status 200\n"), "\(second)")
        #expect(second.out.hasSuffix("signedOut\n"), "\(second)")
        let session = try h.rpc().call("session.get", params: ["client": "com.example.notes"])
        #expect(session["status"]?.stringValue == "signedOut")

        let mine = try run(["com.example.mine"])
        try #require(mine.status == 0, "\(mine)\nbroker log:\n\(h.broker?.output ?? "")")
        #expect(mine.out.contains("client com.example.mine: Mine at \(h.serverOrigin)\n"), "\(mine)")
        #expect(mine.out.contains("starting a sign-in"), "\(mine)")
        #expect(mine.out.contains("signedIn as \(h.testEmail)"), "\(mine)")
        #expect(mine.out.contains("GET /api/me: status 200\n"), "\(mine)")
    }
}
