"use strict";
// The calls that change no session, every error they map, and the package's
// surface: the error table of docs/rpc.md and the TypeScript declarations.

const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { test, after } = require("node:test");
const bl = require("..");
const { env, live, repoRoot, withSessionLock } = require("../test-support/helpers");

const broker = new bl.Broker();
after(() => broker.close());

/** Asserts that promise rejects with an instance of cls carrying code and a message. */
async function rejectsWith(promise, cls, code) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof cls, `${error.name} is not a ${cls.name}: ${error.message}`);
    assert.ok(error instanceof bl.BrowserLoginError);
    assert.equal(error.code, code);
    assert.match(error.message, /\S/);
    return true;
  });
}

test("defaultSocketPath follows the one rule of docs/rpc.md", () => {
  assert.equal(bl.defaultSocketPath({ BROWSER_LOGIN_SOCKET: "/s", XDG_RUNTIME_DIR: "/r" }), "/s");
  assert.equal(bl.defaultSocketPath({ BROWSER_LOGIN_SOCKET: "", XDG_RUNTIME_DIR: "/r" }), "/r/browser-login/broker.sock");
  assert.equal(bl.defaultSocketPath({}), null);
  assert.equal(new bl.Broker({ socket: "/x.sock" }).socketPath, "/x.sock");
  assert.equal(new bl.Broker().socketPath, bl.defaultSocketPath());
});

test("activationToken is sent by start and resume only when given", async () => {
  const sent = [];
  const stub = new bl.Broker({ socket: "/nonexistent.sock" });
  stub.call = async (method, params) => sent.push([method, params]);
  await stub.start("c", { activationToken: "wl-tok_1" });
  await stub.start("c");
  await stub.resume("at_1", { activationToken: "x11-id_TIME1" });
  assert.equal(sent[0][1].activationToken, "wl-tok_1");
  assert.ok(!("activationToken" in sent[1][1]));
  assert.deepEqual(sent[2], ["login.resume", { attemptId: "at_1", activationToken: "x11-id_TIME1" }]);
});

test("the broker refuses a malformed activationToken with INVALID_PARAMS", live, async () => {
  await assert.rejects(broker.start(env.client, { activationToken: "has spaces" }), (error) => {
    assert.equal(error.code, "INVALID_PARAMS");
    assert.match(error.message, /activationToken/);
    assert.doesNotMatch(error.message, /has spaces/);
    return true;
  });
});

test("info", live, async () => {
  const info = await broker.info();
  assert.equal(info.protocol, 1);
  assert.equal(info.vault, "secret-service");
  assert.equal(typeof info.version, "string");
  assert.equal(typeof info.vaultAvailable, "boolean");
});

test("clients lists the test client, not the bound one", live, async () => {
  const ids = (await broker.clients()).map((client) => client.id);
  assert.ok(ids.includes(env.client), ids.join(", "));
  assert.ok(!ids.includes(env.boundClient));
});

test("CLIENT_UNKNOWN", live, async () => {
  await rejectsWith(broker.session("com.example.no-such-client"), bl.ClientUnknownError, "CLIENT_UNKNOWN");
});

test("CLIENT_FORBIDDEN for a client whose Peers= does not name this program", live, async () => {
  await rejectsWith(broker.session(env.boundClient), bl.ClientForbiddenError, "CLIENT_FORBIDDEN");
  await rejectsWith(broker.start(env.boundClient), bl.ClientForbiddenError, "CLIENT_FORBIDDEN");
});

test("ATTEMPT_UNKNOWN", live, async () => {
  await rejectsWith(broker.status("at_doesNotExist00"), bl.AttemptUnknownError, "ATTEMPT_UNKNOWN");
  await rejectsWith(broker.cancel("at_doesNotExist00"), bl.AttemptUnknownError, "ATTEMPT_UNKNOWN");
});

test("CALLBACK_INVALID and CALLBACK_MISMATCH from finish", live, async () => {
  await rejectsWith(broker.finish("not a url"), bl.CallbackInvalidError, "CALLBACK_INVALID");
  await rejectsWith(
    broker.finish("com.example.elsewhere:/callback?code=c&state=s"),
    bl.CallbackMismatchError,
    "CALLBACK_MISMATCH",
  );
});

test("EPHEMERAL_UNSUPPORTED and DEVICE_FLOW_UNSUPPORTED from start", live, () =>
  // Signed out, so that ALREADY_SIGNED_IN does not come first.
  withSessionLock(async () => {
    await broker.signOut(env.client);
    await rejectsWith(broker.start(env.client, { ephemeral: true }), bl.EphemeralUnsupportedError, "EPHEMERAL_UNSUPPORTED");
    await rejectsWith(broker.start(env.client, { flow: "device" }), bl.DeviceFlowUnsupportedError, "DEVICE_FLOW_UNSUPPORTED");
  }));

