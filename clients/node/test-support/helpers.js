"use strict";
// What the tests share: the environment contract of the test world, and a
// lock for the tests that change BL_TEST_CLIENT's session (node --test may
// run the files at the same time, and they share one broker).

const crypto = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const env = {
  socket: process.env.BROWSER_LOGIN_SOCKET,
  client: process.env.BL_TEST_CLIENT,
  boundClient: process.env.BL_TEST_BOUND_CLIENT,
  email: process.env.BL_TEST_EMAIL,
};

/** Options for a test that needs the broker: skipped outside the test world. */
const live = env.socket
  ? {}
  : { skip: "BROWSER_LOGIN_SOCKET is not set: run these under a broker (BL_TEST_* as in client-world.sh)" };

/** The repository's root when this package is inside its checkout, else null. */
function repoRoot() {
  const root = path.resolve(__dirname, "..", "..", "..");
  return fs.existsSync(path.join(root, "docs", "rpc.md")) ? root : null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs fn holding a lock per broker socket, across processes. A lock whose
 * holder died is taken over.
 */
async function withSessionLock(fn) {
  const hash = crypto.createHash("sha256").update(env.socket ?? "").digest("hex").slice(0, 16);
  const lock = path.join(os.tmpdir(), `browser-login-node-tests-${hash}.lock`);
  const deadline = Date.now() + 120000;
  for (;;) {
    try {
      fs.mkdirSync(lock);
      fs.writeFileSync(path.join(lock, "pid"), String(process.pid));
      break;
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
      let holder = NaN;
      try {
        holder = Number(fs.readFileSync(path.join(lock, "pid"), "utf8"));
      } catch {}
      if (holder && !alive(holder)) fs.rmSync(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`the test lock ${lock} is held by ${holder}`);
      else await sleep(50);
    }
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}

/** The next `name` event of emitter whose argument passes `test`, or a timeout. */
function nextEvent(emitter, name, test = () => true, timeoutMs = 20000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      emitter.off(name, listener);
      reject(new Error(`no ${name} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const listener = (value) => {
      if (!test(value)) return;
      clearTimeout(timer);
      emitter.off(name, listener);
      resolve(value);
    };
    emitter.on(name, listener);
  });
}

/** Resolves once check() is true; rejects after timeoutMs. */
async function eventually(check, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not so within ${timeoutMs} ms: ${check}`);
    await sleep(20);
  }
}

/** Collects `name` events of emitter until stopped. */
function record(emitter, name) {
  const seen = [];
  const listener = (value) => seen.push(value);
  emitter.on(name, listener);
  seen.stop = () => emitter.off(name, listener);
  return seen;
}

module.exports = { env, live, repoRoot, sleep, withSessionLock, nextEvent, record, eventually };
