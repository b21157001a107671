import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The hosted page shows the sign-in methods `GET browser/config` lists and
/// nothing else: its own script in Node (a minimal DOM), and in headless
/// Chromium (Selenium) where it is installed.
@Suite(.dedicatedThread) struct SignInMethodsPageTests {
    static let node = "/usr/bin/node"

    /// A server with email sign-in on or off and the provider `corp`, which nothing answers for.
    static func server(email: Bool, provider: Bool) throws -> TestServer {
        try TestServer.onAFreePort { c, port in
            c.emailSignInEnabled = email
            if provider { c.upstreamProviders = [try! SignInMethodsTests.unreachableProvider(port: port)] }
        }
    }

    /// What the page shows once it is ready to sign in.
    func nodeView(_ server: TestServer) throws -> [String: Any] {
        let attempt = try NativeAttempt.create(server)
        let script = server.directory.path + "/view-page.js"
        try Data(Self.nodeDriver.utf8).write(to: URL(fileURLWithPath: script))
        let run = try runProgram(Self.node, [script, attempt.created.authorizeUrl])
        #expect(run.status == 0, "\(run.err)")
        return (try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any]) ?? [:]
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func thePageShowsOnlyTheConfiguredMethods() throws {
        let email = try nodeView(try Self.server(email: true, provider: false))
        #expect(email["signin"] as? Bool == true)
        #expect(email["emailForm"] as? Bool == true)
        #expect(email["upstream"] as? Bool == nil)
        #expect(email["status"] as? String == "Sign in to continue to Notes.")

        let both = try nodeView(try Self.server(email: true, provider: true))
        #expect(both["emailForm"] as? Bool == true && both["upstream"] as? Bool == true)
        #expect(both["or"] as? Bool == true && both["button"] as? Bool == true && both["disabled"] as? Bool == false)

        let upstreamOnly = try nodeView(try Self.server(email: false, provider: true))
        #expect(upstreamOnly["emailForm"] as? Bool == false)
        #expect(upstreamOnly["upstream"] as? Bool == true && upstreamOnly["button"] as? Bool == true)
        #expect(upstreamOnly["or"] as? Bool == false)
        #expect(upstreamOnly["status"] as? String == "Sign in to continue to Notes.")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func aProviderThatCannotBeReachedIsShownDisabled() throws {
        let server = try Self.server(email: false, provider: true)
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        #expect(try browser.post("/browser/upstream/start", ["provider": "corp", "attemptId": attempt.id]).status == 502)
        let view = try nodeView(server)
        #expect(view["button"] as? Bool == true && view["disabled"] as? Bool == true)
        #expect(view["status"] as? String == "No way to sign in is available right now. Try again later.")
    }

    /// Loads the page, runs its script, waits until it offers sign-in and
    /// prints what is shown. usage: node view-page.js AUTHORIZE_URL
    static let nodeDriver = #"""
        "use strict";
        const [authorizeUrl] = process.argv.slice(2);
        const jar = new Map();
        const pageAddress = authorizeUrl;
        \#(PageDriver.prelude)

