import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The hosted page's own script (run in Node with a minimal DOM against the
/// live server, as `HostedPageScriptTests` does) on a disabled account and
/// at the sign-up gates: each code has its own message, and the page offers
/// no retry where none can help.
@Suite(.dedicatedThread) struct AccountsPageTests {
    static let node = "/usr/bin/node"
    static let disabled = "This account is disabled. Ask an administrator to enable it."
    static let invitationRequired =
        "New accounts need an invitation. Enter the invitation code an administrator gave you, then ask for a new sign-in code."
    static let waitlisted = "You are on the waitlist. An administrator will let you in; sign in again once they have."
    static let domainNotAllowed = "Addresses at this domain cannot sign up here. Use your organisation's email address."

    /// Drives the page: signs in with `email` and `code`; when the page then
    /// asks for an invitation and `invite` is given, enters it and signs in
    /// again. Answers the page's state after each sign-in (`first`, `second`).
    func drive(_ server: TestServer, _ authorizeURL: String, email: String, invite: String = "") throws -> (
        first: [String: Any], second: [String: Any]?
    ) {
        let script = server.directory.path + "/drive-accounts-page.js"
        try Data(Self.driver.utf8).write(to: URL(fileURLWithPath: script))
        let run = try runProgram(Self.node, [script, authorizeURL, email, "000000", invite])
        #expect(run.status == 0, "\(run.err)")
        let all = (try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any]) ?? [:]
        return (all["first"] as? [String: Any] ?? [:], all["second"] as? [String: Any])
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func aDisabledAccountIsToldToAskAnAdministratorAndNotToRetry() throws {
        let server = try TestServer()
        let email = "dev+bltestdisabledpage@example.com"
        try server.browser().verifySignIn(email: email, code: "000000")
        let disable = try admin(server, ["users", "disable", email])
        #expect(disable.status == 0, "\(disable.err)")
        let attempt = try NativeAttempt.create(server)
        let page = try drive(server, attempt.created.authorizeUrl, email: email).first
        let status = try #require(page["status"] as? String)
        #expect(status == Self.disabled)
        #expect(!status.lowercased().contains("try"))
        #expect(page["signinShown"] as? Bool == false)
        #expect(page["confirmShown"] as? Bool == false)
        // The app can still be told: Cancel stays.
        #expect(page["cancelShown"] as? Bool == true)
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .pending)
        let script = try server.get(server.base + "/browser/login.js").text
        #expect(script.contains(#"AUTH_USER_DISABLED: "\#(Self.disabled)""#))
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func thePageAsksForAnInvitationAndTheNewUserIsWelcomed() throws {
        let server = try TestServer { $0.signupMode = .invite }
        let token = try invitationToken(try admin(server, ["invitations", "create"]).out)
        let attempt = try NativeAttempt.create(server)
        let email = "dev+bltestinvited@example.com"
        let (first, second) = try drive(server, attempt.created.authorizeUrl, email: email, invite: token)
        #expect(first["status"] as? String == Self.invitationRequired)
        #expect(first["inviteShown"] as? Bool == true)
        #expect(first["codeFormShown"] as? Bool == false)
        #expect(first["signinShown"] as? Bool == true)
        let after = try #require(second)
        #expect(after["confirmShown"] as? Bool == true)
        #expect(after["account"] as? String == email)
        #expect(after["status"] as? String == "Your account was created.")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func anInvitationInThePageAddressIsSentWithTheCode() throws {
        let server = try TestServer { $0.signupMode = .invite }
        let token = try invitationToken(try admin(server, ["invitations", "create"]).out)
        let attempt = try NativeAttempt.create(server)
        let email = "dev+bltestlinked@example.com"
        let page = try drive(server, attempt.created.authorizeUrl + "&invite=" + token, email: email).first
        #expect(page["confirmShown"] as? Bool == true, "\(page)")
        #expect(page["status"] as? String == "Your account was created.")
        #expect(try admin(server, ["invitations", "list"]).out.contains(email))
        // The token in the page's address is never logged (requests are named by route).
        #expect(!CapturedLogs.all.contains(token))
        // Signing in again is not a new user.
        let again = try drive(server, try NativeAttempt.create(server).created.authorizeUrl, email: email).first
        #expect(again["confirmShown"] as? Bool == true)
        #expect(again["status"] as? String == "")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func theWaitlistAndDomainGatesHaveTheirOwnMessages() throws {
        let waiting = try TestServer {
            $0.signupMode = .invite
            $0.waitlist = true
        }
        let onList = try drive(
            waiting, try NativeAttempt.create(waiting).created.authorizeUrl, email: "dev+bltestwait@example.com"
        ).first
        #expect(onList["status"] as? String == Self.waitlisted)
        #expect(onList["signinShown"] as? Bool == false)
        let domain = try TestServer {
            $0.signupMode = .domain
            $0.allowedDomains = ["example.net"]
        }
        let refused = try drive(
            domain, try NativeAttempt.create(domain).created.authorizeUrl, email: "dev+bltestdomain@example.com"
        ).first
        #expect(refused["status"] as? String == Self.domainNotAllowed)
        #expect(refused["codeFormShown"] as? Bool == false)
        #expect(refused["emailFormShown"] as? Bool == true)
    }

