/// What the tests' Node drivers of the hosted page's own script share: a
/// browser's same-origin `fetch` with a cookie jar, and a minimal DOM. A
/// driver defines `pageAddress` (the page's URL) and `jar` (a `Map` of
/// cookies) before it, then uses `browserFetch`, `elements`, `makeElement`,
/// `sleep` and `until`.
enum PageDriver {
    static let prelude = #"""
        const pageOrigin = new URL(pageAddress).origin;

        // As a browser sends it from the page: cookies, Origin on state changes,
        // Sec-Fetch-Site (`init.site`, default same-origin); keeps the cookies set.
        async function browserFetch(target, init = {}) {
          const headers = Object.assign({}, init.headers || {});
          if (jar.size) headers["Cookie"] = [...jar].map(([k, v]) => k + "=" + v).join("; ");
          const method = init.method || "GET";
          if (method !== "GET") headers["Origin"] = pageOrigin;
          headers["Sec-Fetch-Site"] = init.site || "same-origin";
          const response = await fetch(new URL(target, pageAddress), { method, headers, body: init.body, redirect: "manual" });
          for (const cookie of response.headers.getSetCookie()) {
            const [pair, ...attributes] = cookie.split(";");
            const eq = pair.indexOf("=");
            const name = pair.slice(0, eq).trim(), value = pair.slice(eq + 1).trim();
            if (attributes.some((a) => a.trim() === "Max-Age=0")) jar.delete(name); else jar.set(name, value);
          }
          return response;
        }

        const elements = {};
        function makeElement(id) {
          const listeners = {};
          return {
            id, hidden: false, textContent: "", value: "", href: "", dataset: {},
            addEventListener(type, fn) { (listeners[type] = listeners[type] || []).push(fn); },
            async fire(type) { for (const fn of listeners[type] || []) await fn({ preventDefault() {}, persisted: false }); },
            focus() {}
          };
        }

        const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
        async function until(predicate, what) {
          for (let i = 0; i < 300; i++) { if (predicate()) return; await sleep(10); }
          throw new Error("timed out waiting for " + what + "; status: " + elements.status.textContent);
        }
        """#
}
