import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

// Test accounts, sign-up gates and disabled users (issue 15, items 3–5), on
// a real server over HTTP, with the real `browser-login-server` admin
// commands on its database.

/// The code a refused call answered (nil when it succeeded).
func refusal(_ body: () throws -> Any) -> String? {
    do {
        _ = try body()
        return nil
    } catch let error as ScriptedBrowserError {
        if case .refused(let status, let code?, _) = error, status != ServerErrorCode(code).httpStatus {
            return "\(code) with HTTP \(status)"
        }
        return error.code ?? "\(error)"
    } catch {
        return "\(error)"
    }
}

/// Runs an admin command of the real binary on the server's database.
func admin(_ server: TestServer, _ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
    try ServerBinary.run(arguments + ["--database", server.server.configuration.databasePath])
}

/// Requests a code for `email` and signs in with the emailed code (and `invite`, if any).
@discardableResult
func signInWithEmailedCode(_ server: TestServer, _ browser: ScriptedBrowser, _ email: String, invite: String? = nil)
    throws -> BrowserSessionInfo
{
    try browser.startSignIn(email: email)
    let code = try #require(OutboxMailSender.latestCode(in: server.outbox, to: email))
    if let invite { return try browser.verifySignIn(email: email, code: code, invite: invite) }
    return try browser.verifySignIn(email: email, code: code)
}

/// The token line of `invitations create`.
func invitationToken(_ output: String) throws -> String {
    let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("token: ") })
    return String(line.dropFirst("token: ".count))
}

