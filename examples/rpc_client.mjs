#!/usr/bin/env node
// A minimal browser-login client for Node: JSON-RPC 2.0, newline-delimited,
// on the broker's Unix socket. No dependencies.
//
//   node rpc_client.mjs CLIENT_ID          # show the session
//   node rpc_client.mjs CLIENT_ID --me     # GET /api/me through http.request
//
// The account switcher, for a client whose file says Accounts=multiple:
//
//   node rpc_client.mjs CLIENT_ID --accounts         # the accounts, * before the current one
//   node rpc_client.mjs CLIENT_ID --use KEY [--me]   # make that account current
//   node rpc_client.mjs CLIENT_ID --add-account [--login-hint ADDRESS] [--me]
//                                                    # sign one more in, in the browser
//   node rpc_client.mjs CLIENT_ID --account KEY [--me]  # read and call as that account
import net from "node:net";
import path from "node:path";

class Broker {
  constructor(socketPath) {
    this.socket = net.createConnection(socketPath);
    this.pending = new Map();
    this.nextId = 1;
    this.buffer = "";
    this.listeners = [];
    this.socket.on("data", (chunk) => {
      this.buffer += chunk.toString("utf8");
      let newline;
      while ((newline = this.buffer.indexOf("\n")) >= 0) {
        const line = this.buffer.slice(0, newline);
        this.buffer = this.buffer.slice(newline + 1);
        if (!line.trim()) continue;
        const reply = JSON.parse(line);
        if (reply.id === undefined) {
          // a notification, for events.subscribe
          for (const listener of this.listeners) listener(reply.method, reply.params);
          continue;
        }
        const waiter = this.pending.get(reply.id);
        if (!waiter) continue;
        this.pending.delete(reply.id);
        if (reply.error) {
          const error = new Error(`${reply.error.data?.code ?? reply.error.code}: ${reply.error.message}`);
          error.code = reply.error.data?.code ?? reply.error.code;
          waiter.reject(error);
        } else {
          waiter.resolve(reply.result);
        }
      }
    });
  }

  call(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.socket.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }

  on(listener) {
    this.listeners.push(listener);
  }

  close() {
    this.socket.end();
  }
}

const client = process.argv[2];
const argv = process.argv.slice(3);
const option = (name) => (argv.indexOf(name) >= 0 ? argv[argv.indexOf(name) + 1] : undefined);

// Signs one more account in (the browser asks for a fresh sign-in); it is then current.
// The wait ends with the attempt: the current account may be signed in all along.
async function addAccount(broker, loginHint) {
  const seen = []; // this client's login.changed, in order
  let wake = () => {};
  broker.on((method, params) => {
    if (method === "login.changed" && params.attempt.client === client) {
      seen.push(params.attempt);
      wake();
    }
  });
  await broker.call("events.subscribe", { clients: [client] });
  let attempt = await broker.call("login.start", { client, addAccount: true, ...(loginHint ? { loginHint } : {}) });
  const final = ["completed", "cancelled", "expired", "denied", "failed", "acknowledged"];
  while (!final.includes(attempt.state)) {
    if (seen.length === 0) await new Promise((resolve) => { wake = resolve; });
    const next = seen.shift();
    if (next.attemptId === attempt.attemptId) attempt = next;
  }
  if (attempt.state !== "completed") {
    throw new Error(`${attempt.error?.code ?? attempt.state}: ${attempt.error?.message ?? "no account was added"}`);
  }
}

const socketPath =
  process.env.BROWSER_LOGIN_SOCKET ?? path.join(process.env.XDG_RUNTIME_DIR, "browser-login", "broker.sock");
const broker = new Broker(socketPath);
try {
  if (argv.includes("--accounts")) {
    for (const s of await broker.call("session.list", { client })) {
      console.log(s.current ? "*" : " ", s.accountKey ?? "-", s.account?.email ?? "-", s.status);
    }
  } else {
    if (argv.includes("--use")) await broker.call("session.use", { client, account: option("--use") });
    if (argv.includes("--add-account")) await addAccount(broker, option("--login-hint"));
    await show();
  }
} catch (error) {
  console.error(`browser-login: ${error.message}`);
  process.exitCode = 1;
} finally {
  broker.close();
}

// The session and, with --me, the API; without `account`, as the current account.
async function show() {
  const account = argv.includes("--account") ? { account: option("--account") } : {};
  const session = await broker.call("session.get", { client, ...account });
  console.log(JSON.stringify(session));
  if (argv.includes("--me")) {
    const me = await broker.call("http.request", { client, method: "GET", path: "/api/me", ...account });
    console.log(me.status, me.body ?? "");
    const notes = await broker.call("http.request", {
      client, method: "GET", path: "/api/notes", query: { limit: "5" }, ...account,
    });
    console.log(notes.status, notes.body ?? "");
  }
}