        (async () => {
          const html = await (await browserFetch(authorizeUrl)).text();
          for (const match of html.matchAll(/<[^>]* id="([^"]+)"[^>]*>/g)) {
            const element = makeElement(match[1]);
            element.hidden = /\shidden[\s>]/.test(match[0]);
            const provider = /data-provider="([^"]+)"/.exec(match[0]);
            if (provider) element.dataset.provider = provider[1];
            elements[match[1]] = element;
          }
          elements.app.dataset.base = /data-base="([^"]+)"/.exec(html)[1];
          const script = await (await browserFetch(/<script src="([^"]+)"/.exec(html)[1])).text();
          const window = { location: { search: new URL(authorizeUrl).search, assign() {} }, addEventListener() {} };
          const document = { getElementById: (id) => elements[id] };
          new Function("window", "document", "fetch", "URLSearchParams", script)(window, document, browserFetch, URLSearchParams);
          await until(() => !elements.signin.hidden, "the sign-in section");
          const shown = (id) => (elements[id] ? !elements[id].hidden : undefined);
          console.log(JSON.stringify({
            signin: shown("signin"), emailForm: shown("email-form"), upstream: shown("upstream"),
            or: shown("upstream-or"), button: shown("upstream-0"),
            disabled: elements["upstream-0"] ? elements["upstream-0"].disabled === true : undefined,
            status: elements.status.textContent
          }));
        })().catch((error) => { console.error(String(error)); process.exit(1); });
        """#
}

/// The same in headless Chromium (Debian's chromium and chromium-driver,
/// Selenium; `scripts/install-deps --browser`): the page's script, style
/// and CSP as a browser applies them.
@Suite(.dedicatedThread, .enabled(if: HeadlessChromium.isReady)) struct SignInMethodsChromiumTests {
    @Test func chromiumShowsOnlyTheConfiguredMethods() throws {
        let email = try ChromiumPage.view(try SignInMethodsPageTests.server(email: true, provider: false))
        #expect(email["emailForm"] as? Bool == true && email["upstream"] as? Bool == false, "\(email)")

        let server = try SignInMethodsPageTests.server(email: false, provider: true)
        let upstream = try ChromiumPage.view(server, click: true)
        #expect(upstream["emailForm"] as? Bool == false, "\(upstream)")
        #expect(upstream["upstream"] as? Bool == true && upstream["or"] as? Bool == false, "\(upstream)")
        #expect(upstream["button"] as? String == "Sign in with corp" && upstream["enabled"] as? Bool == true, "\(upstream)")
        // The press found the provider unreachable; after a reload the page offers the button disabled.
        #expect((upstream["afterClick"] as? String)?.contains("could not be reached") == true, "\(upstream)")
        #expect(upstream["enabledAfterReload"] as? Bool == false, "\(upstream)")
    }
}

enum ChromiumPage {
    /// Opens a new attempt's page in Chromium; with `click`, presses the first provider's button and reloads.
    static func view(_ server: TestServer, click: Bool = false) throws -> [String: Any] {
        let attempt = try NativeAttempt.create(server)
        let run = try HeadlessChromium.run(
            agent, [attempt.created.authorizeUrl, click ? "click" : "look"], in: server.directory.path)
        #expect(run.status == 0, "\(run.err)")
        return (try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any]) ?? [:]
    }

    static let agent =
        HeadlessChromium.prelude + #"""
            def shown(element_id):
                found = driver.find_elements(By.ID, element_id)
                return bool(found) and found[0].is_displayed()

            try:
                wait = WebDriverWait(driver, 30)
                driver.get(sys.argv[1])
                wait.until(ready.visibility_of_element_located((By.ID, "signin")))
                result = {"emailForm": shown("email-form"), "upstream": shown("upstream"), "or": shown("upstream-or")}
                buttons = driver.find_elements(By.ID, "upstream-0")
                if buttons and buttons[0].is_displayed():
                    result["button"] = buttons[0].text
                    result["enabled"] = buttons[0].is_enabled()
                if sys.argv[2] == "click":
                    before = driver.find_element(By.ID, "status").text
                    buttons[0].click()
                    wait.until(lambda d: d.find_element(By.ID, "status").text not in (before, ""))
                    result["afterClick"] = driver.find_element(By.ID, "status").text
                    driver.refresh()
                    wait.until(ready.visibility_of_element_located((By.ID, "upstream-0")))
                    result["enabledAfterReload"] = driver.find_element(By.ID, "upstream-0").is_enabled()
                print(json.dumps(result))
            except Exception as error:
                print("chromium: %s: %s" % (type(error).__name__, driver.find_element(By.TAG_NAME, "body").text[:300]),
                      file=sys.stderr)
                sys.exit(1)
            finally:
                driver.quit()
            """#
}
