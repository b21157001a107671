"use strict";
// The Broker: the broker's JSON-RPC API as promise methods, and its
// notifications as EventEmitter events. Every result is a public view of
// docs/rpc.md; no token ever reaches this process.

const { EventEmitter } = require("node:events");
const path = require("node:path");
const { Connection } = require("./connection");
const { errorClasses } = require("./errors");

/** session.wait's own maximum; longer waits are made of several calls. */
const MAX_WAIT_MS = 300000;

/**
 * The broker's socket by the project's one rule: $BROWSER_LOGIN_SOCKET when
 * set and not empty, else $XDG_RUNTIME_DIR/browser-login/broker.sock; null
 * when neither is set.
 */
function defaultSocketPath(env = process.env) {
  if (env.BROWSER_LOGIN_SOCKET) return env.BROWSER_LOGIN_SOCKET;
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, "browser-login", "broker.sock");
  return null;
}

/** An answer of the app's API, from http.request. */
class HttpResponse {
  constructor(result) {
    this.status = result.status;
    this.headers = result.headers ?? {};
    this.body =
      typeof result.bodyBase64 === "string"
        ? Buffer.from(result.bodyBase64, "base64")
        : Buffer.from(result.body ?? "", "utf8");
  }

  /** True for a 2xx status. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /** The body decoded as UTF-8. */
  text() {
    return this.body.toString("utf8");
  }

  /** The body parsed as JSON; throws a SyntaxError when it is not JSON. */
  json() {
    return JSON.parse(this.text());
  }
}

/** Leaves out the members the caller did not give, so the broker's defaults apply. */
function defined(params) {
  const out = {};
  for (const [key, value] of Object.entries(params)) if (value !== undefined) out[key] = value;
  return out;
}

class Broker extends EventEmitter {
  /**
   * @param {{ socket?: string }} [options] the broker's socket; by default
   *   the one of defaultSocketPath().
   */
  constructor({ socket } = {}) {
    super();
    /** The socket this Broker talks to (null when no default could be found). */
    this.socketPath = socket ?? defaultSocketPath();
    this._rpc = new Connection(this.socketPath);
    this._feed = null;
    this._subscription = null;
  }

  /**
   * Calls any method of docs/rpc.md with named params; resolves with its
   * result. The methods below are this with types and defaults.
   */
  call(method, params = {}, options = {}) {
    return this._rpc.call(method, params, options);
  }

  /** broker.info: the version, the protocol and the keyring's state. */
  info() {
    return this.call("broker.info");
  }

  /** clients.list: the clients this program may use. */
  clients() {
    return this.call("clients.list");
  }

  /**
   * login.start: starts (or returns the live) sign-in attempt; opens the browser by default.
   * activationToken (xdg-activation on Wayland, a startup id on X11) lets that browser window come to the front.
   * addAccount signs one more account in (an Accounts=multiple client); loginHint fills in the page's address.
   */
  start(
    client,
    { openBrowser = true, switchAccount = false, flow, ephemeral, activationToken, addAccount, loginHint } = {},
  ) {
    return this.call(
      "login.start",
      defined({ client, openBrowser, switchAccount, flow, ephemeral, activationToken, addAccount, loginHint }),
    );
  }

  /** login.resume: the attempt again, reopening the browser unless openBrowser is false (activationToken as for start). */
  resume(attemptId, { openBrowser, activationToken } = {}) {
    return this.call("login.resume", defined({ attemptId, openBrowser, activationToken }));
  }

  /** login.finish: delivers a callback URL (what the URL handler does). */
  finish(url) {
    return this.call("login.finish", { url });
  }

  /** login.cancel */
  cancel(attemptId) {
    return this.call("login.cancel", { attemptId });
  }

  /** login.status: the attempt; with reconcile (the default) asks the server about it too. */
  status(attemptId, { reconcile } = {}) {
    return this.call("login.status", defined({ attemptId, reconcile }));
  }

  /** login.acknowledge */
  acknowledge(attemptId) {
    return this.call("login.acknowledge", { attemptId });
  }

  /** login.list: attempts, newest first. */
  attempts({ client, states } = {}) {
    return this.call("login.list", defined({ client, states }));
  }

  /** session.get: the client's session (always a view; status says whether signed in); `account`: that account's. */
  session(client, { account } = {}) {
    return this.call("session.get", defined({ client, account }));
  }

  /** session.list: the client's accounts' sessions, the current one first, then the most recently used. */
  accounts(client) {
    return this.call("session.list", { client });
  }

  /** session.use: makes the account (an accountKey) the client's current one. */
  use(client, account) {
    return this.call("session.use", { client, account });
  }

