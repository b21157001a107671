"use strict";
// The client's side of the wire, against a scripted server on a Unix socket:
// replies matched by id whatever their order and however they are cut,
// notifications kept apart, the broker's last-words BUSY, lost connections,
// and wait() made of several session.wait calls. The real broker is tested
// in the other files.

const assert = require("node:assert/strict");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { test, before, after } = require("node:test");
const bl = require("..");

let dir;
before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "bl-node-wire-"));
});
after(() => fs.rmSync(dir, { recursive: true, force: true }));

/**
 * A server that hands each request (parsed) to onRequest(request, socket).
 * Resolves with { path, requests, close() }.
 */
async function scriptedServer(name, onRequest) {
  const socketPath = path.join(dir, name);
  const requests = [];
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let buffered = "";
    socket.on("data", (chunk) => {
      buffered += chunk;
      let newline;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const request = JSON.parse(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
        requests.push(request);
        onRequest(request, socket);
      }
    });
  });
  await new Promise((resolve) => server.listen(socketPath, resolve));
  return {
    path: socketPath,
    requests,
    connections: () => sockets.size,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(resolve);
      }),
  };
}

const reply = (socket, id, result) => socket.write(JSON.stringify({ jsonrpc: "2.0", id, result }) + "\n");

test("replies are matched by id, in any order and cut anywhere; notifications are not replies", async () => {
  const held = [];
  const server = await scriptedServer("order.sock", (request, socket) => {
    held.push(request);
    if (held.length < 3) return;
    // Answer the three in reverse, with a notification first, one byte at a time.
    let text = JSON.stringify({ jsonrpc: "2.0", method: "session.changed", params: { session: {} } }) + "\n";
    for (const r of held.reverse()) text += JSON.stringify({ jsonrpc: "2.0", id: r.id, result: { echo: r.params.client, text: "ünïcødé ✓" } }) + "\n";
    const bytes = Buffer.from(text);
    for (let i = 0; i < bytes.length; i++) socket.write(bytes.subarray(i, i + 1));
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    const answers = await Promise.all(["a", "b", "c"].map((client) => broker.session(client)));
    assert.deepEqual(answers.map((a) => a.echo), ["a", "b", "c"]);
    assert.equal(answers[0].text, "ünïcødé ✓");
    assert.equal(server.requests.length, 3);
    for (const request of server.requests) {
      assert.equal(request.jsonrpc, "2.0");
      assert.equal(request.method, "session.get");
    }
    assert.equal(server.connections(), 1, "one connection for all calls");
  } finally {
    broker.close();
    await server.close();
  }
});

test("a BUSY sent with id null before the close is the answer of the calls in flight", async () => {
  const server = await scriptedServer("busy.sock", (request, socket) => {
    const busy = { code: -32000, message: "the broker is busy; try again shortly", data: { code: "BUSY" } };
    socket.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: busy }) + "\n");
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    await assert.rejects(broker.info(), (error) => {
      assert.ok(error instanceof bl.BusyError);
      assert.equal(error.code, "BUSY");
      assert.equal(error.message, "the broker is busy; try again shortly");
      return true;
    });
  } finally {
    broker.close();
    await server.close();
  }
});

