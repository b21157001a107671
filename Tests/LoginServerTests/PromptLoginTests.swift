import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// docs/protocol.md §5.1 and §6: the create request's optional `prompt`
/// (`"login"`: a fresh sign-in that replaces the browser session) and
/// `loginHint` (the address the page pre-fills), stored with the attempt and
/// answered by describe. Runs on SQLite, and on PostgreSQL with
/// `BL_TEST_STORE=postgres` (`make test-postgres`).
@Suite(.dedicatedThread) struct PromptLoginTests {
    static let work = "dev+bltestwork@example.com"
    static let personal = "dev+bltesthome@example.com"

    /// Describe as a browser reads it: the JSON object.
    static func described(_ server: TestServer, _ attempt: NativeAttempt) throws -> [String: Any] {
        let answer = try server.get(server.base + "/browser/attempts/" + attempt.id)
        #expect(answer.status == 200, "\(answer.text)")
        return try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
    }

    /// A create request's JSON with `members` added (raw, so a test can send any type).
    static func createJSON(_ members: String) throws -> String {
        let verifier = try ProofSecret.generate()
        let recovery = try ProofSecret.generate()
        return #"{"clientId":"\#(confirmClient)","returnUrl":"\#(confirmReturn)","codeChallenge":"\#(verifier.challenge)","#
            + #""codeChallengeMethod":"S256","recoveryChallenge":"\#(recovery.challenge)","ephemeral":false\#(members)}"#
    }

