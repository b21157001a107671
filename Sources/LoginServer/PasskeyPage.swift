/// The hosted page's passkey script (`{base}/browser/passkeys/page.js`,
/// docs/server.md "Passkeys"): a "Sign in with a passkey" button under the
/// sign-in forms, and, once signed in, the account's passkeys with "Add a
/// passkey", rename and delete, inside the confirmation section. Loaded
/// after the page's own script, it talks to it through two objects: the page
/// calls `window.blPasskeys.signInShown()` and `.sessionShown(session)`,
/// this script calls `window.blPage.signedIn(answer)` with the sign-in's
/// answer once a passkey signed the browser in. The page carries `data-passkeys="on"` only when the server's
/// origin names a relying party.
enum PasskeyPage {
    static let script = #"""
        "use strict";
        (function () {
          const $ = (id) => document.getElementById(id);
          const app = $("app");
          if (!app || app.dataset.passkeys !== "on" || !window.PublicKeyCredential) { return; }
          const attemptId = new URLSearchParams(window.location.search).get("attempt");
          const messages = {
            PASSKEY_RP_NOT_CONFIGURED: "Passkeys are not set up for this address of the sign-in page.",
            PASSKEY_USER_VERIFICATION_FAILED: "Your device did not verify you (PIN, fingerprint or face). Try again.",
            PASSKEY_UNKNOWN: "This passkey is not registered here any more. Sign in another way.",
            PASSKEY_CLONED: "This passkey was refused: its device may have been copied. Sign in another way.",
            PASSKEY_INVALID: "The passkey could not be checked. Try again.",
            AUTH_USER_DISABLED: "This account is disabled. Ask an administrator to enable it.",
            INVITATION_REQUIRED: "New accounts need an invitation.",
            BROWSER_MISMATCH: "This sign-in was started in another browser. Finish it there.",
            LOGIN_REQUIRED: "Sign in first.",
            RATE_LIMITED: "Too many tries. Wait a moment and try again."
          };

          function element(tag, attributes, text) {
            const node = document.createElement(tag);
            Object.keys(attributes).forEach((name) => node.setAttribute(name, attributes[name]));
            if (text !== undefined) { node.textContent = text; }
            return node;
          }
          // The page's own request helper (login.js, loaded before this script).
          const call = (method, path, body) => window.blPage.call(method, path, body);
          function errorText(answer) {
            const error = answer.data && answer.data.error;
            return (error && (messages[error.code] || error.message)) || "Something went wrong. Try again.";
          }
          function browserRefusal(error) {
            return error && error.name === "NotAllowedError"
              ? "The passkey request was cancelled or not allowed."
              : "This browser could not use a passkey here.";
          }

          // Sign-in: under the email form.
          const signInBox = element("div", { id: "passkey-signin-box" });
          signInBox.appendChild(element("p", { class: "or" }, "or"));
          const signInButton = element("button", { id: "passkey-signin", type: "button", class: "secondary upstream" },
                                       "Sign in with a passkey");
          signInBox.appendChild(signInButton);
          const signInStatus = element("p", { id: "passkey-signin-status", role: "status" });
          signInBox.appendChild(signInStatus);
          $("signin").appendChild(signInBox);

          // The server's options for `kind` (signin, register), then the browser's ceremony; null
          // (with the reason in `status`) when either refuses.
          async function ceremony(kind, status, run) {
            status.textContent = "";
            const options = await call("POST", "/browser/passkeys/" + kind + "/options", { attemptId: attemptId });
            if (options.status !== 200) { status.textContent = errorText(options); return null; }
            try {
              return await run(options.data);
            } catch (e) {
              status.textContent = browserRefusal(e);
              return null;
            }
          }

          signInButton.addEventListener("click", async () => {
            const credential = await ceremony("signin", signInStatus, (options) => navigator.credentials.get(
              { publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options) }));
            if (!credential) { return; }
            const invite = $("invite") ? $("invite").value.trim() : "";
            const answer = await call("POST", "/browser/passkeys/signin",
                                      { attemptId: attemptId, credential: credential.toJSON(),
                                        invite: invite === "" ? undefined : invite });
            if (answer.status !== 200) { signInStatus.textContent = errorText(answer); return; }
            if (window.blPage) { await window.blPage.signedIn(answer.data); }
          });

          // The account's passkeys: inside the confirmation section.
          const manage = element("div", { id: "passkeys" });
          manage.appendChild(element("h2", {}, "Passkeys"));
          const list = element("ul", { id: "passkey-list" });
          manage.appendChild(list);
          const addButton = element("button", { id: "passkey-add", type: "button", class: "secondary" }, "Add a passkey");
          manage.appendChild(addButton);
          const manageStatus = element("p", { id: "passkey-status", role: "status" });
          manage.appendChild(manageStatus);
          $("confirm").appendChild(manage);

          // One refresh at a time: one asked for meanwhile runs once more after
          // it, so a list being edited is not redrawn under the user twice.
          // `data-state` is "ready" once the list shows the latest answer.
          let refreshing = false;
          let refreshAgain = false;
          async function refresh() {
            if (refreshing) { refreshAgain = true; return; }
            refreshing = true;
            manage.dataset.state = "loading";
            try {
              do { refreshAgain = false; await render(); } while (refreshAgain);
            } finally {
              refreshing = false;
              manage.dataset.state = "ready";
            }
          }

          async function render() {
            const answer = await call("GET", "/browser/passkeys/list");
            list.textContent = "";
            if (answer.status !== 200) { manageStatus.textContent = errorText(answer); return; }
            answer.data.passkeys.forEach((passkey) => {
              const item = element("li", { class: "passkey", "data-id": passkey.id });
              const name = element("input", { class: "passkey-name", "aria-label": "Passkey name", maxlength: "64" });
              name.value = passkey.name;
              item.appendChild(name);
              const rename = element("button", { type: "button", class: "secondary passkey-rename" }, "Rename");
              rename.addEventListener("click", async () => {
                const result = await call("POST", "/browser/passkeys/rename", { id: passkey.id, name: name.value });
                manageStatus.textContent = result.status === 200 ? "Renamed." : errorText(result);
                await refresh();
              });
              item.appendChild(rename);
              const remove = element("button", { type: "button", class: "secondary passkey-delete" }, "Delete");
              remove.addEventListener("click", async () => {
                const result = await call("POST", "/browser/passkeys/delete", { id: passkey.id });
                manageStatus.textContent = result.status === 200 ? "Deleted." : errorText(result);
                await refresh();
              });
              item.appendChild(remove);
              list.appendChild(item);
            });
            addButton.textContent = answer.data.passkeys.length === 0
              ? "Add a passkey for faster sign-in next time" : "Add a passkey";
            manage.dataset.count = String(answer.data.passkeys.length);
          }

          addButton.addEventListener("click", async () => {
            const credential = await ceremony("register", manageStatus, (options) => navigator.credentials.create(
              { publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) }));
            if (!credential) { return; }
            const answer = await call("POST", "/browser/passkeys/register",
                                      { attemptId: attemptId, credential: credential.toJSON(), name: "Passkey" });
            manageStatus.textContent = answer.status === 200 ? "Passkey added." : errorText(answer);
            await refresh();
          });

          window.blPasskeys = {
            signInShown() { signInStatus.textContent = ""; },
            sessionShown() { manageStatus.textContent = ""; refresh(); }
          };
          // The page may have shown a session before this script ran.
          if (!$("confirm").hidden) { refresh(); }
        })();

        """#
}
