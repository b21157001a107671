"use strict";
// A whole life of a session against the real broker, server and keyring:
// waits and their timeout, a sign-in through "the browser" (the test world's
// scripted user agent), events, the API through http.request, attempts, and
// sign-out, with every error these steps can map.

const assert = require("node:assert/strict");
const { test } = require("node:test");
const bl = require("..");
const { env, live, withSessionLock, nextEvent, record, eventually } = require("../test-support/helpers");

test("sign-in, session, http.request, events and sign-out", live, () =>
  withSessionLock(async () => {
    const broker = new bl.Broker();
    const watcher = new bl.Broker();
    try {
      await broker.signOut(env.client);

      // Signed out: the API is refused, and a wait times out without
      // holding up the calls made meanwhile on the same connection.
      await assert.rejects(broker.request(env.client, "GET", "/api/me"), (error) => {
        assert.ok(error instanceof bl.NotSignedInError);
        assert.equal(error.code, "NOT_SIGNED_IN");
        return true;
      });
      const began = Date.now();
      const waiting = broker.wait(env.client, 1500);
      const info = await broker.info();
      assert.equal(info.protocol, 1);
      assert.ok(Date.now() - began < 1000, "info() was answered while the wait went on");
      await assert.rejects(waiting, (error) => {
        assert.ok(error instanceof bl.WaitTimeoutError);
        assert.equal(error.code, "WAIT_TIMEOUT");
        return true;
      });
      assert.ok(Date.now() - began >= 1400, "the wait lasted its timeout");

      // A start without the browser waits; resume, status and cancel it.
      const parked = await broker.start(env.client, { openBrowser: false });
      assert.equal(parked.state, "waiting");
      assert.match(parked.attemptId, /^at_/);
      const resumed = await broker.resume(parked.attemptId, { openBrowser: false });
      assert.equal(resumed.attemptId, parked.attemptId);
      assert.equal(typeof resumed.authorizeUrl, "string");
      assert.equal((await broker.status(parked.attemptId, { reconcile: false })).state, "waiting");
      assert.equal((await broker.cancel(parked.attemptId)).state, "cancelled");
      assert.equal((await broker.acknowledge(parked.attemptId)).state, "acknowledged");

      // The full sign-in, watched through events.
      const sessions = record(watcher, "session.changed");
      const logins = record(watcher, "login.changed");
      const subscription = await watcher.subscribe({ clients: [env.client] });
      assert.equal(typeof subscription, "string");
      const signedInEvent = nextEvent(watcher, "session.changed", (s) => s.status === "signedIn");
      const attempt = await broker.start(env.client);
      assert.equal(attempt.client, env.client);
      const session = await broker.wait(env.client, 60000);
      assert.equal(session.status, "signedIn");
      assert.equal(session.account.email, env.email);
      assert.equal(session.client, env.client);
      assert.equal((await signedInEvent).account.email, env.email);
      await eventually(() => logins.some((a) => a.attemptId === attempt.attemptId && a.state === "completed"));
      assert.ok(sessions.every((s) => s.client === env.client));

      const current = await broker.session(env.client);
      assert.equal(current.status, "signedIn");
      assert.equal(current.account.email, env.email);
      assert.match(current.expiresAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

      const listed = await broker.attempts({ client: env.client });
      assert.ok(listed.some((a) => a.attemptId === attempt.attemptId));
      assert.equal((await broker.status(attempt.attemptId, { reconcile: false })).state, "completed");
      await assert.rejects(broker.start(env.client), { name: "AlreadySignedInError", code: "ALREADY_SIGNED_IN" });

      // The API, with the session the broker holds.
      const me = await broker.request(env.client, "GET", "/api/me");
      assert.equal(me.status, 200);
      assert.ok(me.ok);
      assert.match(me.headers["content-type"], /application\/json/);
      assert.equal(me.json().email, env.email);
      assert.equal(JSON.parse(me.text()).email, env.email);
      const text = `from node ${process.pid}`;
      const note = await broker.request(env.client, "POST", "/api/notes", { json: { text } });
      assert.equal(note.status, 201);
      assert.equal(note.json().text, text);
      const notes = await broker.request(env.client, "GET", "/api/notes");
      assert.equal(notes.status, 200);
      assert.ok(notes.text().includes(text));

      // Sign-out: the event, and the API refused again.
      const signedOutEvent = nextEvent(watcher, "session.changed", (s) => s.status === "signedOut");
      const out = await broker.signOut(env.client);
      assert.equal(out.status, "signedOut");
      assert.equal((await signedOutEvent).client, env.client);
      await assert.rejects(broker.request(env.client, "GET", "/api/me"), bl.NotSignedInError);

      // After unsubscribe no event arrives.
      await watcher.unsubscribe();
      const before = sessions.length;
      await broker.start(env.client, { openBrowser: false }).then((a) => broker.cancel(a.attemptId));
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(sessions.length, before);
      sessions.stop();
      logins.stop();
    } finally {
      broker.close();
      watcher.close();
    }
  }));

test("examples/sign-in.mjs signs in and calls the API, then exits by itself", live, () =>
  withSessionLock(async () => {
    const { execFile } = require("node:child_process");
    const path = require("node:path");
    const broker = new bl.Broker();
    try {
      await broker.signOut(env.client);
      const script = path.join(__dirname, "..", "examples", "sign-in.mjs");
      const stdout = await new Promise((resolve, reject) =>
        execFile(process.execPath, [script, env.client], { timeout: 60000 }, (error, out, err) =>
          error ? reject(new Error(`${error.message}\n${err}`)) : resolve(out),
        ),
      );
      assert.match(stdout, new RegExp(`^signed in as ${env.email.replace(/[+.]/g, "\\$&")} \\(HTTP 200\\)$`, "m"));
      assert.match(stdout, /^note \S+ created \(HTTP 201\)$/m);
      assert.equal((await broker.session(env.client)).status, "signedIn");
      await broker.signOut(env.client);
    } finally {
      broker.close();
    }
  }));

test("accounts(), use() and the account option", live, () =>
  withSessionLock(async () => {
    const broker = new bl.Broker();
    try {
      let session = await broker.session(env.client);
      if (session.status !== "signedIn") {
        await broker.start(env.client);
        session = await broker.wait(env.client, 60000);
      }
      assert.match(session.accountKey, /^acct_/);
      assert.equal(session.current, true);
      const accounts = await broker.accounts(env.client);
      assert.deepEqual(
        accounts.map((a) => a.accountKey),
        [session.accountKey],
      );
      assert.equal((await broker.use(env.client, session.accountKey)).accountKey, session.accountKey);
      const account = session.accountKey;
      assert.equal((await broker.session(env.client, { account })).account.email, env.email);
      assert.equal((await broker.wait(env.client, 5000, { account })).accountKey, account);
      const me = await broker.request(env.client, "GET", "/api/me", { account });
      assert.equal(me.json().email, env.email);
      await assert.rejects(broker.session(env.client, { account: "acct_" + "A".repeat(22) }), (error) => {
        assert.ok(error instanceof bl.AccountUnknownError);
        assert.equal(error.code, "ACCOUNT_UNKNOWN");
        return true;
      });
    } finally {
      broker.close();
    }
  }));
