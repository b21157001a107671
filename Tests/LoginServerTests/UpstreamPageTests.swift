import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The hosted page's "Sign in with NAME" button, driven by the page's own
/// script in Node against an in-process server whose upstream provider is
/// the test provider (Tests/Provider/README.md); and the round trip's expiry
/// on the server's manual clock.
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct UpstreamPageTests {
    static let node = "/usr/bin/node"

    /// An in-process server with the provider `dot` (client `login-server`).
    static func server(_ provider: TestProvider) throws -> TestServer {
        try TestServer.onAFreePort { c, port in
            c.upstreamProviders = [
                UpstreamProviderConfiguration(
                    name: "dot", issuer: provider.issuer, clientId: "login-server", clientSecret: "login-server-secret",
                    redirectUris: ["http://127.0.0.1:\(port)/browser-login/browser/upstream/callback/dot"])
            ]
        }
    }

    /// Press the button, sign in at the provider, come back to the page
    /// signed in, press Continue: the native attempt is approved and its
    /// session says `authMethod: "dot"`.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: node)))
    func theButtonSignsInThroughTheProviderAndTheAttemptContinues() throws {
        let directory = try TemporaryDirectory()
        let provider = try TestProvider.start(in: directory.path + "/provider")
        defer { provider.stop() }
        let server = try Self.server(provider)
        let attempt = try NativeAttempt.create(server)
        let script = server.directory.path + "/drive-upstream.js"
        try Data(Self.driver.utf8).write(to: URL(fileURLWithPath: script))
        let run = try runProgram(
            Self.node, [script, attempt.created.authorizeUrl, repositoryRoot + "/scripts/provider"], timeout: 120)
        #expect(run.status == 0, "\(run.err)")
        let result = (try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any]) ?? [:]
        #expect(result["button"] as? String == "Sign in with dot")
        #expect((result["providerUrl"] as? String)?.hasPrefix(provider.issuer + "/authorize/?") == true, "\(result)")
        #expect(result["landed"] as? Int == 303)
        // Back to the page, with the session just started named in the fragment (prompt "login" offers only that one).
        #expect((result["location"] as? String)?.hasPrefix(attempt.created.authorizeUrl + "#signed_in=") == true)
        #expect(result["account"] as? String == "alice@example.com")
        let callback = try #require(result["callbackUrl"] as? String)
        let answer = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
        #expect(answer.status == 200, "\(answer.text)")
        let issued = try answer.decode(ExchangeResponse.self)
        #expect(issued.session.authMethod == "dot")
        #expect(issued.session.account.email == "alice@example.com")
        #expect(issued.session.account.displayName == "Alice Example")
    }

    /// A round trip lives 10 minutes: a redirect after that is refused and
    /// signs no one in.
    @Test func aRoundTripExpiresAfterTenMinutes() throws {
        let directory = try TemporaryDirectory()
        let provider = try TestProvider.start(in: directory.path + "/provider")
        defer { provider.stop() }
        let server = try Self.server(provider)
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let body = try JSONSerialization.data(withJSONObject: ["provider": "dot", "attemptId": attempt.id])
        let started = try browser.request(
            "POST", server.base + "/browser/upstream/start", headers: [("Content-Type", "application/json")],
            body: [UInt8](body))
        #expect(started.status == 200, "\(started.text)")
        let url = try #require(
            (try JSONSerialization.jsonObject(with: Data(started.body)) as? [String: Any])?["authorizeUrl"] as? String)
        let redirect = try provider.authorize(url)
        server.time.advance(600_001)
        let late = try browser.request("GET", redirect, stateChanging: false)
        #expect(late.status == 400)
        #expect(late.text.contains("UPSTREAM_SIGNIN_UNKNOWN"), "\(late.text)")
        #expect(try browser.currentSession() == nil)
    }

    /// Runs the hosted page's own script (login.js from the server) in Node
    /// with a minimal DOM and a cookie jar, as a browser would: presses
    /// "Sign in with dot", lets the provider's scripted browser sign alice in
    /// (`scripts/provider browser authorize`), follows the redirect back with
    /// the jar, loads the page it lands on again and presses Continue.
    /// Prints one JSON line.
    /// usage: node drive-upstream.js AUTHORIZE_URL PROVIDER_SCRIPT
    static let driver = #"""
        "use strict";
        const { execFileSync } = require("child_process");
        const [authorizeUrl, providerScript] = process.argv.slice(2);
        const jar = new Map();

        const pageAddress = authorizeUrl;
        \#(PageDriver.prelude)

        // One page load: its elements, its script running, and where it navigated.
        async function openPage(url) {
          const page = { elements: {}, navigatedTo: null };
          const html = await (await browserFetch(url)).text();
          for (const match of html.matchAll(/<[^>]* id="([^"]+)"[^>]*>/g)) {
            const listeners = {};
            const dataset = {};
            const provider = /data-provider="([^"]+)"/.exec(match[0]);
            if (provider) dataset.provider = provider[1];
            page.elements[match[1]] = {
              id: match[1], hidden: /\shidden[\s>]/.test(match[0]), textContent: "", value: "", href: "", dataset,
              addEventListener(type, fn) { (listeners[type] = listeners[type] || []).push(fn); },
              async fire(type) { for (const fn of listeners[type] || []) await fn({ preventDefault() {}, persisted: false }); },
              focus() {}
            };
          }
          const button = /<button id="upstream-0"[^>]*>([^<]*)</.exec(html);
          page.buttonText = button ? button[1] : null;
          page.elements.app.dataset.base = /data-base="([^"]+)"/.exec(html)[1];
          const script = await (await browserFetch(/<script src="([^"]+)"/.exec(html)[1])).text();
          const window = {
            location: { search: new URL(url).search, assign(target) { page.navigatedTo = target; } },
            addEventListener() {}
          };
          const document = { getElementById: (id) => page.elements[id] };
          new Function("window", "document", "fetch", "URLSearchParams", script)(window, document, browserFetch, URLSearchParams);
          page.until = async (predicate, what) => {
            for (let i = 0; i < 300; i++) { if (predicate()) return; await sleep(10); }
            throw new Error("timed out waiting for " + what + "; status: " + page.elements.status.textContent);
          };
          return page;
        }

        (async () => {
          const first = await openPage(authorizeUrl);
          await first.until(() => !first.elements.signin.hidden, "the sign-in section");
          await first.elements["upstream-0"].fire("click");
          await first.until(() => first.navigatedTo !== null, "the navigation to the provider");
          const redirect = execFileSync(providerScript, ["browser", "authorize", first.navigatedTo, "--user", "alice"],
                                        { encoding: "utf8" }).trim();
          const landed = await browserFetch(redirect, { site: "cross-site" });
          const location = landed.headers.get("location");
          const second = await openPage(location);
          await second.until(() => !second.elements.confirm.hidden, "the confirmation");
          const account = second.elements.account.textContent;
          await second.elements.continue.fire("click");
          await second.until(() => second.navigatedTo !== null, "the navigation to the app");
          console.log(JSON.stringify({
            button: first.buttonText, providerUrl: first.navigatedTo, landed: landed.status, location,
            account, callbackUrl: second.navigatedTo
          }));
        })().catch((error) => { console.error(String(error)); process.exit(1); });
        """#
}
