"use strict";
// One JSON-RPC 2.0 connection to the broker's Unix socket: newline-delimited
// JSON, requests written as they come, replies matched to their calls by id
// (the broker answers concurrently, so out of order), notifications handed to
// a callback. It connects on the first call and again on the first call after
// the connection closed.

const net = require("node:net");
const {
  BrokerNotRunningError,
  ConnectionLostError,
  ProtocolError,
  errorFromReply,
} = require("./errors");

/** The broker closes a connection after a message over 1 MiB; refuse those here instead. */
const MAX_MESSAGE_BYTES = 1024 * 1024;

class Connection {
  /**
   * @param {string|null} path the socket, or null when no default could be found
   * @param {object} options
   * @param {(method: string, params: any) => void} [options.onNotification]
   * @param {(error: Error) => void} [options.onClose] called when an open connection closes
   * @param {boolean} [options.keepAlive] keep the process alive while connected,
   *   not only while calls are in flight (for an event subscription)
   */
  constructor(path, { onNotification, onClose, keepAlive = false } = {}) {
    this.path = path;
    this.onNotification = onNotification;
    this.onClose = onClose;
    this.keepAlive = keepAlive;
    this.socket = null;
    this.pending = new Map();
    this.nextId = 1;
  }

  /** Sends one request; resolves with its `result`, rejects with a BrowserLoginError. */
  call(method, params, { signal } = {}) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const id = this.nextId++;
      const message = JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n";
      if (Buffer.byteLength(message) > MAX_MESSAGE_BYTES) {
        return reject(new ProtocolError(-32600, `the ${method} request is over the broker's 1 MiB message limit; send less`));
      }
      const socket = this.socket ?? this.open();
      if (!socket) return reject(this.noPathError());
      const waiter = { resolve, reject, signal, onAbort: null };
      if (signal) {
        // The broker's side of the call runs to its end; its answer is dropped.
        waiter.onAbort = () => {
          this.pending.delete(id);
          this.updateRef();
          reject(signal.reason);
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.pending.set(id, waiter);
      this.updateRef();
      socket.write(message);
    });
  }

  /** Closes the connection at once; calls in flight reject with ConnectionLostError. */
  close() {
    const socket = this.socket;
    if (!socket) return;
    socket.closedByUs = true;
    socket.destroy();
    // 'close' comes later; settle the calls now so close() is final.
    this.detach(socket, new ConnectionLostError("the connection was closed by close() before the broker answered"));
  }

  open() {
    if (!this.path) return null;
    const socket = net.createConnection(this.path);
    this.socket = socket;
    socket.connected = false;
    socket.parts = [];
    socket.on("connect", () => {
      socket.connected = true;
    });
    socket.on("data", (chunk) => this.onData(socket, chunk));
    socket.on("error", (error) => {
      socket.failure = error;
    });
    socket.on("close", () => {
      if (socket.closedByUs) return;
      this.detach(socket, this.closeError(socket));
    });
    return socket;
  }

  detach(socket, error) {
    if (this.socket !== socket) return;
    this.socket = null;
    const waiters = [...this.pending.values()];
    this.pending.clear();
    for (const waiter of waiters) this.settle(waiter, () => waiter.reject(error));
    if (socket.connected && !socket.closedByUs) this.onClose?.(error);
  }

  closeError(socket) {
    // A connection closed to make room was sent BUSY first (with "id": null):
    // that is the answer of the calls it still had.
    if (socket.lastWords) return socket.lastWords;
    if (socket.connected) return new ConnectionLostError();
    const code = socket.failure?.code;
    const start = "start it with 'systemctl --user start browser-login-broker.socket' or run 'browser-login-broker'";
    const data = { socket: this.path };
    if (code === "ENOENT") {
      return new BrokerNotRunningError(`the broker is not running (no socket at ${this.path}); ${start}`, data);
    }
    if (code === "ECONNREFUSED") {
      return new BrokerNotRunningError(`the broker is not running (nothing listens at ${this.path}); ${start}`, data);
    }
    if (code === "EACCES" || code === "EPERM") {
      return new BrokerNotRunningError(
        `the broker's socket ${this.path} is not this user's; each user runs their own broker: ${start}`,
        data,
      );
    }
    return new BrokerNotRunningError(
      `the broker could not be reached at ${this.path} (${code ?? "connection closed"}); ${start}`,
      data,
    );
  }

  noPathError() {
    return new BrokerNotRunningError(
      "no broker socket: neither BROWSER_LOGIN_SOCKET nor XDG_RUNTIME_DIR is set; " +
        "set BROWSER_LOGIN_SOCKET to the broker's socket, or pass { socket }",
    );
  }

  onData(socket, chunk) {
    let start = 0;
    let newline;
    while ((newline = chunk.indexOf(0x0a, start)) !== -1) {
      let line = chunk.subarray(start, newline);
      if (socket.parts.length) {
        socket.parts.push(line);
        line = Buffer.concat(socket.parts);
        socket.parts = [];
      }
      start = newline + 1;
      this.onLine(socket, line);
      if (this.socket !== socket || socket.destroyed) return;
    }
    if (start < chunk.length) socket.parts.push(chunk.subarray(start));
  }

  onLine(socket, line) {
    const text = line.toString("utf8").trim();
    if (!text) return;
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      // Nothing after this line can be trusted to be framed right.
      socket.lastWords = new ProtocolError(-32700, "the broker sent a reply that is not JSON; call again");
      socket.destroy();
      return;
    }
    if (message === null || typeof message !== "object" || Array.isArray(message)) return;
    if (message.id === undefined) {
      if (typeof message.method === "string") this.onNotification?.(message.method, message.params ?? {});
      return;
    }
    if (message.id === null) {
      if (message.error) socket.lastWords = errorFromReply(message.error);
      return;
    }
    const waiter = this.pending.get(message.id);
    if (!waiter) return; // an aborted call's late answer
    this.pending.delete(message.id);
    this.updateRef();
    this.settle(waiter, () =>
      message.error ? waiter.reject(errorFromReply(message.error)) : waiter.resolve(message.result),
    );
  }

  settle(waiter, action) {
    if (waiter.onAbort) waiter.signal.removeEventListener("abort", waiter.onAbort);
    action();
  }

  /** An idle connection does not keep a Node process alive; one with calls in flight does. */
  updateRef() {
    const socket = this.socket;
    if (!socket) return;
    if (this.keepAlive || this.pending.size > 0) socket.ref();
    else socket.unref();
  }
}

module.exports = { Connection, MAX_MESSAGE_BYTES };