/// Writes a configuration file with `members` (JSON members) and one client; answers its path.
func configFile(_ directory: TemporaryDirectory, _ name: String, _ members: String) throws -> String {
    let json = #"""
        {\#(members), "database": "db.sqlite", "port": 0,
         "clients": [{"clientId": "com.example.notes", "appName": "Notes",
                      "returnUrls": ["com.example.notes:/callback"], "policy": "confirm"}]}
        """#
    let path = directory.path + "/" + name + ".json"
    try Data(json.utf8).write(to: URL(fileURLWithPath: path))
    return path
}

@Suite(.dedicatedThread) struct TestAccountRuleTests {
    @Test func theBaseAddressDoesNotAcceptTheFixedCodeAndSignsInWithAnEmailedOne() throws {
        let server = try TestServer()
        let browser = try server.browser()
        try browser.startSignIn(email: testBaseAddress)
        #expect(OutboxMailSender.messages(in: server.outbox, to: testBaseAddress).count == 1)
        #expect(refusal { try browser.verifySignIn(email: testBaseAddress, code: "000000") } == "OTP_INVALID")
        let code = try #require(OutboxMailSender.latestCode(in: server.outbox, to: testBaseAddress))
        let session = try browser.verifySignIn(email: testBaseAddress, code: code)
        #expect(session.authMethod == "email")
        #expect(session.account.email == testBaseAddress)
    }

    @Test func aDerivedAddressSignsUpWithTheFixedCodeThenSignsIn() throws {
        let server = try TestServer()
        let email = "dev+bltest.new-1@example.com"
        let first = try server.browser().verifySignIn(email: email, code: "000000")
        #expect(first.isNewUser == true)
        #expect(first.authMethod == "test")
        #expect(first.account.email == email)
        #expect(first.account.displayName == "dev+bltest.new-1")
        let again = try server.browser()
        let second = try again.verifySignIn(email: email, code: "000000")
        #expect(second.isNewUser == false)
        #expect(second.account.userId == first.account.userId)
        // `GET browser/session` does not say it: only a finished sign-in does.
        let current = try again.request("GET", server.base + "/browser/session", stateChanging: false)
        #expect(current.status == 200 && !current.text.contains("isNewUser"))
        // No email is ever sent to a test account.
        #expect(OutboxMailSender.messages(in: server.outbox, to: email).isEmpty)
        // The account is provisioned through the one sign-up path: it is a user like any other.
        let users = try admin(server, ["users", "list"])
        #expect(users.status == 0 && users.out.contains(email))
    }

    @Test func theBaseAndItsDerivedAddressesAreSeparateAccounts() throws {
        let server = try TestServer()
        let derived = try server.browser().verifySignIn(email: testBase, code: "000000")
        let base = try signInWithEmailedCode(server, try server.browser(), testBaseAddress)
        #expect(derived.account.userId != base.account.userId)
        #expect(base.isNewUser == true)
    }

    @Test func atMostFiftyBasesAndNoDerivedBaseAtStartUp() throws {
        let directory = try TemporaryDirectory()
        let fifty = (1...50).map { #""base\#($0)@example.com""# }.joined(separator: ", ")
        let fiftyOne = (1...51).map { #""base\#($0)@example.com""# }.joined(separator: ", ")
        var ok = baseConfiguration(directory: directory.path)
        ok.testAccounts = (1...50).map { "base\($0)@example.com" }
        try ok.validate()
        ok.testAccounts.append("base51@example.com")
        let error = #expect(throws: ConfigurationError.self) { try ok.validate() }
        #expect(error?.field == "testAccounts" && error?.rule == "at-most-50")
        _ = try configFile(directory, "fifty", #""testAccounts": [\#(fifty)]"#)
        for (name, member, expected) in [
            ("too-many", #""testAccounts": [\#(fiftyOne)]"#, "testAccounts: at-most-50:"),
            ("derived", #""testAccounts": ["qa@example.com", "qa+bltest@example.com"]"#, "testAccounts[1]: not-derived:"),
            ("derived-suffix", #""testAccounts": ["qa+bltest7@example.com"]"#, "testAccounts[0]: not-derived:"),
            ("plus", #""testAccounts": ["qa+x@example.com"]"#, "testAccounts[0]: email:"),
        ] {
            let run = try ServerBinary.run(["--config", try configFile(directory, name, member)])
            #expect(run.status == 78, "\(name): \(run.err)")
            #expect(run.err.contains("invalid configuration: " + expected), "\(name): \(run.err)")
            #expect(run.out.isEmpty)
        }
        let flag = try ServerBinary.run([
            "--config", directory.path + "/fifty.json", "--test-account", "dev+bltest@example.com",
        ])
        #expect(flag.status == 78, "\(flag.err)")
        #expect(flag.err.contains("testAccounts: at-most-50:"), "\(flag.err)")
    }

    @Test func testAccountsPassTheSignUpGatesLikeAnyone() throws {
        let server = try TestServer { $0.signupMode = .invite }
        #expect(refusal { try server.browser().verifySignIn(email: testBase, code: "000000") } == "INVITATION_REQUIRED")
        #expect(try admin(server, ["members", "add", testBase]).status == 0)
        #expect(try server.browser().verifySignIn(email: testBase, code: "000000").isNewUser == true)
    }
}

@Suite(.dedicatedThread) struct SignupGateTests {
    @Test func openIsTheDefaultAndLetsAnyoneSignUp() throws {
        let server = try TestServer()
        #expect(server.server.configuration.signupMode == .open)
        let session = try signInWithEmailedCode(server, try server.browser(), "carol@elsewhere.org")
        #expect(session.isNewUser == true)
    }

    @Test func inviteNeedsAnInvitationOrMembership() throws {
        let server = try TestServer { $0.signupMode = .invite }
        let browser = try server.browser()
        #expect(refusal { try signInWithEmailedCode(server, browser, "eve@example.org") } == "INVITATION_REQUIRED")
        // No user was created, and there is no waitlist entry without `waitlist`.
        let users = try admin(server, ["users", "list"])
        #expect(users.status == 0 && !users.out.contains("eve@example.org"))
        #expect(try admin(server, ["waitlist", "list"]).out.split(separator: "\n").count == 1)
        // A member added by the admin command signs up.
        let added = try admin(server, ["members", "add", "Eve@Example.org"])
        #expect(added.status == 0, "\(added.err)")
        #expect(added.out.contains("eve@example.org: added as a member"))
        let session = try signInWithEmailedCode(server, browser, "eve@example.org")
        #expect(session.isNewUser == true)
        let members = try admin(server, ["members", "list"])
        #expect(members.out.contains("eve@example.org") && members.out.contains("\tyes"))
        // Removing the member does not affect the account: gates are for sign-up only.
        #expect(try admin(server, ["members", "remove", "eve@example.org"]).status == 0)
        #expect(try signInWithEmailedCode(server, try server.browser(), "eve@example.org").isNewUser == false)
        let again = try admin(server, ["members", "remove", "eve@example.org"])
        #expect(again.status == 1 && again.err.contains("is not a member"))
    }

    @Test func anInvitationIsSingleUseAndExpires() throws {
        let server = try TestServer { $0.signupMode = .invite }
        let created = try admin(server, ["invitations", "create"])
        #expect(created.status == 0, "\(created.err)")
        let token = try invitationToken(created.out)
        #expect(created.out.contains("for any address") && created.out.contains("single use"))
        let first = try signInWithEmailedCode(server, try server.browser(), "frank@example.org", invite: token)
        #expect(first.isNewUser == true)
        // Single use: the same token does not let another address in.
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "grace@example.org", invite: token) }
                == "INVITATION_INVALID")
        let list = try admin(server, ["invitations", "list"])
        #expect(list.out.contains("\tused\t") && list.out.contains("frank@example.org"))
        #expect(!list.out.contains(token))
        // An unknown token.
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "grace@example.org", invite: "nope") }
                == "INVITATION_INVALID")
        // Expiry: seven days by default.
        let later = try invitationToken(try admin(server, ["invitations", "create"]).out)
        // A minute past: the admin command stamped the invitation with the wall clock, some time after the
        // manual clock started (seconds on a loaded machine, or on PostgreSQL).
        server.time.advance(7 * 24 * 3_600_000 + 60_000)
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "grace@example.org", invite: later) }
                == "INVITATION_INVALID")
        // (`invitations list` reads the wall clock, which this test does not move.)
        // The token is never logged.
        #expect(!CapturedLogs.all.contains(token) && !CapturedLogs.all.contains(later))
    }

    @Test func anInvitationForOneAddressAndARevokedOneLetNobodyElseIn() throws {
        let server = try TestServer { $0.signupMode = .invite }
        let bound = try admin(server, ["invitations", "create", "heidi@example.org"])
        #expect(bound.out.contains("for heidi@example.org"))
        let token = try invitationToken(bound.out)
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "ivan@example.org", invite: token) }
                == "INVITATION_INVALID")
        #expect(try signInWithEmailedCode(server, try server.browser(), "heidi@example.org", invite: token).isNewUser == true)
        let revokedOut = try admin(server, ["invitations", "create"]).out
        let revoked = try invitationToken(revokedOut)
        let id = try #require(revokedOut.split(separator: " ").dropFirst().first.map(String.init))
        #expect(id.hasPrefix("inv_"))
        #expect(try admin(server, ["invitations", "revoke", id]).status == 0)
        #expect(try admin(server, ["invitations", "revoke", id]).status == 1)
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "ivan@example.org", invite: revoked) }
                == "INVITATION_INVALID")
        #expect(try admin(server, ["invitations", "list"]).out.contains("\trevoked\t"))
    }

    @Test func theWaitlistTakesAnEntryAndApprovingItLetsTheUserIn() throws {
        let server = try TestServer {
            $0.signupMode = .invite
            $0.waitlist = true
        }
        #expect(refusal { try signInWithEmailedCode(server, try server.browser(), "judy@example.org") } == "WAITLISTED")
        #expect(refusal { try signInWithEmailedCode(server, try server.browser(), "judy@example.org") } == "WAITLISTED")
        let list = try admin(server, ["waitlist", "list"])
        #expect(list.out.split(separator: "\n").filter { $0.hasPrefix("judy@example.org\t") }.count == 1)
        #expect(try admin(server, ["waitlist", "approve", "mallory@example.org"]).status == 1)
        let approved = try admin(server, ["waitlist", "approve", "judy@example.org"])
        #expect(approved.status == 0, "\(approved.err)")
        #expect(!(try admin(server, ["waitlist", "list"]).out.contains("judy@example.org")))
        #expect(try admin(server, ["members", "list"]).out.contains("judy@example.org"))
        #expect(try signInWithEmailedCode(server, try server.browser(), "judy@example.org").isNewUser == true)
        // A valid invitation gets past the waitlist too.
        let token = try invitationToken(try admin(server, ["invitations", "create"]).out)
        #expect(try signInWithEmailedCode(server, try server.browser(), "ken@example.org", invite: token).isNewUser == true)
    }

    @Test func domainAdmitsAllowedDomainsAndMembers() throws {
        let server = try TestServer {
            $0.signupMode = .domain
            $0.allowedDomains = ["Example.com"]
            $0.testAccounts = ["dev@example.com", "qa@other.org"]
        }
        #expect(try signInWithEmailedCode(server, try server.browser(), "leo@example.com").isNewUser == true)
        #expect(try server.browser().verifySignIn(email: "dev+bltest@example.com", code: "000000").isNewUser == true)
        #expect(
            refusal { try signInWithEmailedCode(server, try server.browser(), "leo@sub.example.com") } == "DOMAIN_NOT_ALLOWED")
        #expect(
            refusal { try server.browser().verifySignIn(email: "qa+bltest@other.org", code: "000000") } == "DOMAIN_NOT_ALLOWED")
        #expect(try admin(server, ["members", "add", "qa+bltest@other.org"]).status == 0)
        #expect(try server.browser().verifySignIn(email: "qa+bltest@other.org", code: "000000").isNewUser == true)
    }

    @Test func gatesDoNotAffectExistingUsers() throws {
        let open = try TestServer()
        let existing = try signInWithEmailedCode(open, try open.browser(), "mike@elsewhere.org")
        try open.browser().verifySignIn(email: testBase, code: "000000")
        // The same database under `invite`, then under `domain`.
        for mode in [SignupMode.invite, .domain] {
            let gated = try TestServer {
                $0.databasePath = open.server.configuration.databasePath
                $0.signupMode = mode
                $0.allowedDomains = ["example.net"]
            }
            let again = try signInWithEmailedCode(gated, try gated.browser(), "mike@elsewhere.org")
            #expect(again.isNewUser == false && again.account.userId == existing.account.userId)
            #expect(try gated.browser().verifySignIn(email: testBase, code: "000000").isNewUser == false)
            #expect(refusal { try signInWithEmailedCode(gated, try gated.browser(), "nina@elsewhere.org") } != nil)
        }
    }

    @Test func theServerBinaryReadsTheSignUpConfiguration() throws {
        let directory = try TemporaryDirectory()
        let config = try configFile(
            directory, "invite", #""signupMode": "invite", "waitlist": true, "outbox": "outbox""#)
        let process = try ServerProcess(["--config", config])
        let browser = try ScriptedBrowser(serverOrigin: process.listenURL)
        try browser.startSignIn(email: "olga@example.org")
        let code = try #require(OutboxMailSender.latestCode(in: directory.path + "/outbox", to: "olga@example.org"))
        #expect(refusal { try browser.verifySignIn(email: "olga@example.org", code: code) } == "WAITLISTED")
        let list = try ServerBinary.run(["waitlist", "list", "--config", config])
        #expect(list.status == 0 && list.out.contains("olga@example.org"), "\(list.err)")
        for (name, member, expected) in [
            ("mode", #""signupMode": "closed""#, "signupMode: one-of:"),
            ("domains", #""signupMode": "domain""#, "allowedDomains: required:"),
            ("bad-domain", #""signupMode": "domain", "allowedDomains": ["@example.com"]"#, "allowedDomains[0]: domain:"),
            ("waitlist", #""waitlist": true"#, "waitlist: invite-only:"),
            ("lifetime", #""invitationLifetimeMillis": 5"#, "invitationLifetimeMillis: range:"),
        ] {
            let run = try ServerBinary.run(["--config", try configFile(directory, name, member)])
            #expect(run.status == 78, "\(name): \(run.err)")
            #expect(run.err.contains("invalid configuration: " + expected), "\(name): \(run.err)")
        }
    }

    @Test func adminCommandsRefuseBadInput() throws {
        let server = try TestServer()
        #expect(try admin(server, ["members", "add", "not-an-address"]).status == 1)
        #expect(try admin(server, ["invitations", "create", "nope"]).status == 1)
        #expect(try admin(server, ["members", "add"]).status == 64)
        #expect(try admin(server, ["invitations", "frobnicate"]).status == 64)
    }
}
