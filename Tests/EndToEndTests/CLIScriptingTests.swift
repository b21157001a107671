import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The CLI for scripts (issue 17): exit statuses, `request`, `start --wait`,
/// JSON errors, help everywhere in 80 columns, completions, and the shell
/// example of docs/apps/shell.md — against the real daemon.
@Suite("The CLI for scripts", .dedicatedThread)
struct CLIScriptingTests {
    static let notes = "com.example.notes"

    /// A world whose "browser" is the scripted user agent, so that `start`
    /// signs in by itself (or, with `selfSigningIn` false, never does).
    static func world(selfSigningIn: Bool = true) throws -> Harness {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        if selfSigningIn {
            h.useScriptedUserAgent()
        }
        try h.startBroker()
        return h
    }

    /// Runs a shell command line with the harness's environment, the binaries on PATH.
    static func shell(_ h: Harness, _ script: String) throws -> (status: Int32, out: String, err: String) {
        var env = h.environment()
        env["PATH"] = binDirectory + ":" + (env["PATH"] ?? "/usr/bin:/bin")
        env["BROWSER_LOGIN_SOCKET"] = h.socketPath
        return try runProgram("/bin/sh", ["-c", script], environment: env)
    }

    /// An error on stderr with --json: one JSON object with a code and a message.
    static func jsonError(_ err: String) throws -> JSONValue {
        let lines = err.split(separator: "\n")
        #expect(lines.count == 1, "\(err)")
        let error = try JSONValue.parse(String(lines.last ?? ""))
        #expect(error["message"]?.stringValue?.isEmpty == false)
        return error
    }

