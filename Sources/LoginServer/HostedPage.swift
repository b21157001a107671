/// The hosted page (docs/protocol.md §6): one HTML document, one script and one
/// style sheet, all served by this server; no external assets, no inline
/// script or style, so the Content-Security-Policy can forbid both.
enum HostedPage {
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        + "frame-ancestors 'none'; form-action 'none'; base-uri 'none'"

    static let securityHeaders: [(name: String, value: String)] = [
        ("Content-Security-Policy", contentSecurityPolicy), ("X-Frame-Options", "DENY"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
    ]

    static func page(
        basePath: String, extraHeaders: [(name: String, value: String)], upstreamProviders: [String] = [],
        passkeys: Bool = false
    ) -> HTTPServerResponse {
        let base = escapeHTML(basePath)
        let upstreamButtons = upstreamButtonsHTML(upstreamProviders)
        let html = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="no-referrer">
            <title>Sign in</title>
            <link rel="stylesheet" href="\(base)/browser/login.css">
            </head>
            <body>
            <main id="app" data-base="\(base)"\(passkeys ? " data-passkeys=\"on\"" : "")>
            <h1 id="title">Sign in</h1>
            <p id="status" role="status">Loading…</p>
            <section id="signin" hidden>
            <form id="email-form" hidden>
            <label for="email">Email address</label>
            <input id="email" name="email" type="email" autocomplete="email" required>
            <div id="invite-field" hidden>
            <label for="invite">Invitation code</label>
            <input id="invite" name="invite" autocomplete="off">
            </div>
            <button type="submit">Send me a code</button>
            </form>
            <form id="code-form" hidden>
            <label for="code">The 6-digit code from the email</label>
            <input id="code" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required>
            <button type="submit">Sign in</button>
            </form>
            \(upstreamButtons)</section>
            <section id="confirm" hidden>
            <p>Continue to <strong id="app-name"></strong> as <strong id="account"></strong>?</p>
            <button id="continue" type="button">Continue</button>
            <button id="switch" type="button" class="secondary">Use another account</button>
            </section>
            <p><button id="cancel" type="button" class="secondary" hidden>Cancel</button></p>
            <p id="return" hidden><a id="return-link" href="">Return to the app</a></p>
            <noscript><p>This page needs JavaScript to sign you in.</p></noscript>
            </main>
            <script src="\(base)/browser/login.js"></script>
            <script src="\(base)/browser/passkeys/page.js"></script>
            </body>
            </html>

            """
        return HTTPServerResponse(
            status: 200,
            headers: [("Content-Type", "text/html; charset=utf-8")] + securityHeaders + extraHeaders,
            body: Array(html.utf8))
    }

    static func asset(_ text: String, type: String) -> HTTPServerResponse {
        HTTPServerResponse(status: 200, headers: [("Content-Type", type)] + securityHeaders, body: Array(text.utf8))
    }

    static func escapeHTML(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }

    static let style = """
        body { font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d1f23; }
        main { max-width: 26rem; margin: 4rem auto; background: #fff; padding: 2rem; border-radius: 0.75rem;
               box-shadow: 0 1px 4px rgba(0, 0, 0, 0.12); }
        h1 { font-size: 1.4rem; margin-top: 0; }
        label { display: block; margin: 0.75rem 0 0.25rem; }
        input { width: 100%; box-sizing: border-box; padding: 0.5rem; font-size: 1rem; }
        button { margin-top: 0.75rem; padding: 0.5rem 1rem; font-size: 1rem; border-radius: 0.4rem;
                 border: 1px solid #2456c7; background: #2456c7; color: #fff; cursor: pointer; }
        button.secondary { background: #fff; color: #2456c7; }
        [hidden] { display: none !important; }
        p.or { margin: 1rem 0 0; color: #5c6170; text-align: center; }
        button.upstream { display: block; width: 100%; }
        p.code { color: #5c6170; font-size: 0.9rem; }

        """

    /// The page's script. It keeps the callback URL only in memory (a
    /// variable and the manual link), never in storage, the URL or the history.
    static let script = #"""
        "use strict";
        (function () {
          const $ = (id) => document.getElementById(id);
          const base = $("app").dataset.base;
          const attemptId = new URLSearchParams(window.location.search).get("attempt");
          // An invitation token (sign-up mode "invite"), sent with the code; kept only in memory.
          const inviteFromLink = new URLSearchParams(window.location.search).get("invite");
          let newUser = false;
          let attempt = null;
          // GET browser/config: the sign-in methods the server offers; the page shows those only.
          let config = null;
          let shownSessionId = null;
          let automaticSessionId = null;
          let leaving = false;
          // prompt "login" (docs/protocol.md §5.1): the browser session this page itself signed in (the only
          // one it may offer); a session that was here before is never offered, nor approved automatically.
          let freshSessionId = null;
          // After a sign-in with an upstream provider, the server names the session it started in the fragment.
          const upstreamSessionId = new URLSearchParams((window.location.hash || "").slice(1)).get("signed_in");

          const stateMessages = {
            completed: "This sign-in is already complete. You can close this page.",
            cancelled: "This sign-in was cancelled. Start again from the app.",
            expired: "This sign-in link has expired. Start again from the app."
          };
          const errorMessages = {
            ATTEMPT_UNKNOWN: "This sign-in link is not valid. Start again from the app.",
            ATTEMPT_EXPIRED: stateMessages.expired,
            ATTEMPT_CANCELLED: stateMessages.cancelled,
            ATTEMPT_ALREADY_EXCHANGED: stateMessages.completed,
            BROWSER_MISMATCH: "This sign-in was started in another browser. Finish signing in in the browser where " +
              "you started it (the one your app opened); nothing here can continue it.",
            ORIGIN_MISMATCH: "This page could not prove where the request came from. Reload the page.",
            AUTH_USER_DISABLED: "This account is disabled. Ask an administrator to enable it.",
            INVITATION_REQUIRED: "New accounts need an invitation. Enter the invitation code an administrator gave " +
              "you, then ask for a new sign-in code.",
            INVITATION_INVALID: "This invitation is not valid: it was used, has expired, was revoked or is for " +
              "another address. Ask an administrator for a new one.",
            WAITLISTED: "You are on the waitlist. An administrator will let you in; sign in again once they have.",
            DOMAIN_NOT_ALLOWED: "Addresses at this domain cannot sign up here. Use your organisation's email address.",
            OTP_INVALID: "That code is not right. Try again.",
            OTP_EXPIRED: "That code has expired. Ask for a new one.",
            OTP_MAX_ATTEMPTS: "Too many wrong codes. Ask for a new email.",
            RATE_LIMITED: "Too many tries. Wait a moment and try again.",
            INVALID_REQUEST: "Enter a valid email address.",
            INVALID_REDIRECT_URI: "This server may not send sign-in emails for this page. Ask its administrator to " +
              "add the page's origin to emailRedirectUris.",
            EMAIL_SIGNIN_DISABLED: "This server does not sign people in by email. Use another way offered here."
          };
          // The sign-in link of the email (docs/protocol.md, the hosted page): its token is in the fragment.
          const linkMessages = {
            BROWSER_MISMATCH: "This sign-in link was opened in a different browser from the one where you started. " +
              "Go back to the sign-in page where you asked for the email and type the 6-digit code from the same " +
              "email there; this browser cannot continue that sign-in.",
            OTP_EXPIRED: "This sign-in link was already used or has expired. Ask for a new email.",
            OTP_INVALID: "This sign-in link is damaged. Type the code from the email instead.",
            OTP_MAX_ATTEMPTS: "Too many wrong codes or links. Ask for a new email."
          };

          function show(id, visible) { $(id).hidden = !visible; }
          function say(text) { $("status").textContent = text; }
          function codeOf(answer) {
            return answer.data && answer.data.error ? answer.data.error.code : "HTTP_" + answer.status;
          }
          function sayError(answer) {
            say(errorMessages[codeOf(answer)] || "Something went wrong. Try again.");
          }

          async function call(method, path, body) {
            const init = { method: method, credentials: "same-origin", cache: "no-store", redirect: "error",
                           headers: {} };
            if (body !== undefined) {
              init.headers["Content-Type"] = "application/json";
              init.body = JSON.stringify(body);
            }
            try {
              const response = await fetch(base + path, init);
              let data = null;
              try { data = await response.json(); } catch (e) { data = null; }
              return { status: response.status, data: data };
            } catch (e) {
              return { status: 0, data: null };
            }
          }

          function leave(callbackUrl) {
            leaving = true;
            ["signin", "confirm", "cancel"].forEach((id) => show(id, false));
            $("return-link").href = callbackUrl;
            show("return", true);
            say("Returning to " + (attempt ? attempt.appName : "the app") + "…");
            window.location.assign(callbackUrl);
          }

          async function authorize(decision, sessionId) {
            const answer = await call("POST", "/browser/attempts/" + encodeURIComponent(attemptId) + "/authorize",
                                      { decision: decision, expectedSessionId: sessionId });
            if (answer.status === 200 && answer.data && answer.data.callbackUrl) {
              leave(answer.data.callbackUrl);
              return;
            }
            const code = codeOf(answer);
            if (code === "SESSION_CHANGED") {
              say("You signed in with another account in the meantime. Check the account and continue.");
              automaticSessionId = null;
              await withSession();
            } else if (code === "LOGIN_REQUIRED") {
              showSignIn();
            } else if (code === "BROWSER_MISMATCH") {
              // Nothing in this browser can continue (or cancel) the attempt.
              sayError(answer);
              ["signin", "confirm", "cancel"].forEach((id) => show(id, false));
            } else {
              sayError(answer);
              show("confirm", false);
            }
          }

          function freshSignInOnly() { return attempt !== null && attempt.prompt === "login"; }

          function showSignIn() {
            show("confirm", false);
            show("signin", true);
            show("email-form", config.emailSignInEnabled === true);
            show("code-form", false);
            const offered = config.emailSignInEnabled === true || config.passkeyEnabled === true
              || (config.upstreamProviders || []).some((p) => p.usable);
            say(!offered ? "No way to sign in is available right now. Try again later."
              : freshSignInOnly() ? "Sign in with the account you want to use with " + attempt.appName + "."
              : "Sign in to continue to " + attempt.appName + ".");
            if (window.blPasskeys) { window.blPasskeys.signInShown(); }
          }

          // The provider buttons the configuration lists, disabled while a provider cannot be reached.
          function applyConfig() {
            const listed = {};
            (config.upstreamProviders || []).forEach((provider) => { listed[provider.id] = provider; });
            let shown = 0;
            for (let i = 0; $("upstream-" + i); i++) {
              const provider = listed[$("upstream-" + i).dataset.provider];
              show("upstream-" + i, provider !== undefined);
              if (provider !== undefined) {
                $("upstream-" + i).disabled = provider.usable !== true;
                shown++;
              }
            }
            if ($("upstream")) {
              show("upstream", shown > 0);
              show("upstream-or", shown > 0 && config.emailSignInEnabled === true);
            }
          }

          async function withSession() {
            const answer = await call("GET", "/browser/session");
            if (answer.status !== 200) {
              if (codeOf(answer) === "LOGIN_REQUIRED") { showSignIn(); } else { sayError(answer); }
              return;
            }
            const session = answer.data;
            if (freshSignInOnly() && session.sessionId !== freshSessionId) {
              // prompt "login": the session already in this browser is not offered; a new sign-in replaces it.
              showSignIn();
              return;
            }
            show("signin", false);
            if (attempt.policy === "automatic") {
              // Captured once: a later session refresh never approves again.
              if (automaticSessionId === null) { automaticSessionId = session.sessionId; }
              say("Signing you in to " + attempt.appName + "…");
              await authorize("automatic", automaticSessionId);
              return;
            }
            shownSessionId = session.sessionId;
            $("account").textContent = session.account.email;
            show("confirm", true);
            say(newUser ? "Your account was created." : "");
            if (window.blPasskeys) { window.blPasskeys.sessionShown(session); }
          }
          // For the passkey script (passkeys/page.js, loaded after this one when the server offers passkeys).
          // `started`: the sign-in's answer (the new browser session).
          window.blPage = { call: call, signedIn: (started) => { newUser = false; signedInHere(started); return withSession(); } };
          function signedInHere(started) {
            if (started && typeof started.sessionId === "string") { freshSessionId = started.sessionId; }
          }

          $("email-form").addEventListener("submit", async (event) => {
            event.preventDefault();
            const email = $("email").value.trim();
            const page = window.location.origin + window.location.pathname + window.location.search;
            const answer = await call("POST", "/browser/signin/start", { email: email, redirectUri: page });
            if (answer.status !== 200) { sayError(answer); return; }
            show("code-form", true);
            say(answer.data && answer.data.linkSent
              ? "We sent a code and a sign-in link to " + email + ". Type the code here, or open the link in this browser."
              : "We sent a code to " + email + ".");
            $("code").focus();
          });

          $("code-form").addEventListener("submit", async (event) => {
            event.preventDefault();
            const invite = $("invite").value.trim();
            const answer = await call("POST", "/browser/signin/verify",
                                      { email: $("email").value.trim(), code: $("code").value.trim(),
                                        invite: invite === "" ? undefined : invite });
            if (answer.status !== 200) {
              sayError(answer);
              const code = codeOf(answer);
              if (code === "OTP_MAX_ATTEMPTS" || code === "OTP_EXPIRED") {
                show("code-form", false);
              } else if (code === "INVITATION_REQUIRED" || code === "INVITATION_INVALID") {
                // The code is used up: enter the invitation, then ask for a new code.
                show("code-form", false);
                show("invite-field", true);
                $("invite").focus();
              } else if (code === "DOMAIN_NOT_ALLOWED") {
                show("code-form", false);
              } else if (code === "AUTH_USER_DISABLED" || code === "WAITLISTED") {
                // Nothing on this page helps until an administrator acts: no retry.
                show("signin", false);
              }
              return;
            }
            newUser = answer.data && answer.data.isNewUser === true;
            signedInHere(answer.data);
            $("code").value = "";
            await withSession();
          });

          $("continue").addEventListener("click", () => authorize("continue", shownSessionId));

          $("switch").addEventListener("click", async () => {
            // prompt "login": the next sign-in replaces this session in the browser; nothing is signed out.
            if (!freshSignInOnly()) { await call("POST", "/browser/signout", {}); }
            freshSessionId = null;
            shownSessionId = null;
            automaticSessionId = null;
            showSignIn();
          });

          $("cancel").addEventListener("click", async () => {
            const answer = await call("POST", "/browser/attempts/" + encodeURIComponent(attemptId) + "/decline", {});
            if (answer.status === 200 && answer.data && answer.data.callbackUrl) {
              leave(answer.data.callbackUrl);
            } else {
              sayError(answer);
            }
          });

          async function start() {
            if (!attemptId) { say("This sign-in link is incomplete. Start again from the app."); return; }
            const answer = await call("GET", "/browser/attempts/" + encodeURIComponent(attemptId));
            if (answer.status !== 200) { sayError(answer); return; }
            attempt = answer.data;
            $("app-name").textContent = attempt.appName;
            $("title").textContent = "Sign in to " + attempt.appName;
            if (attempt.state !== "pending" && attempt.state !== "authorized") {
              say(stateMessages[attempt.state] || "This sign-in cannot continue.");
              return;
            }
            const methods = await call("GET", "/browser/config");
            if (methods.status !== 200 || !methods.data) { sayError(methods); return; }
            config = methods.data;
            applyConfig();
            show("cancel", true);
            if (inviteFromLink) {
              $("invite").value = inviteFromLink;
              show("invite-field", true);
            }
            // loginHint: the address field's value (a property, never markup: the hint is the app's input).
            if (typeof attempt.loginHint === "string" && attempt.loginHint !== "") { $("email").value = attempt.loginHint; }
            if (upstreamSessionId) {
              freshSessionId = upstreamSessionId;
              window.history.replaceState(null, "", window.location.pathname + window.location.search);
            }
            const linkToken = new URLSearchParams((window.location.hash || "").slice(1)).get("signin_token");
            if (linkToken) {
              // Off the address bar and the history before it is used.
              window.history.replaceState(null, "", window.location.pathname + window.location.search);
              await signInWithLink(linkToken);
              return;
            }
            await withSession();
          }

          async function signInWithLink(token) {
            say("Signing you in…");
            const invite = $("invite").value.trim();
            const answer = await call("POST", "/browser/signin/link",
                                      { token: token, attemptId: attemptId, invite: invite === "" ? undefined : invite });
            if (answer.status === 200) { signedInHere(answer.data); await withSession(); return; }
            const code = codeOf(answer);
            say(linkMessages[code] || errorMessages[code] || "Something went wrong. Try again.");
            if (code === "BROWSER_MISMATCH") {
              ["signin", "confirm", "cancel"].forEach((id) => show(id, false));
            } else {
              show("signin", true);
              show("email-form", config.emailSignInEnabled === true);
            }
          }

          // "Sign in with NAME": the server starts the round trip and the page goes to the provider.
          for (let i = 0; $("upstream-" + i); i++) {
            const button = $("upstream-" + i);
            button.addEventListener("click", async () => {
              const answer = await call("POST", "/browser/upstream/start",
                                        { provider: button.dataset.provider, attemptId: attemptId });
              if (answer.status === 200 && answer.data && answer.data.authorizeUrl) {
                leaving = true;
                say("Continuing to " + button.dataset.provider + "…");
                window.location.assign(answer.data.authorizeUrl);
              } else {
                say((answer.data && answer.data.error && errorMessages[answer.data.error.code]) ||
                    (answer.data && answer.data.error && answer.data.error.message) || "Something went wrong. Try again.");
              }
            });
          }

          window.addEventListener("pageshow", (event) => { if (event.persisted && leaving) { say(""); } });
          start();
        })();

        """#

    // MARK: Upstream providers

    /// One "Sign in with NAME" button per upstream provider (ids
    /// `upstream-0`, `upstream-1`, …; the name in `data-provider`).
    static func upstreamButtonsHTML(_ names: [String]) -> String {
        guard !names.isEmpty else { return "" }
        let buttons = names.enumerated().map { index, name in
            let text = escapeHTML(name)
            return
                "<button id=\"upstream-\(index)\" type=\"button\" class=\"secondary upstream\" data-provider=\"\(text)\">Sign in with \(text)</button>"
        }
        return "<div id=\"upstream\" hidden>\n<p id=\"upstream-or\" class=\"or\">or</p>\n" + buttons.joined(separator: "\n")
            + "\n</div>\n"
    }

    /// The page an upstream provider's redirect ends on when the sign-in
    /// stops: the error's code and message, and the way back to the
    /// attempt's sign-in page when it is known. No script.
    static func upstreamErrorPage(
        _ failure: UpstreamFailure, basePath: String, back: String?, extraHeaders: [(name: String, value: String)]
    ) -> HTTPServerResponse {
        let link = back.map { "<p><a id=\"back\" href=\"\(escapeHTML($0))\">Back to sign-in</a></p>\n" } ?? ""
        let html = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="no-referrer">
            <title>Sign-in failed</title>
            <link rel="stylesheet" href="\(escapeHTML(basePath))/browser/login.css">
            </head>
            <body>
            <main id="app">
            <h1 id="title">Sign-in failed</h1>
            <p id="status" role="alert">\(escapeHTML(failure.message))</p>
            <p class="code">Error code: <code id="error-code">\(escapeHTML(failure.code))</code></p>
            \(link)</main>
            </body>
            </html>

            """
        return HTTPServerResponse(
            status: failure.status,
            headers: [("Content-Type", "text/html; charset=utf-8")] + securityHeaders + extraHeaders,
            body: Array(html.utf8))
    }
}
