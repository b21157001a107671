import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import ScriptedBrowser
import Testing

/// The upstream sign-in in a real browser: headless Chromium (Debian's
/// chromium and chromium-driver, driven by Selenium as `make e2e-browser`
/// does) presses "Sign in with dot" on the hosted page, signs in and
/// consents on the test provider's own pages, follows the redirect back
/// (the round trip's `__Host-` cookie and the page's CSP as a browser
/// applies them), and continues. Runs where Chromium, its driver and
/// Selenium are installed (`scripts/install-deps --browser`).
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun && HeadlessChromium.isReady))
struct UpstreamBrowserTests {
    @Test func chromiumSignsInThroughTheProviderAndContinues() throws {
        let world = try UpstreamWorld()
        let attempt = try world.createAttempt()
        let run = try HeadlessChromium.run(Self.agent, [attempt.authorizeUrl], in: world.h.dir)
        #expect(run.status == 0, "\(run.err)")
        let lines = run.out.split(separator: "\n").map(String.init)
        #expect(lines.first == "Sign in with dot", "\(run.out)")
        #expect(lines.dropFirst().first == "alice@example.com", "\(run.out)")
        let callback = try #require(lines.last)
        #expect(callback.hasPrefix("com.example.notes:/callback?code="), "\(run.out)")
        let issued = try world.exchange(attempt, callback: callback)
        #expect(issued["session"]?["authMethod"] == "dot")
        #expect(issued["session"]?["account"]?["email"] == "alice@example.com")
    }

    /// `prompt: "login"` through the provider in Chromium: after a first
    /// sign-in with the provider, a plain attempt goes through the provider's
    /// own session (no password asked), but the page of a `prompt: "login"`
    /// attempt offers no session, and the provider asks for the password
    /// again; back on the page, the session just started is offered.
    @Test func promptLoginAsksTheProviderForAFreshSignIn() throws {
        let world = try UpstreamWorld()
        let first = try world.createAttempt()
        let plain = try world.createAttempt()
        let fresh = try world.createAttempt(prompt: "login", loginHint: "alice@example.com")
        let run = try HeadlessChromium.run(
            Self.promptAgent, [first.authorizeUrl, plain.authorizeUrl, fresh.authorizeUrl], in: world.h.dir)
        #expect(run.status == 0, "\(run.err)")
        let out = try #require(try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any], "\(run.out)")
        #expect(out["plainAskedPassword"] as? Bool == false, "\(out)")
        #expect(out["freshConfirmShown"] as? Bool == false, "\(out)")
        #expect(out["freshAskedPassword"] as? Bool == true, "\(out)")
        #expect((out["freshProviderUrl"] as? String)?.contains("login_hint") == true, "\(out)")
        #expect(out["freshAccount"] as? String == "alice@example.com")
        for (attempt, key) in [(first, "first"), (plain, "plain"), (fresh, "fresh")] {
            let callback = try #require(out[key] as? String, "\(out)")
            let issued = try world.exchange(attempt, callback: callback)
            #expect(issued["session"]?["authMethod"] == "dot")
        }
        #expect(out["freshSession"] as? String != out["plainSession"] as? String)
    }

    static let promptAgent =
        HeadlessChromium.prelude + #"""
            def session_id():
                return driver.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "fetch(document.getElementById('app').dataset.base + '/browser/session',"
                    "      { credentials: 'same-origin', cache: 'no-store' })"
                    "  .then((r) => r.json()).then((j) => done(j.sessionId || null), () => done(null));")

            def provider_step():
                # The provider's sign-in form when it asks for the password, else straight to its consent.
                wait.until(lambda d: d.find_elements(By.NAME, "username") or d.find_elements(By.NAME, "allow"))
                asked = bool(driver.find_elements(By.NAME, "username"))
                if asked:
                    driver.find_element(By.NAME, "username").send_keys("alice")
                    driver.find_element(By.NAME, "password").send_keys("alice-password")
                    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
                wait.until(ready.element_to_be_clickable((By.NAME, "allow"))).click()
                return asked

            def continue_and_return():
                wait.until(ready.element_to_be_clickable((By.ID, "continue")))
                account = driver.find_element(By.ID, "account").text
                driver.find_element(By.ID, "continue").click()
                link = wait.until(lambda d: d.find_element(By.ID, "return-link").get_attribute("href") or None)
                return account, link

            try:
                wait = WebDriverWait(driver, 30)
                driver.set_script_timeout(20)
                out = {}
                for key, url in zip(("first", "plain", "fresh"), sys.argv[1:4]):
                    if key != "first":
                        # The tab that went to the app's custom scheme keeps Chromium's external-protocol
                        # prompt, which takes its input; every tab shares the browser's cookies.
                        driver.switch_to.new_window("tab")
                    driver.get(url)
                    if key == "plain":
                        # Signed in from the first attempt, the page offers that session ("Continue"); its
                        # provider button, hidden, is pressed by script to see what the provider does.
                        wait.until(ready.element_to_be_clickable((By.ID, "continue")))
                        out[key + "ConfirmShown"] = True
                        driver.execute_script("document.getElementById('upstream-0').click()")
                    else:
                        button = wait.until(ready.element_to_be_clickable((By.ID, "upstream-0")))
                        out[key + "ConfirmShown"] = driver.find_element(By.ID, "confirm").is_displayed()
                        button.click()
                    wait.until(lambda d: not d.current_url.startswith(url.split("?")[0]))
                    out[key + "ProviderUrl"] = driver.current_url
                    out[key + "AskedPassword"] = provider_step()
                    out[key + "Account"], out[key] = continue_and_return()
                    out[key + "Session"] = session_id()
                print(json.dumps(out), flush=True)
            except Exception as error:
                print("chromium: %s at %s: %s" % (type(error).__name__, driver.current_url.split("?")[0],
                      driver.find_element(By.TAG_NAME, "body").text[:300]), file=sys.stderr)
                sys.exit(1)
            finally:
                driver.quit()
            """#

    /// Prints the button's text, the account the page shows after the round
    /// trip, and the return URL the page offers after Continue.
    static let agent =
        HeadlessChromium.prelude + #"""
            try:
                wait = WebDriverWait(driver, 30)
                driver.get(sys.argv[1])
                button = wait.until(ready.element_to_be_clickable((By.ID, "upstream-0")))
                print(button.text, flush=True)
                button.click()
                # The provider's own pages: its sign-in form, then its consent form.
                wait.until(ready.visibility_of_element_located((By.NAME, "username"))).send_keys("alice")
                driver.find_element(By.NAME, "password").send_keys("alice-password")
                driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
                wait.until(ready.element_to_be_clickable((By.NAME, "allow"))).click()
                # Back on the hosted page, signed in.
                wait.until(ready.element_to_be_clickable((By.ID, "continue")))
                print(driver.find_element(By.ID, "account").text, flush=True)
                driver.find_element(By.ID, "continue").click()
                link = wait.until(lambda d: d.find_element(By.ID, "return-link").get_attribute("href") or None)
                print(link, flush=True)
            except Exception as error:
                print("chromium: %s at %s: %s" % (type(error).__name__, driver.current_url.split("?")[0],
                      driver.find_element(By.TAG_NAME, "body").text[:300]), file=sys.stderr)
                sys.exit(1)
            finally:
                driver.quit()
            """#
}
