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
