"use strict";
// The Electron example (examples/electron) run in Node with a fake `electron`
// module: main.js and preload.js load unchanged, the renderer's API is driven
// as the page would drive it, and a whole sign-in goes through it against the
// real broker. Checks that only public state ever crosses to the renderer.

const assert = require("node:assert/strict");
const fs = require("node:fs");
const Module = require("node:module");
const path = require("node:path");
const vm = require("node:vm");
const { test } = require("node:test");
const bl = require("..");
const { env, live, withSessionLock, eventually } = require("../test-support/helpers");

const example = path.join(__dirname, "..", "examples", "electron");
const PUBLIC_KEYS = ["status", "displayName", "email", "expiresAt", "error"];
const PAGE_URL = require("node:url").pathToFileURL(path.join(example, "index.html")).href;

/** A stand-in for the parts of Electron the example uses. */
function fakeElectron() {
  const handlers = new Map();
  const rendererListeners = new Map();
  const fake = {
    handlers,
    exposed: {},
    windows: [],
    sent: [],
    appListeners: {},
    quit: false,
  };
  const deliver = (channel, payload) => {
    for (const listener of rendererListeners.get(channel) ?? []) listener({}, structuredClone(payload));
  };
  fake.module = {
    app: {
      whenReady: () => Promise.resolve(),
      on: (name, listener) => {
        fake.appListeners[name] = listener;
      },
      quit: () => {
        fake.quit = true;
      },
    },
    BrowserWindow: class {
      constructor(options) {
        this.options = options;
        this.webContents = {
          send: (channel, payload) => {
            fake.sent.push([channel, payload]);
            deliver(channel, payload);
          },
        };
        fake.windows.push(this);
      }
      on() {}
      loadFile(file) {
        this.file = file;
        return Promise.resolve();
      }
    },
    shell: {
      openExternal: async () => {
        throw new Error("the test world's broker opens its own browser");
      },
    },
    ipcMain: {
      handle: (channel, handler) => handlers.set(channel, handler),
    },
    contextBridge: {
      exposeInMainWorld: (key, api) => {
        fake.exposed[key] = api;
      },
    },
    ipcRenderer: {
      // As Electron does: the handler's answer is structured-cloned across.
      invoke: async (channel, ...args) => {
        const handler = handlers.get(channel);
        if (!handler) throw new Error(`No handler registered for '${channel}'`);
        return structuredClone(await handler({ senderFrame: { url: PAGE_URL } }, ...args));
      },
      on: (channel, listener) => {
        if (!rendererListeners.has(channel)) rendererListeners.set(channel, new Set());
        rendererListeners.get(channel).add(listener);
      },
      removeListener: (channel, listener) => rendererListeners.get(channel)?.delete(listener),
    },
  };
  fake.listenerCount = (channel) => rendererListeners.get(channel)?.size ?? 0;
  return fake;
}

/** Loads the example's files with `electron` (and `browser-login`, as npm would install it) resolved to ours. */
function loadExample(fake) {
  const fakeId = path.join(example, "node_modules", "electron", "index.js");
  const entry = new Module(fakeId);
  entry.filename = fakeId;
  entry.loaded = true;
  entry.exports = fake.module;
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    if (request === "electron") return fakeId;
    if (request === "browser-login") return require.resolve("..");
    return resolve.call(this, request, ...rest);
  };
  require.cache[fakeId] = entry;
  try {
    require(path.join(example, "preload.js"));
    require(path.join(example, "main.js"));
  } finally {
    Module._resolveFilename = resolve;
    delete require.cache[fakeId];
    delete require.cache[path.join(example, "preload.js")];
    delete require.cache[path.join(example, "main.js")];
  }
}

function assertPublic(state, where) {
  assert.equal(typeof state, "object", where);
  for (const key of Object.keys(state)) assert.ok(PUBLIC_KEYS.includes(key), `${where}: ${key} is not public state`);
  const text = JSON.stringify(state);
  assert.ok(!text.includes("://"), `${where}: no URL crosses: ${text}`);
  assert.ok(!/\bat_/.test(text), `${where}: no attempt id crosses`);
}