    @Test func requestExitsLikeCurlDashF() throws {
        let h = try Self.world(selfSigningIn: false)
        // Not signed in: NOT_SIGNED_IN, exit 1.
        let before = try h.cli(["request", Self.notes, "GET", "/api/me"])
        #expect(before.status == 1 && before.err.contains("NOT_SIGNED_IN"), "\(before)")
        try h.signIn()

        let me = try h.cli(["request", Self.notes, "GET", "/api/me"])
        #expect(me.status == 0, "\(me.err)")
        #expect(try JSONValue.parse(me.out)["email"]?.stringValue == h.testEmail)
        let missing = try h.cli(["request", Self.notes, "get", "/api/nothing-here"])
        #expect(missing.status == 22)
        #expect(missing.out.contains("NOT_FOUND"), "the body is still written")
        #expect(missing.err.contains("HTTP 404"))
        let missingJSON = try h.cli(["request", Self.notes, "GET", "/api/nothing-here", "--json"])
        #expect(missingJSON.status == 22)
        #expect(try JSONValue.parse(missingJSON.out)["status"] == 404)
        #expect(try Self.jsonError(missingJSON.err)["code"] == "HTTP_ERROR")

        // -d @FILE, -H, and -d @- from standard input.
        let file = h.dir + "/note.json"
        try #"{"text": "from a file"}"#.write(toFile: file, atomically: true, encoding: .utf8)
        let posted = try h.cli(["request", Self.notes, "POST", "/api/notes", "-d", "@" + file, "-H", "X-Trace: 1"])
        #expect(posted.status == 0, "\(posted.err)")
        #expect(try JSONValue.parse(posted.out)["text"] == "from a file")
        let piped = try Self.shell(
            h, #"printf '{"text": "from a pipe"}' | browser-login request com.example.notes POST /api/notes -d @- --json"#)
        #expect(piped.status == 0, "\(piped.err)")
        #expect(try JSONValue.parse(piped.out)["status"] == 201)
        let listed = try h.cli(["request", Self.notes, "GET", "/api/notes?limit=50"])
        #expect(listed.out.contains("from a file") && listed.out.contains("from a pipe"), "\(listed)")
        // Refused locally by the broker: a header it does not send, a path with '..', a missing file.
        let cookie = try h.cli(["request", Self.notes, "GET", "/api/me", "-H", "Cookie: a=b", "--json"])
        #expect(cookie.status == 64)
        #expect(try Self.jsonError(cookie.err)["code"] == "INVALID_PARAMS")
        #expect(try h.cli(["request", Self.notes, "GET", "/api/../x"]).status == 64)
        let noFile = try h.cli(["request", Self.notes, "POST", "/api/notes", "-d", "@" + h.dir + "/none", "--json"])
        #expect(noFile.status == 66)
        #expect(try Self.jsonError(noFile.err)["code"] == "NO_INPUT")
        #expect(try h.cli(["request", Self.notes, "GET", "/api/me", "-H", "no colon"]).status == 64)
    }

    @Test func startWaitAndSessionExitStatuses() throws {
        let h = try Self.world()
        let signedOut = try h.cli(["session", Self.notes])
        #expect(signedOut.status == 1)
        #expect(signedOut.out.contains("signedOut"))

        let started = try h.cli(["start", Self.notes, "--wait", "--timeout", "60"])
        #expect(started.status == 0, "\(started.err)")
        #expect(started.out.contains("signed in: ") && started.out.contains(h.testEmail))
        let session = try h.cli(["session", Self.notes, "--json"])
        #expect(session.status == 0)
        #expect(try JSONValue.parse(session.out)["status"] == "signedIn")
        // Already signed in: --wait is satisfied at once.
        let again = try h.cli(["start", Self.notes, "--wait", "--json"])
        #expect(again.status == 0, "\(again.err)")
        #expect(try JSONValue.parse(again.out)["status"] == "signedIn")
        #expect(try h.cli(["--json", "start", Self.notes]).status == 1)
    }

    @Test func startWaitTimesOutWith75() throws {
        let h = try Self.world(selfSigningIn: false)
        let waited = try h.cli(["start", Self.notes, "--no-browser", "--wait", "--timeout", "1", "--json"])
        #expect(waited.status == 75)
        let error = try Self.jsonError(waited.err)
        #expect(error["code"] == "WAIT_TIMEOUT")
        #expect(error["attemptId"]?.stringValue?.hasPrefix("at_") == true)
        #expect(!waited.out.contains("authorizeUrl"), "--json --wait prints the session only")
        #expect(try h.cli(["start", Self.notes, "--timeout", "1"]).status == 64)
        // Cancelled meanwhile: the wait ends with 1 and the attempt.
        let ended = try Self.shell(
            h,
            """
            browser-login start com.example.notes --no-browser --wait --timeout 60 & pid=$!
            sleep 1
            browser-login cancel "$(browser-login status --json --no-reconcile | cut -d'"' -f4)" >/dev/null
            wait $pid; echo "status=$?"
            """)
        #expect(ended.out.contains("cancelled") && ended.out.hasSuffix("status=1\n"), "\(ended)")
    }

    @Test func startWaitGoesOnWhenTheBrowserFails() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Browser=/nonexistent/browser %u")
        try h.startBroker()
        let waited = try h.cli(["start", Self.notes, "--wait", "--timeout", "1"])
        #expect(waited.status == 75, "\(waited)")
        #expect(waited.err.contains("BROWSER_FAILED") && waited.err.contains("WAIT_TIMEOUT"))
        #expect(waited.out.contains("open this link in your browser to sign in:\n  \(h.serverOrigin)"))
        #expect(try h.cli(["start", Self.notes]).status == 69, "without --wait: 69 at once")
    }

    @Test func errorsAreOneJSONObjectOnStderr() throws {
        let h = try Self.world(selfSigningIn: false)
        let cases: [([String], Int32, String)] = [
            (["session", "com.example.nope", "--json"], 66, "CLIENT_UNKNOWN"),
            (["cancel", "at_nope", "--json"], 66, "ATTEMPT_UNKNOWN"),
            (["--json", "status", "--bogus"], 64, "USAGE"),
            (["frobnicate", "--json"], 64, "USAGE"),
            (["--json"], 64, "USAGE"),
            (["finish", "com.example.notes:/callback?state=x", "--json"], 65, "CALLBACK_INVALID"),
        ]
        for (args, status, code) in cases {
            let result = try h.cli(args)
            #expect(result.status == status, "\(args): \(result.err)")
            #expect(try Self.jsonError(result.err)["code"]?.stringValue == code, "\(args)")
        }
        // Without a broker: BROKER_NOT_RUNNING, 69.
        let env = h.environment()
        let none = try runProgram(
            binDirectory + "/browser-login", ["--socket", h.dir + "/none.sock", "clients", "--json"], environment: env)
        #expect(none.status == 69)
        #expect(try Self.jsonError(none.err)["code"] == "BROKER_NOT_RUNNING")
        let human = try runProgram(
            binDirectory + "/browser-login", ["--socket", h.dir + "/none.sock", "clients"], environment: env)
        #expect(human.err.hasPrefix("browser-login: the broker is not running"))
    }

