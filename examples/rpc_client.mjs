#!/usr/bin/env node
// A minimal browser-login client for Node: JSON-RPC 2.0, newline-delimited,
// on the broker's Unix socket. No dependencies.
//
//   node rpc_client.mjs CLIENT_ID          # show the session
//   node rpc_client.mjs CLIENT_ID --me     # GET /api/me through http.request
import net from "node:net";
import path from "node:path";

class Broker {
  constructor(socketPath) {
    this.socket = net.createConnection(socketPath);
    this.pending = new Map();
    this.nextId = 1;
    this.buffer = "";
    this.socket.on("data", (chunk) => {
      this.buffer += chunk.toString("utf8");
      let newline;
      while ((newline = this.buffer.indexOf("\n")) >= 0) {
        const line = this.buffer.slice(0, newline);
        this.buffer = this.buffer.slice(newline + 1);
        if (!line.trim()) continue;
        const reply = JSON.parse(line);
        const waiter = this.pending.get(reply.id);
        if (!waiter) continue; // a notification, for events.subscribe
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

  close() {
    this.socket.end();
  }
}

const client = process.argv[2];
const socketPath =
  process.env.BROWSER_LOGIN_SOCKET ?? path.join(process.env.XDG_RUNTIME_DIR, "browser-login", "broker.sock");
const broker = new Broker(socketPath);
try {
  const session = await broker.call("session.get", { client });
  console.log(JSON.stringify(session));
  if (process.argv.includes("--me")) {
    const me = await broker.call("http.request", { client, method: "GET", path: "/api/me" });
    console.log(me.status, me.body ?? "");
    const notes = await broker.call("http.request", {
      client, method: "GET", path: "/api/notes", query: { limit: "5" },
    });
    console.log(notes.status, notes.body ?? "");
  }
} catch (error) {
  console.error(`browser-login: ${error.message}`);
  process.exitCode = 1;
} finally {
  broker.close();
}