test("the Electron example: only public state reaches the renderer, and a sign-in works through it", live, () =>
  withSessionLock(async () => {
    const fake = fakeElectron();
    const other = new bl.Broker();
    try {
      await other.signOut(env.client);
      loadExample(fake);

      // preload.js exposes four functions and nothing else.
      const api = fake.exposed.account;
      assert.deepEqual(Object.keys(fake.exposed), ["account"]);
      assert.deepEqual(Object.keys(api).sort(), ["onChange", "session", "signIn", "signOut"]);
      for (const member of Object.values(api)) assert.equal(typeof member, "function");

      // main.js opened an isolated, sandboxed window and follows the session.
      await eventually(() => fake.sent.length > 0);
      const [window] = fake.windows;
      assert.equal(window.options.webPreferences.contextIsolation, true);
      assert.equal(window.options.webPreferences.sandbox, true);
      assert.equal(window.options.webPreferences.nodeIntegration, false);
      assert.equal(window.options.webPreferences.preload, path.join(example, "preload.js"));
      assert.equal(window.file, path.join(example, "index.html"));
      assert.deepEqual([...fake.handlers.keys()].sort(), ["account:session", "account:signIn", "account:signOut"]);

      const changes = [];
      const stop = api.onChange((state) => changes.push(state));

      const before = await api.session();
      assertPublic(before, "session()");
      assert.equal(before.status, "signedOut");

      const signedIn = await api.signIn();
      assertPublic(signedIn, "signIn()");
      assert.deepEqual(Object.keys(signedIn).sort(), [...PUBLIC_KEYS].sort());
      assert.equal(signedIn.status, "signedIn");
      assert.equal(signedIn.email, env.email);
      assert.equal(typeof signedIn.displayName, "string");
      assert.match(signedIn.expiresAt, /^\d{4}-/);
      assert.equal(signedIn.error, null);
      assert.equal((await other.session(env.client)).status, "signedIn", "the broker holds the session");
      await eventually(() => changes.some((state) => state.status === "signedIn"));

      // Signing in again answers the session as it is.
      assert.equal((await api.signIn()).status, "signedIn");

      // A frame that is not our page is refused.
      await assert.rejects(fake.handlers.get("account:session")({ senderFrame: { url: "https://elsewhere.example/" } }), /refused/);

      // The page itself runs against the same API.
      const page = runRenderer(api);
      await eventually(() => page.text() === `Signed in as ${signedIn.displayName}`);

      const signedOut = await api.signOut();
      assertPublic(signedOut, "signOut()");
      assert.equal(signedOut.status, "signedOut");
      await eventually(() => changes.at(-1)?.status === "signedOut");
      await eventually(() => page.text() === "Signed out");

      stop();
      assert.equal(fake.listenerCount("account:changed"), 1, "only the page's own listener is left");
      for (const state of changes) assertPublic(state, "onChange");
      for (const [channel, payload] of fake.sent) {
        assert.equal(channel, "account:changed");
        assertPublic(payload, "webContents.send");
      }
    } finally {
      fake.appListeners["window-all-closed"]?.();
      other.close();
    }
    assert.ok(fake.quit, "the app quits when its window closes");
  }));

/** Runs renderer.js against a minimal DOM and the exposed API; returns what the page shows. */
function runRenderer(account) {
  const elements = {};
  const element = (id) =>
    (elements[id] ??= {
      textContent: "",
      hidden: false,
      listeners: {},
      addEventListener(name, listener) {
        this.listeners[name] = listener;
      },
    });
  const source = fs.readFileSync(path.join(example, "renderer.js"), "utf8");
  vm.runInNewContext(source, { window: { account }, document: { getElementById: element } });
  return { text: () => element("state").textContent, elements };
}