    @Test func describeAnswersPromptAndLoginHintAndNullWhenAbsent() throws {
        let server = try TestServer()
        let asked = try NativeAttempt.create(server, prompt: "login", loginHint: "Ada.Work@Example.com")
        let answer = try Self.described(server, asked)
        #expect(answer["prompt"] as? String == "login")
        #expect(answer["loginHint"] as? String == "Ada.Work@Example.com")
        #expect(try server.browser().describe(attemptId: asked.id).prompt == "login")

        let plain = try Self.described(server, try NativeAttempt.create(server))
        #expect(plain["prompt"] is NSNull && plain["loginHint"] is NSNull, "\(plain)")
        // JSON null is the member absent.
        let nulls = try server.native("/attempts", try Self.createJSON(#","prompt":null,"loginHint":null"#))
        #expect(nulls.status == 201, "\(nulls.text)")
        let created = try nulls.decode(CreateAttemptResponse.self)
        let described = try server.browser().describe(attemptId: created.attemptId)
        #expect(described.prompt == nil && described.loginHint == nil)
    }

    /// 400 INVALID_REQUEST for a `prompt` other than "login" and a `loginHint`
    /// that is not an address of at most 254 bytes; nothing is created.
    @Test func createRefusesAnotherPromptAndABadLoginHint() throws {
        let server = try TestServer()
        let local = String(repeating: "a", count: 64)
        let longest = local + "@" + String(repeating: "b", count: 254 - 65 - 4) + ".com"
        #expect(longest.utf8.count == 254)
        let refused = [
            #","prompt":"select_account""#, #","prompt":"none""#, #","prompt":"LOGIN""#, #","prompt":"""#,
            #","prompt":1"#, #","prompt":["login"]"#, #","loginHint":"not an address""#, #","loginHint":"""#,
            #","loginHint":42"#, #","loginHint":"\#(longest)x""#, #","loginHint":"<script>alert(1)</script>@example.com""#,
            #","loginHint":"a\"><img src=x onerror=alert(1)>@example.com""#, #","loginHint":"ada@example.com\r\nX: y""#,
            #","prompt":"login","prompt":"login""#,
        ]
        for members in refused {
            let answer = try server.native("/attempts", try Self.createJSON(members))
            expectError(answer, .invalidRequest)
        }
        let hint = try server.native("/attempts", try Self.createJSON(#","loginHint":"\#(longest)""#))
        #expect(hint.status == 201, "\(hint.text)")
        let attempt = try hint.decode(CreateAttemptResponse.self)
        #expect(try server.browser().describe(attemptId: attempt.attemptId).loginHint == longest)
    }

    /// A fresh sign-in for a `prompt: "login"` attempt replaces the browser
    /// session: a new one is current in this browser, the old one is neither
    /// signed out nor revoked, and the native session it issued stays valid.
    @Test func aFreshSignInReplacesTheBrowserSessionAndKeepsWhatTheOldOneIssued() throws {
        let server = try TestServer()
        let browser = try server.browser()
        let (first, issued) = try login(server, email: Self.personal, browser: browser)
        let old = try #require(try browser.currentSession())
        server.time.advance(1_000)

        let added = try NativeAttempt.create(server, prompt: "login", loginHint: Self.work)
        // The page of this attempt offers no session: the scripted user signs in as the page asks.
        let callback = try browser.signInAndAuthorize(
            authorizeURL: added.created.authorizeUrl, email: Self.work, code: "000000")
        let answer = try added.exchange(server, code: try code(of: callback, attempt: added, issuer: server.origin))
        #expect(answer.status == 200, "\(answer.text)")
        let second = try answer.decode(ExchangeResponse.self)
        #expect(second.session.account.email == Self.work)
        #expect(second.session.authenticatedAt.millisecondsSince1970 > issued.session.authenticatedAt.millisecondsSince1970)

        let now = try #require(try browser.currentSession())
        #expect(now.sessionId != old.sessionId)
        #expect(now.account.email == Self.work)
        // The old browser session was not revoked: what it issued still works.
        let still = try server.get(server.base + "/native/session", headers: bearer(issued.session.accessToken))
        #expect(still.status == 200, "\(still.text)")
        let status = try first.status(server).decode(StatusResponse.self)
        #expect(status.state == .completed && status.sessionRevoked == false)
    }

    /// `prompt` changes nothing of what may authorize the attempt (§5.1): the
    /// server's authorize rules are those of §6. A scripted browser that
    /// ignores the page's rule can still continue with its current session.
    @Test func authorizeRulesAreUnchangedByPrompt() throws {
        let server = try TestServer()
        let browser = try server.browser()
        let signedIn = try browser.verifySignIn(email: Self.personal, code: "000000")
        let attempt = try NativeAttempt.create(server, prompt: "login")
        try browser.loadPage(attempt.created.authorizeUrl)
        let callback = try browser.authorize(
            attemptId: attempt.id, decision: .continue, expectedSessionId: signedIn.sessionId)
        let answer = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
        #expect(answer.status == 200, "\(answer.text)")
    }

    // MARK: In Chromium

    /// In headless Chromium, with a browser session present: the page of a
    /// `prompt: "login"` attempt shows no "Continue as …", only the sign-in,
    /// with the hint in the address field; the fresh sign-in becomes the
    /// browser's session, and the first one's native session stays valid. A
    /// hostile hint is shown as text in the field and nothing of it runs.
    @Test(.enabled(if: HeadlessChromium.isReady))
    func inChromiumThePageAsksForAFreshSignInWithTheAddressFilledIn() throws {
        let server = try TestServer()
        let first = try NativeAttempt.create(server)
        let added = try NativeAttempt.create(server, prompt: "login", loginHint: Self.work)
        let hostile = try NativeAttempt.create(server, loginHint: Self.hostileHint)
        let run = try HeadlessChromium.run(
            Self.agent,
            [first.created.authorizeUrl, added.created.authorizeUrl, hostile.created.authorizeUrl, Self.personal],
            in: server.directory.path)
        #expect(run.status == 0, "\(run.err)")
        let out = try #require(try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any], "\(run.out)")

        // With the first sign-in's session in the browser: no confirmation, the sign-in with the hint.
        #expect(out["confirmShown"] as? Bool == false)
        #expect(out["signinShown"] as? Bool == true)
        #expect(out["prefilled"] as? String == Self.work)
        #expect((out["status"] as? String)?.contains("Sign in with the account you want to use with Notes") == true)
        #expect(out["sessionBefore"] as? String == out["firstSession"] as? String)
        #expect(out["account"] as? String == Self.work)
        let firstSession = try #require(out["firstSession"] as? String)
        let secondSession = try #require(out["secondSession"] as? String)
        #expect(firstSession != secondSession)

        let one = try first.exchange(
            server, code: try code(of: try #require(out["first"] as? String), attempt: first, issuer: server.origin))
        let two = try added.exchange(
            server, code: try code(of: try #require(out["second"] as? String), attempt: added, issuer: server.origin))
        #expect(one.status == 200 && two.status == 200, "\(one.text) \(two.text)")
        let personal = try one.decode(ExchangeResponse.self)
        #expect(personal.session.account.email == Self.personal)
        #expect(try two.decode(ExchangeResponse.self).session.account.email == Self.work)
        // The old browser session was replaced, not signed out: its native session stays valid.
        let still = try server.get(server.base + "/native/session", headers: bearer(personal.session.accessToken))
        #expect(still.status == 200, "\(still.text)")

        #expect(out["hostileValue"] as? String == Self.hostileHint)
        #expect(out["injected"] as? Int == 0)
    }

    /// An address the server accepts (`'`, `&`, `/`, `=`, `{`, `\` are all
    /// allowed in a local part) that would run or render if the page put it
    /// into markup, or decoded it twice.
    static let hostileHint = #"o'neil&ltimg/src/onerror=window.blPwned=1&gt{{7*7}}\u003cb\u003e@example.com"#

    /// Prints one JSON object: what the pages showed and the return links.
    static let agent =
        HeadlessChromium.prelude + #"""
            def session_id():
                return driver.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "fetch(document.getElementById('app').dataset.base + '/browser/session',"
                    "      { credentials: 'same-origin', cache: 'no-store' })"
                    "  .then((r) => r.json()).then((j) => done(j.sessionId || null), () => done(null));")

            def sign_in_with_code():
                driver.find_element(By.CSS_SELECTOR, "#email-form button[type=submit]").click()
                wait.until(ready.visibility_of_element_located((By.ID, "code"))).send_keys("000000")
                driver.find_element(By.CSS_SELECTOR, "#code-form button[type=submit]").click()

            def open_in_new_tab(url):
                # The tab that went to the app's custom scheme keeps Chromium's external-protocol prompt,
                # which takes that tab's input; the browser's cookies are shared by every tab.
                driver.switch_to.new_window("tab")
                driver.get(url)

            def return_link():
                return wait.until(lambda d: d.find_element(By.ID, "return-link").get_attribute("href") or None)

            try:
                wait = WebDriverWait(driver, 30)
                driver.set_script_timeout(20)
                first, second, hostile, personal = sys.argv[1:5]
                out = {}
                # An ordinary attempt: sign in with the personal address, continue.
                driver.get(first)
                wait.until(ready.visibility_of_element_located((By.ID, "email"))).send_keys(personal)
                sign_in_with_code()
                wait.until(ready.element_to_be_clickable((By.ID, "continue"))).click()
                out["first"] = return_link()
                out["firstSession"] = session_id()
                # prompt "login": the browser has a session; the page must not offer it.
                open_in_new_tab(second)
                wait.until(ready.visibility_of_element_located((By.ID, "email")))
                out["confirmShown"] = driver.find_element(By.ID, "confirm").is_displayed()
                out["signinShown"] = driver.find_element(By.ID, "signin").is_displayed()
                out["prefilled"] = driver.find_element(By.ID, "email").get_attribute("value")
                out["status"] = driver.find_element(By.ID, "status").text
                out["sessionBefore"] = session_id()
                sign_in_with_code()
                wait.until(ready.element_to_be_clickable((By.ID, "continue")))
                out["account"] = driver.find_element(By.ID, "account").text
                driver.find_element(By.ID, "continue").click()
                out["second"] = return_link()
                out["secondSession"] = session_id()
                # A hostile hint: text in the field, nothing parsed or run.
                open_in_new_tab(hostile)
                wait.until(lambda d: d.find_element(By.ID, "email").get_attribute("value") or None)
                out["hostileValue"] = driver.find_element(By.ID, "email").get_attribute("value")
                out["injected"] = driver.execute_script(
                    "return document.querySelectorAll('img, b, iframe, script:not([src])').length"
                    " + (window.blPwned === undefined ? 0 : 100)")
                print(json.dumps(out), flush=True)
            except Exception as error:
                print("chromium: %s at %s: %s" % (type(error).__name__, driver.current_url.split("?")[0],
                      driver.find_element(By.TAG_NAME, "body").text[:300]), file=sys.stderr)
                sys.exit(1)
            finally:
                driver.quit()
            """#
}
