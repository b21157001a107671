import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The hosted page's own script and the sign-in link, run in Node with a
/// minimal DOM against the real server binary. A browser is a cookie jar
/// kept in a file, so the page where sign-in started and the link opened
/// later are the same browser (or, with another jar, not).
@Suite(.dedicatedThread, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/node")))
struct HostedPageLinkTests {
    static let email = "dora@example.org"

    func run(_ mode: String, _ url: String, jar: String, in server: BinaryServer) throws -> [String: Any] {
        let script = server.directory.path + "/link-page.js"
        try Data(Self.driver.utf8).write(to: URL(fileURLWithPath: script))
        let run = try runProgram("/usr/bin/node", [script, mode, url, Self.email, jar])
        #expect(run.status == 0, "\(run.err)")
        return (try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any]) ?? [:]
    }

    @Test func theLinkOpenedInTheSameBrowserSignsInAndContinuesTheAttempt() throws {
        let server = try BinaryServer(["emailRedirectUris": ["{origin}"]])
        let attempt = try server.attempt()
        let jar = server.directory.path + "/browser-a.json"
        let asked = try run("request", attempt.created.authorizeUrl, jar: jar, in: server)
        #expect(
            asked["status"] as? String
                == "We sent a code and a sign-in link to \(Self.email). Type the code here, or open the link in this browser.")
        let message = try #require(server.mail(to: Self.email).last)
        let link = try #require(SignInEmail.link(in: message.body))
        #expect(link.hasPrefix(attempt.created.authorizeUrl + "#signin_token="))

        let opened = try run("open", link, jar: jar, in: server)
        #expect(opened["address"] as? String == attempt.created.authorizeUrl, "the token left the address bar")
        let callback = try #require(opened["callbackUrl"] as? String, "\(opened)")
        let issued = try server.exchange(attempt, callback: callback)
        #expect(issued.session.authMethod == "email" && issued.session.account.email == Self.email)
        // The code of the same email no longer works.
        let code = try #require(SignInEmail.code(in: message.body))
        expectRefusal(try server.browser().verify(Self.email, code: code), .otpExpired)
        server.expectLogHasNone(of: [code, link])
    }

    @Test func theLinkOpenedInAnotherBrowserSendsTheUserBackToTypeTheCode() throws {
        let server = try BinaryServer(["emailRedirectUris": ["{origin}"]])
        let attempt = try server.attempt()
        _ = try run("request", attempt.created.authorizeUrl, jar: server.directory.path + "/browser-a.json", in: server)
        let message = try #require(server.mail(to: Self.email).last)
        let link = try #require(SignInEmail.link(in: message.body))

        let elsewhere = try run("open", link, jar: server.directory.path + "/browser-b.json", in: server)
        #expect(elsewhere["callbackUrl"] is NSNull)
        let status = try #require(elsewhere["status"] as? String)
        #expect(status.contains("opened in a different browser") && status.contains("type the 6-digit code"), "\(status)")
        #expect(!status.lowercased().contains("try again"))
        #expect(elsewhere["signinShown"] as? Bool == false)
        #expect(elsewhere["confirmShown"] as? Bool == false)
        #expect(elsewhere["cancelShown"] as? Bool == false)
        #expect(try attempt.statusAt(server).state == .pending)
        // The email is still good where sign-in started: its code works.
        let code = try #require(SignInEmail.code(in: message.body))
        #expect(try server.browser().verify(Self.email, code: code).status == 200)
    }

    static let driver = #"""
        // Runs the hosted page's script (login.js, from the server) in Node with a
        // minimal DOM. One browser = one cookie jar file.
        // usage: node link-page.js request AUTHORIZE_URL EMAIL JAR   (loads the page, asks for the email)
        //        node link-page.js open LINK EMAIL JAR               (opens the email's link)
        "use strict";
        const fs = require("fs");
        const [mode, address, email, jarFile] = process.argv.slice(2);
        const url = new URL(address);
        const jar = new Map(fs.existsSync(jarFile) ? JSON.parse(fs.readFileSync(jarFile, "utf8")) : []);

        const pageAddress = address;
        \#(PageDriver.prelude)

        (async () => {
          let navigatedTo = null;
          // A browser never sends the fragment.
          const page = await browserFetch(url.origin + url.pathname + url.search);
          const html = await page.text();
          for (const match of html.matchAll(/ id="([^"]+)"/g)) elements[match[1]] = makeElement(match[1]);
          for (const match of html.matchAll(/<[^>]* id="([^"]+)"[^>]*>/g)) {
            if (/\shidden[\s>]/.test(match[0])) elements[match[1]].hidden = true;
          }
          elements.app.dataset.base = /data-base="([^"]+)"/.exec(html)[1];
          const script = await (await browserFetch(/<script src="([^"]+)"/.exec(html)[1])).text();
          const location = {
            origin: url.origin, pathname: url.pathname, search: url.search, hash: url.hash,
            assign(target) { navigatedTo = target; }
          };
          const history = {
            replaceState(state, title, target) {
              const next = new URL(target, url);
              location.pathname = next.pathname; location.search = next.search; location.hash = next.hash;
            }
          };
          const window = { location, history, addEventListener() {} };
          const document = { getElementById: (id) => elements[id] };
          new Function("window", "document", "fetch", "URLSearchParams", script)(window, document, browserFetch, URLSearchParams);

          if (mode === "request") {
            await until(() => !elements.cancel.hidden, "the attempt to be described");
            await until(() => !elements.signin.hidden, "the sign-in form");
            elements.email.value = email;
            await elements["email-form"].fire("submit");
            await until(() => !elements["code-form"].hidden, "the code form");
          } else {
            // Settled: navigating, asking to Continue, or a message that is not a step on the way.
            const settled = () => {
              const status = elements.status.textContent;
              return navigatedTo !== null || !elements.confirm.hidden ||
                (status !== "" && status !== "Loading…" && !status.startsWith("Signing you in"));
            };
            await until(settled, "the link to be used");
            if (!elements.confirm.hidden) {
              await elements.continue.fire("click");
              await until(() => navigatedTo !== null, "navigation");
            }
          }
          fs.writeFileSync(jarFile, JSON.stringify([...jar]));
          console.log(JSON.stringify({
            callbackUrl: navigatedTo, status: elements.status.textContent,
            address: location.origin + location.pathname + location.search + location.hash,
            confirmShown: !elements.confirm.hidden, cancelShown: !elements.cancel.hidden,
            signinShown: !elements.signin.hidden
          }));
        })().catch((error) => { console.error(String(error)); process.exit(1); });
        """#
}

extension NativeAttempt {
    /// `POST native/attempts/{id}/status` on the binary server.
    func statusAt(_ server: BinaryServer) throws -> StatusResponse {
        try RawHTTP.postJSON(server.base + "/native/attempts/\(id)/status", recoveryJSON).decode(StatusResponse.self)
    }
}