    static let driver = #"""
        // Runs the hosted page's script (login.js, from the server) in Node with a
        // minimal DOM: signs in, records what the page shows, and when it asks for an
        // invitation and one is given, enters it and signs in again. Prints one JSON line.
        // usage: node drive-accounts-page.js AUTHORIZE_URL EMAIL CODE [INVITE]
        "use strict";
        const [authorizeUrl, email, code, invite = ""] = process.argv.slice(2);
        const jar = new Map();

        const pageAddress = authorizeUrl;
        \#(PageDriver.prelude)
        const shown = (id) => !elements[id].hidden;
        const snapshot = () => ({
          status: elements.status.textContent, signinShown: shown("signin"), emailFormShown: shown("email-form"),
          codeFormShown: shown("code-form"), inviteShown: shown("invite-field"), confirmShown: shown("confirm"),
          cancelShown: shown("cancel"), account: elements.account.textContent
        });
        async function signIn() {
          elements.email.value = email;
          await elements["email-form"].fire("submit");
          await until(() => shown("code-form"), "the code form");
          elements.code.value = code;
          await elements["code-form"].fire("submit");
          await until(() => shown("confirm") || !elements.status.textContent.startsWith("We sent a code"), "an answer");
        }

        (async () => {
          const html = await (await browserFetch(authorizeUrl)).text();
          for (const match of html.matchAll(/ id="([^"]+)"/g)) elements[match[1]] = makeElement(match[1]);
          for (const match of html.matchAll(/<[^>]* id="([^"]+)"[^>]*>/g)) {
            if (/\shidden[\s>]/.test(match[0])) elements[match[1]].hidden = true;
          }
          elements.app.dataset.base = /data-base="([^"]+)"/.exec(html)[1];
          const script = await (await browserFetch(/<script src="([^"]+)"/.exec(html)[1])).text();
          const window = {
            location: { search: new URL(authorizeUrl).search, assign() {} }, addEventListener() {}
          };
          const document = { getElementById: (id) => elements[id] };
          new Function("window", "document", "fetch", "URLSearchParams", script)(window, document, browserFetch, URLSearchParams);
          await until(() => shown("signin") || shown("confirm"), "sign-in or confirm");
          await signIn();
          const first = snapshot();
          let second = null;
          if (invite !== "" && shown("invite-field")) {
            elements.invite.value = invite;
            await signIn();
            second = snapshot();
          }
          console.log(JSON.stringify({ first, second }));
        })().catch((error) => { console.error(String(error)); process.exit(1); });
        """#
}
