import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The hosted page's own script, run in Node with a minimal DOM against the
/// live server: the page is driven as a browser would drive it.
@Suite(.dedicatedThread) struct HostedPageScriptTests {
    static let node = "/usr/bin/node"

    func drive(_ authorizeURL: String, email: String, code: String, action: String, in directory: String) throws
        -> [String: Any]
    {
        let script = directory + "/drive-page.js"
        try Data(Self.driver.utf8).write(to: URL(fileURLWithPath: script))
        let run = try runProgram(Self.node, [script, authorizeURL, email, code, action])
        let data = Data(run.out.utf8)
        let errors = run.err
        #expect(run.status == 0, "\(errors)")
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func thePageSignsInAuthorizesAndNavigates() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        let result = try drive(
            attempt.created.authorizeUrl, email: "dev+bltestpage@example.com", code: "000000", action: "continue",
            in: server.directory.path)
        let callback = try #require(result["callbackUrl"] as? String)
        #expect(result["link"] as? String == callback)
        #expect(result["linkShown"] as? Bool == true)
        #expect(result["appName"] as? String == "Notes")
        let code = try code(of: callback, attempt: attempt, issuer: server.origin)
        let issued = try attempt.exchange(server, code: code).decode(ExchangeResponse.self)
        #expect(issued.session.account.email == "dev+bltestpage@example.com")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func thePageGoesStraightOnForAutomaticAndCancels() throws {
        let server = try TestServer()
        let web = try NativeAttempt.create(server, client: httpsClient, returnUrl: httpsReturn)
        let automatic = try drive(
            web.created.authorizeUrl, email: testBase, code: "000000", action: "continue", in: server.directory.path)
        #expect((automatic["callbackUrl"] as? String)?.hasPrefix(httpsReturn + "?code=") == true)
        let other = try NativeAttempt.create(server)
        let cancelled = try drive(
            other.created.authorizeUrl, email: testBase, code: "000000", action: "cancel", in: server.directory.path)
        let callback = try Callback(parsing: try #require(cancelled["callbackUrl"] as? String))
        #expect(callback.outcome == .error("access_denied"))
        #expect(try other.status(server).decode(StatusResponse.self).state == .cancelled)
    }

    /// §6: a leaked attempt id opened in another browser can sign in there but
    /// not authorize; the page says to finish in the browser where sign-in
    /// started, not to try again.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func thePageSendsAnotherBrowserBackToTheOneWhereSignInStarted() throws {
        let server = try TestServer()
        let attempt = try NativeAttempt.create(server)
        // The app's browser opens the page first and holds the binding cookie.
        #expect(try server.get(attempt.created.authorizeUrl).headers("set-cookie").count == 1)
        let result = try drive(
            attempt.created.authorizeUrl, email: testBase, code: "000000", action: "continue-refused",
            in: server.directory.path)
        #expect(result["callbackUrl"] is NSNull)
        let status = try #require(result["status"] as? String)
        #expect(status == Self.browserMismatchMessage)
        #expect(status.contains("in the browser where you started"))
        #expect(!status.lowercased().contains("try again") && !status.lowercased().contains("start again"))
        #expect(result["confirmShown"] as? Bool == false)
        #expect(result["cancelShown"] as? Bool == false)
        #expect(result["signinShown"] as? Bool == false)
        #expect(try attempt.status(server).decode(StatusResponse.self).state == .pending)
    }

    static let browserMismatchMessage =
        "This sign-in was started in another browser. Finish signing in in the browser where you started it "
        + "(the one your app opened); nothing here can continue it."

    static let driver = #"""
        // Runs the hosted page's own script (login.js, fetched from the server) in
        // Node with a minimal DOM, as a browser would: same-origin fetch with a
        // cookie jar, Origin and Sec-Fetch-Site, form submits and clicks. Prints one
        // JSON line: the callback URL the page navigated to and the manual link.
        // usage: node drive-page.js AUTHORIZE_URL EMAIL CODE [continue|continue-refused|cancel]
        "use strict";
        const [authorizeUrl, email, code, action = "continue"] = process.argv.slice(2);
        const jar = new Map();

        const pageAddress = authorizeUrl;
        \#(PageDriver.prelude)

        let navigatedTo = null;

        (async () => {
          const page = await browserFetch(authorizeUrl);
          const html = await page.text();
          for (const match of html.matchAll(/ id="([^"]+)"/g)) elements[match[1]] = makeElement(match[1]);
          for (const match of html.matchAll(/<[^>]* id="([^"]+)"[^>]*>/g)) {
            if (/\shidden[\s>]/.test(match[0])) elements[match[1]].hidden = true;
          }
          elements.app.dataset.base = /data-base="([^"]+)"/.exec(html)[1];
          const scriptPath = /<script src="([^"]+)"/.exec(html)[1];
          const script = await (await browserFetch(scriptPath)).text();
          const window = {
            location: { search: new URL(authorizeUrl).search, assign(url) { navigatedTo = url; } },
            addEventListener() {}
          };
          const document = { getElementById: (id) => elements[id] };
          new Function("window", "document", "fetch", "URLSearchParams", script)(window, document, browserFetch, URLSearchParams);

          await until(() => !elements.cancel.hidden, "the attempt to be described");
          if (action === "cancel") {
            await elements.cancel.fire("click");
          } else {
            await until(() => !elements.signin.hidden || !elements.confirm.hidden, "sign-in or confirm");
            if (!elements.signin.hidden) {
              elements.email.value = email;
              await elements["email-form"].fire("submit");
              await until(() => !elements["code-form"].hidden, "the code form");
              elements.code.value = code;
              await elements["code-form"].fire("submit");
            }
            await until(() => !elements.confirm.hidden || navigatedTo !== null, "confirm");
            if (navigatedTo === null) {
              if (elements.account.textContent !== email) throw new Error("the page shows another account");
              await elements.continue.fire("click");
            }
          }
          // "continue-refused": the page answers an error instead of navigating.
          if (action !== "continue-refused") await until(() => navigatedTo !== null, "navigation");
          console.log(JSON.stringify({
            callbackUrl: navigatedTo, link: elements["return-link"].href, linkShown: !elements.return.hidden,
            appName: elements["app-name"].textContent, status: elements.status.textContent,
            confirmShown: !elements.confirm.hidden, cancelShown: !elements.cancel.hidden,
            signinShown: !elements.signin.hidden
          }));
        })().catch((error) => { console.error(String(error)); process.exit(1); });
        """#
}