test("JSON-RPC errors are ProtocolErrors, and the connection stays usable", live, async () => {
  await assert.rejects(broker.call("session.get", { client: env.client, bogus: true }), (error) => {
    assert.ok(error instanceof bl.ProtocolError);
    assert.equal(error.code, "INVALID_PARAMS");
    assert.equal(error.rpcCode, -32602);
    return true;
  });
  await assert.rejects(broker.call("no.such.method"), { name: "ProtocolError", code: "METHOD_NOT_FOUND", rpcCode: -32601 });
  await assert.rejects(broker.request(env.client, "GET", "//elsewhere.example/"), { code: "INVALID_PARAMS" });
  await assert.rejects(broker.call("login.start", { client: env.client, flow: "carrier-pigeon" }), { code: "INVALID_PARAMS" });
  assert.equal((await broker.info()).protocol, 1);
});

test("a request over the broker's 1 MiB message limit is refused here, not sent", live, async () => {
  const body = "x".repeat(1024 * 1024 + 1);
  await assert.rejects(broker.request(env.client, "POST", "/api/notes", { body }), {
    name: "ProtocolError",
    code: "INVALID_REQUEST",
  });
  assert.equal((await broker.info()).protocol, 1);
});

test("request refuses a body and json together, and a body of another type", async () => {
  const offline = new bl.Broker({ socket: "/nonexistent/broker.sock" });
  await assert.rejects(offline.request("c", "POST", "/p", { body: "a", json: {} }), TypeError);
  await assert.rejects(offline.request("c", "POST", "/p", { body: 42 }), TypeError);
  await assert.rejects(offline.wait("c", -1), TypeError);
  offline.close();
});

test("BrokerNotRunningError for a missing socket and for a socket nobody listens on", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bl-node-"));
  try {
    const missing = new bl.Broker({ socket: path.join(dir, "missing.sock") });
    await assert.rejects(missing.info(), (error) => {
      assert.ok(error instanceof bl.BrokerNotRunningError);
      assert.equal(error.code, "BROKER_NOT_RUNNING");
      assert.match(error.message, /systemctl --user start browser-login-broker\.socket/);
      return true;
    });
    const notListening = path.join(dir, "file.sock");
    fs.writeFileSync(notListening, "");
    const refused = new bl.Broker({ socket: notListening });
    await assert.rejects(refused.clients(), { name: "BrokerNotRunningError", code: "BROKER_NOT_RUNNING" });
    await assert.rejects(refused.subscribe(), { name: "BrokerNotRunningError" });
    missing.close();
    refused.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a class for every error code of docs/rpc.md's error table", (t) => {
  const root = repoRoot();
  if (!root) return t.skip("not inside the repository: docs/rpc.md is not here");
  const doc = fs.readFileSync(path.join(root, "docs", "rpc.md"), "utf8");
  const table = doc.slice(doc.indexOf("| `data.code` |"));
  const codes = [...table.matchAll(/^\| `([A-Z_]+)` \|/gm)].map((match) => match[1]);
  assert.ok(codes.length >= 25, `only ${codes.length} codes read from the table`);
  assert.deepEqual(Object.keys(bl.errorClasses).sort(), [...new Set(codes)].sort());
  for (const code of codes) {
    const cls = bl.errorClasses[code];
    assert.equal(bl[cls.name], cls, `${cls.name} is exported`);
    assert.equal(cls.code, code);
    const error = new cls("m", { attemptId: "at_1" });
    assert.ok(error instanceof bl.BrowserLoginError);
    assert.equal(error.code, code);
    assert.equal(error.name, cls.name);
    assert.equal(error.data.attemptId, "at_1");
  }
});

test("index.d.ts declares every exported name, and the ESM entry exports them too", async () => {
  const dts = fs.readFileSync(path.join(__dirname, "..", "index.d.ts"), "utf8");
  const declared = [...dts.matchAll(/^export (?:declare )?(?:class|function|const|let|var) ([A-Za-z_$][\w$]*)/gm)].map(
    (match) => match[1],
  );
  const exported = Object.keys(bl);
  assert.deepEqual([...declared].sort(), [...exported].sort());
  for (const [code, cls] of Object.entries(bl.errorClasses)) {
    assert.ok(dts.includes(`readonly ${code}: typeof ${cls.name};`), `errorClasses.${code} is declared`);
  }
  const esm = await import("../index.mjs");
  assert.deepEqual(
    Object.keys(esm).filter((name) => name !== "default").sort(),
    [...exported].sort(),
  );
  for (const name of exported) assert.equal(esm[name], bl[name], name);
  const pkg = require("../package.json");
  assert.equal(pkg.name, "browser-login");
  assert.deepEqual(pkg.dependencies ?? {}, {});
  for (const file of ["index.js", "index.mjs", "index.d.ts"]) assert.ok(fs.existsSync(path.join(__dirname, "..", file)));
});

test("docs/apps/electron.md shows the examples as they are", (t) => {
  const root = repoRoot();
  if (!root) return t.skip("not inside the repository");
  const doc = fs.readFileSync(path.join(root, "docs", "apps", "electron.md"), "utf8");
  const examples = path.join(__dirname, "..", "examples");
  for (const file of ["electron/main.js", "electron/preload.js", "electron/renderer.js", "electron/index.html", "sign-in.mjs"]) {
    const text = fs.readFileSync(path.join(examples, file), "utf8").trimEnd();
    assert.ok(doc.includes("\n" + text + "\n```"), `${file} is in docs/apps/electron.md as it is`);
  }
});