    @Test func everyCommandHasShortHelpInEightyColumns() throws {
        let h = try Harness()
        let main = try h.cli(["-h"])
        #expect(main.status == 0)
        #expect(main.out == (try h.cli(["--help"])).out)
        let commands = main.out.components(separatedBy: "Commands:\n")[1].components(separatedBy: "\n\n")[0]
            .split(separator: "\n").filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") }
            .map { String($0.split(separator: " ")[0]) }
        #expect(commands.count >= 13 && commands.contains("request"), "\(commands)")
        var texts = [("browser-login", main.out)]
        for command in commands {
            let short = try h.cli([command, "-h"])
            #expect(short.status == 0, "\(command)")
            #expect(short.out.hasPrefix("Usage: browser-login \(command)"), "\(command)")
            #expect(short.out == (try h.cli([command, "--help"])).out)
            #expect(short.out.contains("--json"), "\(command) has --json")
            texts.append((command, short.out))
        }
        for (command, text) in texts {
            for line in text.split(separator: "\n") {
                #expect(line.count <= 80, "\(command): \(line.count) columns: \(line)")
            }
        }
    }

    @Test func completionsLoadAndComplete() throws {
        let h = try Self.world(selfSigningIn: false)
        let bash = repositoryRoot + "/completions/browser-login.bash"
        let complete = { (words: String, index: Int) throws -> String in
            try Self.shell(
                h,
                "bash -c 'source \(bash); COMP_WORDS=(\(words)); COMP_CWORD=\(index); _browser_login; echo ${COMPREPLY[@]}'"
            ).out.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(try complete("browser-login st", 1) == "status start")
        #expect(try complete("browser-login re", 1) == "resume request")
        #expect(try complete("browser-login session ''", 2) == Self.notes, "client ids from the broker")
        #expect(try complete("browser-login request x P", 3) == "POST PUT PATCH")
        #expect(try complete("browser-login start --w", 2) == "--wait")
        let attempt = try h.cli(["start", Self.notes, "--no-browser", "--json"])
        let id = try #require(try JSONValue.parse(attempt.out)["attemptId"]?.stringValue)
        #expect(try complete("browser-login cancel ''", 2) == id, "attempt ids from the broker")

        // Every command of --help is completed.
        let main = try h.cli(["--help"]).out
        let all = try complete("browser-login ''", 1).split(separator: " ").map(String.init)
        for command in ["status", "start", "request", "install-handler", "doctor", "watch"] {
            #expect(main.contains("  " + command + " ") && all.contains(command), "\(command)")
        }

        // zsh and fish check their files' syntax, when installed.
        for (shell, file) in [("zsh", "_browser-login"), ("fish", "browser-login.fish")] {
            guard let path = ["/usr/bin/", "/bin/"].map({ $0 + shell }).first(where: FileManager.default.isExecutableFile)
            else {
                print("CLIScriptingTests: \(shell) is not installed; its completion's syntax is not checked")
                continue
            }
            let check = try runProgram(path, ["-n", repositoryRoot + "/completions/" + file])
            #expect(check.status == 0, "\(shell): \(check.err)")
        }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/fish") {
            let fish = try Self.shell(
                h, "fish -c 'source \(repositoryRoot)/completions/browser-login.fish; complete -C \"browser-login sess\"'")
            #expect(fish.out.hasPrefix("session"), "\(fish)")
        }
    }

