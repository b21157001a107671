import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The GLib and Qt example apps of docs/apps/ (examples/apps/), built by
/// their own Makefiles out of tree and run against the real broker on the
/// harness's session bus: a sign-in that the scripted user agent finishes,
/// the account, the API call, sign-out, and the broker's errors by name;
/// then the account switcher on an `Accounts=multiple` client (two accounts
/// signed in, listed, switched, used by key, one signed out).
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
            ("com.example.multi", "Multi", "com.example.multi:/callback"),
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
        h.writeClient(
            file: "multi.conf", id: "com.example.multi", appName: "Multi", returnURL: "com.example.multi:/callback",
            extra: "Accounts=multiple")
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

        try switchAccounts(h, run: run)
    }

    /// The account switcher: `--accounts`, `--add-account --login-hint`,
    /// `--use`, `--account [--sign-out]` on the `Accounts=multiple` client.
    func switchAccounts(_ h: Harness, run: ([String]) throws -> (status: Int32, out: String, err: String)) throws {
        let client = "com.example.multi"
        let rpc = try h.rpc()
        let current = { try rpc.call("session.get", params: ["client": .string(client)]) }
        // No account yet: one signedOut view without a key (current, as a client's only view is).
        let none = try run([client, "--accounts"])
        #expect(none.status == 0 && none.out.hasSuffix("\n* - - signedOut\n"), "\(none)")

        // The first account through the ordinary sign-in; one more with a
        // login hint (the scripted user keeps the address the page filled in).
        let first = try run([client])
        try #require(first.status == 0, "\(first)\nbroker log:\n\(h.broker?.output ?? "")")
        let firstKey = try #require(try current()["accountKey"]?.stringValue)
        let other = h.testEmail.replacingOccurrences(of: "@", with: "work@")
        let added = try run([client, "--add-account", "--login-hint", other])
        try #require(added.status == 0, "\(added)\nbroker log:\n\(h.broker?.output ?? "")")
        #expect(added.out.contains("starting a sign-in"), "\(added)")
        #expect(added.out.contains("signedIn as \(other)"), "\(added)")
        #expect(added.out.contains("GET /api/me: status 200\n") && added.out.contains(#""email":"\#(other)""#), "\(added)")
        let secondKey = try #require(try current()["accountKey"]?.stringValue)
        #expect(secondKey != firstKey)

        // Listed, the current (new) one first and marked.
        let listed = try run([client, "--accounts"])
        #expect(listed.status == 0, "\(listed)")
        #expect(
            listed.out.hasSuffix("\n* \(secondKey) \(other) signedIn\n  \(firstKey) \(h.testEmail) signedIn\n"),
            "\(listed)")

        // Switched back: the API answers as the first account.
        let used = try run([client, "--use", firstKey])
        #expect(used.status == 0, "\(used)")
        #expect(used.out.contains("current account: \(firstKey)\n") && used.out.contains("signedIn as \(h.testEmail)"))
        #expect(used.out.contains(#""email":"\#(h.testEmail)""#), "\(used)")
        #expect(try current()["accountKey"]?.stringValue == firstKey)

        // As the other account by key, not current; signing it out leaves the first.
        let asOther = try run([client, "--account", secondKey, "--sign-out"])
        #expect(asOther.status == 0, "\(asOther)")
        #expect(asOther.out.contains("signedIn as \(other)") && asOther.out.contains(#""email":"\#(other)""#), "\(asOther)")
        #expect(asOther.out.hasSuffix("signedOut\n"), "\(asOther)")
        let now = try current()
        #expect(now["accountKey"]?.stringValue == firstKey && now["status"] == "signedIn")
        let left = try run([client, "--accounts"])
        #expect(left.out.hasSuffix("\n* \(firstKey) \(h.testEmail) signedIn\n"), "\(left)")

        // The broker's errors by name: a key the client does not hold, addAccount on a single client.
        for arguments in [[client, "--account", secondKey], [client, "--use", secondKey]] {
            let unknown = try run(arguments)
            #expect(unknown.status == 1 && unknown.err.contains(": error ACCOUNT_UNKNOWN: "), "\(arguments): \(unknown)")
        }
        let single = try run(["com.example.notes", "--add-account"])
        #expect(single.status == 1 && single.err.contains("Accounts=multiple"), "\(single)")
        // One mode at a time.
        for arguments in [[client, "--accounts", "--use", firstKey], [client, "--login-hint", other], [client, "--use"]] {
            #expect(try run(arguments).status == 2, "\(arguments)")
        }
    }
}
