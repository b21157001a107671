import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// What people read from the CLI (issue 36): errors that name the commands
/// and flags to type, a body that ends its line on a terminal but stays
/// exact in a pipe, HTTP_ERROR in text mode, and a sign-out that says what
/// happened — the real CLI against the real daemon and server.
@Suite("The CLI's words for people", .dedicatedThread)
struct CLIWordsTests {
    static let notes = "com.example.notes"

    /// The real server and broker, with the notes client signed in.
    static func signedIn() throws -> Harness {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        try h.signIn()
        return h
    }

    @Test func errorsNameTheCommandsAndFlagsToTypeNotTheAPIs() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.useScriptedUserAgent()
        try h.startBroker()

        let notSignedIn = try h.cli(["request", Self.notes, "GET", "/api/me"])
        #expect(notSignedIn.status == 1)
        #expect(notSignedIn.err.contains("NOT_SIGNED_IN"), "\(notSignedIn)")
        #expect(notSignedIn.err.contains("'browser-login start com.example.notes'"), "\(notSignedIn)")
        #expect(!notSignedIn.err.contains("login.start"), "\(notSignedIn)")
        let asJSON = try h.cli(["request", Self.notes, "GET", "/api/me", "--json"])
        let error = try JSONValue.parse(asJSON.err.trimmingCharacters(in: .newlines))
        #expect(error["code"] == "NOT_SIGNED_IN", "the code is the broker's")
        #expect(error["message"]?.stringValue?.contains("browser-login start com.example.notes") == true, "\(error)")

        #expect(try h.cli(["start", Self.notes, "--wait", "--timeout", "60"]).status == 0)
        let again = try h.cli(["start", Self.notes])
        #expect(again.status == 1)
        #expect(again.err.contains("ALREADY_SIGNED_IN") && again.err.contains(h.testEmail), "\(again)")
        #expect(again.err.contains("'browser-login start com.example.notes --switch-account'"), "\(again)")
        #expect(again.err.contains("'browser-login sign-out com.example.notes'"), "\(again)")
        #expect(!again.err.contains("switchAccount"), "\(again)")
        // The API keeps its own words for API callers.
        let rpc = try h.rpc()
        do {
            _ = try rpc.call("login.start", params: ["client": .string(Self.notes), "openBrowser": false])
            Issue.record("login.start while signed in succeeded")
        } catch let failure as RPCError {
            #expect(failure.message.contains("switchAccount=true"), "\(failure)")
        }
    }

    @Test func aBrowserThatFailsIsToldInCLIWords() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Browser=/nonexistent/browser %u")
        try h.startBroker()
        let started = try h.cli(["start", Self.notes])
        #expect(started.status == 69)
        #expect(started.err.contains("BROWSER_FAILED"), "\(started)")
        #expect(started.err.contains("'browser-login resume at_") && started.err.contains(" --no-browser'"), "\(started)")
        #expect(!started.err.contains("openBrowser") && !started.err.contains("login.resume"), "\(started)")
    }

    @Test func aBodyEndsItsLineOnATerminalAndStaysExactInAPipe() throws {
        let h = try Self.signedIn()
        let cli = binDirectory + "/browser-login"
        let missing = ["--socket", h.socketPath, "request", Self.notes, "GET", "/api/nothing-here"]

        // A pipe gets the API's bytes, nothing added.
        let answer = try JSONValue.parse(try h.cli(Array(missing.dropFirst(2)) + ["--json"]).out)
        let body = try #require(answer["body"]?.stringValue)
        #expect(!body.hasSuffix("\n"), "the server's body has no newline of its own: \(body)")
        let piped = try h.cli(Array(missing.dropFirst(2)))
        #expect(piped.status == 22)
        #expect(piped.out == body, "exact bytes to a pipe")
        #expect(piped.err == "browser-login: HTTP_ERROR: the API answered HTTP 404\n", "\(piped.err)")

        // A terminal: the body on a line of its own, then HTTP_ERROR and the status on the next.
        let shown = try runInTerminal(cli, missing, environment: h.environment())
        #expect(shown.status == 22)
        #expect(shown.output == body + "\nbrowser-login: HTTP_ERROR: the API answered HTTP 404\n", "\(shown.output)")
        let me = try runInTerminal(
            cli, ["--socket", h.socketPath, "request", Self.notes, "GET", "/api/me"], environment: h.environment())
        #expect(me.status == 0)
        #expect(me.output.hasSuffix("}\n") && me.output.contains(h.testEmail), "\(me.output)")
    }

    @Test func signOutSaysWhoWasSignedOutAndWhatTheServerWasTold() throws {
        let h = try Self.signedIn()
        let out = try h.cli(["sign-out", Self.notes])
        #expect(out.status == 0, "\(out)")
        let lines = out.out.split(separator: "\n")
        #expect(lines.first?.hasPrefix("signed out of com.example.notes (was signed in as ") == true, "\(out.out)")
        #expect(lines.first?.contains("<\(h.testEmail)>") == true, "\(out.out)")
        #expect(!out.out.contains("until") && !out.out.contains("signedOut as"), "no longer reads as a live session")
        // The answer carries no revoke outcome: the CLI claims none, and says where it is.
        #expect(!out.out.contains("confirmed"), "\(out.out)")
        #expect(lines.count == 2 && lines[1].contains("the broker revokes the session at the server"), "\(out.out)")
        #expect(lines[1].contains("'sign-out revoke owed'"), "\(out.out)")
        // Again: nobody is signed in, and it says so instead of naming the last account.
        let again = try h.cli(["sign-out", Self.notes])
        #expect(again.status == 0)
        #expect(again.out == "com.example.notes was not signed in: nothing to sign out\n", "\(again.out)")
        // --json prints the broker's answer as it is, nothing added.
        let json = try JSONValue.parse(try h.cli(["sign-out", Self.notes, "--json"]).out)
        #expect(json["status"] == "signedOut" && json["revokedAtServer"] == nil, "\(json)")
    }
}