  /**
   * session.wait: resolves with the session once it is signedIn; rejects with
   * WaitTimeoutError after timeoutMs (default 5000; Infinity waits for ever).
   * Waits longer than the broker's 300000 ms are made of several calls. An
   * AbortSignal ends the wait early (rejecting with its reason).
   */
  async wait(client, timeoutMs = 5000, { signal, account } = {}) {
    if (typeof timeoutMs !== "number" || !(timeoutMs >= 0)) {
      throw new TypeError("wait: timeoutMs must be a number of milliseconds, 0 or more (or Infinity)");
    }
    const deadline = Date.now() + timeoutMs;
    // The first call asks for the whole wait (up to the maximum), read from
    // timeoutMs, not from the clock, which may have moved on a millisecond.
    let remaining = timeoutMs;
    for (;;) {
      const slice = Math.ceil(Math.min(remaining, MAX_WAIT_MS));
      try {
        return await this.call("session.wait", defined({ client, timeoutMs: slice, account }), { signal });
      } catch (error) {
        remaining = Math.max(deadline - Date.now(), 0);
        if (error instanceof errorClasses.WAIT_TIMEOUT && remaining > 0) continue;
        throw error;
      }
    }
  }

  /** session.signOut: signs out at once; the server is told as soon as it can be. `account`: that account. */
  signOut(client, { account } = {}) {
    return this.call("session.signOut", defined({ client, account }));
  }

  /**
   * http.request: calls the client's own API with its session, which the
   * broker adds; resolves with an HttpResponse for any HTTP status.
   * `body` is a string (sent as text) or bytes (Buffer / Uint8Array /
   * ArrayBuffer); `json` is a value sent as JSON with Content-Type
   * application/json unless headers name another. `account` (an accountKey)
   * sends it as that account of the client rather than the current one.
   */
  async request(client, method, path, { query, headers, body, json, timeoutMs, account } = {}) {
    const params = defined({ client, method, path, query, headers: headers && { ...headers }, timeoutMs, account });
    if (json !== undefined) {
      if (body !== undefined) throw new TypeError("request: give body or json, not both");
      params.body = JSON.stringify(json);
      const named = Object.keys(params.headers ?? {}).some((name) => name.toLowerCase() === "content-type");
      if (!named) params.headers = { ...params.headers, "Content-Type": "application/json" };
    } else if (typeof body === "string") {
      params.body = body;
    } else if (body instanceof ArrayBuffer) {
      params.bodyBase64 = Buffer.from(body).toString("base64");
    } else if (ArrayBuffer.isView(body)) {
      params.bodyBase64 = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("base64");
    } else if (body !== undefined && body !== null) {
      throw new TypeError("request: body must be a string, a Buffer, a Uint8Array or an ArrayBuffer");
    }
    return new HttpResponse(await this.call("http.request", params));
  }

  /**
   * events.subscribe on a connection of its own: from now on this Broker
   * emits 'session.changed' (a session view) and 'login.changed' (an
   * attempt view) for the given clients (all it may use by default).
   * Subscribing again replaces the subscription. Resolves with its id.
   */
  async subscribe({ clients } = {}) {
    if (!this._feed) {
      const events = new Connection(this.socketPath, {
        keepAlive: true,
        onNotification: (method, params) => {
          if (this._feed !== events) return;
          if (method === "session.changed") this.emit("session.changed", params.session);
          else if (method === "login.changed") this.emit("login.changed", params.attempt);
        },
        onClose: (error) => {
          if (this._feed !== events) return;
          // A subscribe() still in flight rejects instead: one signal per loss.
          const subscribed = this._subscription !== null;
          this._feed = null;
          this._subscription = null;
          if (subscribed) this.emit("disconnected", error);
        },
      });
      this._feed = events;
    }
    const events = this._feed;
    let result;
    try {
      result = await events.call("events.subscribe", defined({ clients }));
    } catch (error) {
      if (this._feed === events && !this._subscription) {
        this._feed = null;
        events.close();
      }
      throw error;
    }
    const previous = this._subscription;
    this._subscription = result.subscription;
    if (previous && previous !== result.subscription) {
      await events.call("events.unsubscribe", { subscription: previous }).catch(() => {});
    }
    return result.subscription;
  }

  /** Ends the subscription: no more events; the events connection closes. */
  async unsubscribe() {
    const events = this._feed;
    this._feed = null;
    this._subscription = null;
    // Closing the connection drops its subscriptions at the broker.
    events?.close();
  }

  /**
   * Closes both connections at once; calls in flight reject with
   * ConnectionLostError. A later call connects again.
   */
  close() {
    this.unsubscribe();
    this._rpc.close();
  }
}

module.exports = { Broker, HttpResponse, defaultSocketPath, MAX_WAIT_MS };