    @Test func makeInstallPutsTheCompletionsWhereShellsLook() throws {
        let dest = try makeTemporaryDirectory("blc")
        defer { try? FileManager.default.removeItem(atPath: dest) }
        let files = [
            "usr/share/bash-completion/completions/browser-login", "usr/share/zsh/vendor-completions/_browser-login",
            "usr/share/fish/vendor_completions.d/browser-login.fish",
        ]
        let make = { (target: String) throws -> Int32 in
            let result = try runProgram(
                "/usr/bin/env", ["make", "-s", target, "DESTDIR=\(dest)", "PREFIX=/usr", "BINDIR_SRC=\(binDirectory)"],
                directory: repositoryRoot)
            #expect(result.status == 0, "\(result.out)\(result.err)")
            return result.status
        }
        #expect(try make("install") == 0)
        for file in files { #expect(FileManager.default.fileExists(atPath: dest + "/" + file), "\(file)") }
        #expect(try make("uninstall") == 0)
        for file in files { #expect(!FileManager.default.fileExists(atPath: dest + "/" + file), "\(file)") }
    }

    @Test func theShellExampleSignsInAndAddsANote() throws {
        let h = try Self.world()
        let script = repositoryRoot + "/examples/apps/shell/notes.sh"
        let page = try String(contentsOfFile: repositoryRoot + "/docs/apps/shell.md", encoding: .utf8)
        #expect(page.contains("```sh\n" + (try String(contentsOfFile: script, encoding: .utf8)) + "```\n"))
        let first = try Self.shell(h, "'\(script)' 'a note from \"sh\"'")
        #expect(first.status == 0, "\(first.out)\(first.err)")
        #expect(first.err.contains("signing in"))
        #expect(first.out.contains("signed in as \(h.testEmail)"))
        #expect(first.out.contains(#"- a note from "sh""#), "\(first.out)")
        let second = try Self.shell(h, "'\(script)'")
        #expect(second.status == 0)
        #expect(!second.err.contains("signing in"), "signed in already")
        #expect(second.out.contains("- a note from"))
        let unknown = try Self.shell(h, "CLIENT=com.example.nope '\(script)'")
        #expect(unknown.status == 66, "\(unknown.err)")
        #expect(unknown.err.contains("no sign-in: CLIENT_UNKNOWN"))
    }

    /// notes.sh's account switcher on an `Accounts=multiple` client: two
    /// accounts (the second through `--add-account --login-hint`, which the
    /// scripted user keeps), listed, switched, and written to by key.
    @Test func theShellExampleSwitchesAccounts() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Accounts=multiple")
        h.useScriptedUserAgent()
        try h.startBroker()
        let rpc = try h.rpc()
        let script = "'" + repositoryRoot + "/examples/apps/shell/notes.sh'"
        let current = { try rpc.call("session.get", params: ["client": .string(Self.notes)])["accountKey"]?.stringValue }

        let first = try Self.shell(h, script + " 'a home note'")
        try #require(first.status == 0, "\(first.out)\(first.err)")
        let firstKey = try #require(try current())
        let other = h.testEmail.replacingOccurrences(of: "@", with: "work@")
        let added = try Self.shell(h, script + " --add-account --login-hint '\(other)' 'a work note'")
        try #require(added.status == 0, "\(added.out)\(added.err)")
        #expect(added.err.contains("signing in"))
        #expect(added.out == "signed in as \(other)\n- a work note\n", "\(added.out)")
        let secondKey = try #require(try current())
        #expect(secondKey != firstKey)

        let listed = try Self.shell(h, script + " --accounts")
        #expect(listed.status == 0)
        #expect(listed.out.contains(firstKey) && listed.out.contains(secondKey) && listed.out.contains(other), "\(listed.out)")
        let used = try Self.shell(h, script + " --use " + firstKey)
        #expect(used.status == 0 && used.out == "signed in as \(h.testEmail)\n- a home note\n", "\(used.out)\(used.err)")
        #expect(try current() == firstKey)
        // By key, the current account staying.
        let asOther = try Self.shell(h, script + " --account \(secondKey) 'another'")
        #expect(!asOther.err.contains("signing in"), "a named account is used as it is")
        #expect(asOther.out == "signed in as \(other)\n- a work note\n- another\n", "\(asOther.out)\(asOther.err)")
        #expect(try current() == firstKey)

        let unknown = try Self.shell(h, script + " --account acct_" + String(repeating: "A", count: 22))
        #expect(unknown.status != 0 && unknown.err.contains("ACCOUNT_UNKNOWN"), "\(unknown.err)")
        #expect(try Self.shell(h, script + " --login-hint " + other).status == 64)
    }
}