test("a connection lost mid-call rejects with ConnectionLostError; the next call reconnects", async () => {
  let calls = 0;
  const server = await scriptedServer("lost.sock", (request, socket) => {
    if (++calls === 1) socket.destroy();
    else reply(socket, request.id, { protocol: 1 });
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    await assert.rejects(broker.info(), { name: "ConnectionLostError", code: "CONNECTION_LOST" });
    assert.deepEqual(await broker.info(), { protocol: 1 });
  } finally {
    broker.close();
    await server.close();
  }
});

test("close() rejects the calls in flight at once", async () => {
  const server = await scriptedServer("close.sock", () => {});
  const broker = new bl.Broker({ socket: server.path });
  try {
    const pending = broker.info();
    await new Promise((resolve) => setTimeout(resolve, 20));
    broker.close();
    await assert.rejects(pending, bl.ConnectionLostError);
  } finally {
    await server.close();
  }
});

test("a reply that is not JSON is a ProtocolError", async () => {
  const server = await scriptedServer("garbage.sock", (request, socket) => socket.write("<html>\n"));
  const broker = new bl.Broker({ socket: server.path });
  try {
    await assert.rejects(broker.info(), { name: "ProtocolError", code: "PARSE_ERROR" });
  } finally {
    broker.close();
    await server.close();
  }
});

test("an application error without a known code is still a BrowserLoginError with its code", async () => {
  const server = await scriptedServer("future.sock", (request, socket) => {
    const error = { code: -32000, message: "something new", data: { code: "SOMETHING_NEW", retryAfterSeconds: 3 } };
    socket.write(JSON.stringify({ jsonrpc: "2.0", id: request.id, error }) + "\n");
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    await assert.rejects(broker.info(), (error) => {
      assert.equal(error.constructor, bl.BrowserLoginError);
      assert.equal(error.code, "SOMETHING_NEW");
      assert.equal(error.data.retryAfterSeconds, 3);
      return true;
    });
  } finally {
    broker.close();
    await server.close();
  }
});

test("wait() beyond session.wait's 300000 ms maximum is made of several calls", async () => {
  let waits = 0;
  const server = await scriptedServer("wait.sock", (request, socket) => {
    if (++waits < 3) {
      const error = { code: -32000, message: "timed out", data: { code: "WAIT_TIMEOUT" } };
      socket.write(JSON.stringify({ jsonrpc: "2.0", id: request.id, error }) + "\n");
    } else {
      reply(socket, request.id, { status: "signedIn" });
    }
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    assert.deepEqual(await broker.wait("c", 700000), { status: "signedIn" });
    // The server answered at once, so each slice is the maximum again.
    assert.deepEqual(server.requests.map((r) => r.params.timeoutMs), [300000, 300000, 300000]);
    assert.ok(server.requests.every((r) => r.method === "session.wait" && r.params.client === "c"));

    waits = 0;
    server.requests.length = 0;
    assert.deepEqual(await broker.wait("c", Infinity), { status: "signedIn" });
    assert.deepEqual(server.requests.map((r) => r.params.timeoutMs), [300000, 300000, 300000]);

    waits = 2;
    server.requests.length = 0;
    await broker.wait("c", 1234.5);
    await broker.wait("c");
    assert.deepEqual(server.requests.map((r) => r.params.timeoutMs), [1235, 5000]);
  } finally {
    broker.close();
    await server.close();
  }
});

test("a wait ends early with its AbortSignal; the connection carries on", async () => {
  const server = await scriptedServer("abort.sock", (request, socket) => {
    if (request.method !== "session.wait") reply(socket, request.id, { protocol: 1 });
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    const controller = new AbortController();
    const waiting = broker.wait("c", 60000, { signal: controller.signal });
    assert.deepEqual(await broker.info(), { protocol: 1 });
    controller.abort(new Error("the user closed the window"));
    await assert.rejects(waiting, /the user closed the window/);
  } finally {
    broker.close();
    await server.close();
  }
});

test("request() sends text, bytes and JSON as http.request params, and reads both answer forms", async () => {
  const server = await scriptedServer("http.sock", (request, socket) => {
    const answer = request.params.path === "/bytes"
      ? { status: 200, headers: { "content-type": "image/png" }, bodyBase64: Buffer.from([0, 1, 2, 255]).toString("base64") }
      : { status: 201, headers: { "content-type": "application/json" }, body: '{"ok":true}' };
    reply(socket, request.id, answer);
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    const json = await broker.request("c", "POST", "/notes", { json: { text: "hi" }, query: { a: "1" }, timeoutMs: 5000 });
    assert.equal(json.status, 201);
    assert.equal(json.ok, true);
    assert.deepEqual(json.json(), { ok: true });
    assert.ok(Buffer.isBuffer(json.body));
    const bytes = await broker.request("c", "PUT", "/bytes", { body: new Uint8Array([9, 8]), headers: { "Content-Type": "application/octet-stream" } });
    assert.deepEqual([...bytes.body], [0, 1, 2, 255]);
    await broker.request("c", "POST", "/text", { body: "plain", headers: { "content-type": "text/plain" } });
    await broker.request("c", "POST", "/typed", { json: [1], headers: { "content-type": "application/merge-patch+json" } });
    const [first, second, third, fourth] = server.requests.map((r) => r.params);
    assert.deepEqual(first, {
      client: "c", method: "POST", path: "/notes", query: { a: "1" }, timeoutMs: 5000,
      headers: { "Content-Type": "application/json" }, body: '{"text":"hi"}',
    });
    assert.equal(second.bodyBase64, Buffer.from([9, 8]).toString("base64"));
    assert.equal(second.body, undefined);
    assert.equal(third.body, "plain");
    assert.deepEqual(fourth.headers, { "content-type": "application/merge-patch+json" });
  } finally {
    broker.close();
    await server.close();
  }
});

test("events: session.changed and login.changed on their own connection; unsubscribe stops them", async () => {
  let feed = null;
  const server = await scriptedServer("events.sock", (request, socket) => {
    if (request.method === "events.subscribe") {
      feed = socket;
      reply(socket, request.id, { subscription: "sub_1" });
      socket.write(JSON.stringify({ jsonrpc: "2.0", method: "login.changed", params: { attempt: { state: "waiting" } } }) + "\n");
      socket.write(JSON.stringify({ jsonrpc: "2.0", method: "session.changed", params: { session: { status: "signedIn" } } }) + "\n");
    } else {
      reply(socket, request.id, {});
    }
  });
  const broker = new bl.Broker({ socket: server.path });
  try {
    const seen = [];
    broker.on("login.changed", (attempt) => seen.push(["login", attempt.state]));
    broker.on("session.changed", (session) => seen.push(["session", session.status]));
    assert.equal(await broker.subscribe({ clients: ["c"] }), "sub_1");
    assert.deepEqual(server.requests[0].params, { clients: ["c"] });
    await broker.info();
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(seen, [["login", "waiting"], ["session", "signedIn"]]);
    assert.equal(server.connections(), 2, "events have a connection of their own");

    const disconnected = new Promise((resolve) => broker.once("disconnected", resolve));
    feed.destroy();
    assert.ok((await disconnected) instanceof bl.ConnectionLostError);

    await broker.subscribe();
    await broker.unsubscribe();
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(server.connections(), 1, "unsubscribe closed the events connection");
  } finally {
    broker.close();
    await server.close();
  }
});

test("an idle Broker does not keep a Node process alive; a subscription does until unsubscribe", async () => {
  const server = await scriptedServer("idle.sock", (request, socket) => {
    reply(socket, request.id, request.method === "events.subscribe" ? { subscription: "s" } : { protocol: 1 });
  });
  const { execFile } = require("node:child_process");
  const run = (script) =>
    new Promise((resolve, reject) => {
      const child = execFile(process.execPath, ["-e", script], { timeout: 10000 }, (error, stdout) =>
        error ? reject(error) : resolve(stdout.trim()),
      );
      child.stdin?.end();
    });
  try {
    const index = JSON.stringify(require.resolve(".."));
    const socket = JSON.stringify(server.path);
    // No close(): the process exits once the answer is in.
    assert.equal(await run(`new (require(${index}).Broker)({ socket: ${socket} }).info().then((r) => console.log(r.protocol))`), "1");
    const script = `const b = new (require(${index}).Broker)({ socket: ${socket} });
      b.subscribe().then(() => { setTimeout(() => { console.log("still here"); b.unsubscribe(); }, 300).unref(); });`;
    assert.equal(await run(script), "still here");
  } finally {
    await server.close();
  }
});

test("a subscribe() that fails rejects, and emits no 'disconnected'", async () => {
  const server = await scriptedServer("subfail.sock", (request, socket) => socket.destroy());
  const broker = new bl.Broker({ socket: server.path });
  let disconnected = 0;
  broker.on("disconnected", () => disconnected++);
  try {
    await assert.rejects(broker.subscribe(), bl.ConnectionLostError);
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(disconnected, 0);
  } finally {
    broker.close();
    await server.close();
  }
});
