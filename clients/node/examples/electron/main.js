// The Electron main process of an app that signs in with browser-login.
//
// The broker holds the tokens; this process holds a Broker (a socket to it)
// and the renderer gets public state only: status, who, until when. Never a
// token, a callback URL or an attempt's authorize URL.
//
//   npm install && npx electron .      (NOTES_CLIENT picks another client id)

const path = require("node:path");
const { pathToFileURL } = require("node:url");
const { app, BrowserWindow, ipcMain, shell } = require("electron");
const { Broker, BrowserLoginError, AlreadySignedInError, BrowserFailedError } = require("browser-login");

const CLIENT = process.env.NOTES_CLIENT || "com.example.notes";
const SIGN_IN_TIMEOUT_MS = 5 * 60 * 1000;
const ENDED = new Set(["cancelled", "expired", "denied", "failed"]);
const PAGE = path.join(__dirname, "index.html");

const broker = new Broker();
let window = null;

/** The only shape that crosses to the renderer. */
function publicState(session, error = null) {
  return {
    status: session?.status ?? "signedOut",
    displayName: session?.account?.displayName ?? null,
    email: session?.account?.email ?? null,
    expiresAt: session?.expiresAt ?? null,
    // The broker's error messages say what to do next and are safe to show.
    error: error ? { code: error.code, message: error.message } : null,
  };
}

/** Handlers answer our own page only, not a frame navigated elsewhere. */
function fromOurPage(event) {
  return event.senderFrame?.url === pathToFileURL(PAGE).href;
}

function handle(channel, action) {
  ipcMain.handle(channel, async (event) => {
    if (!fromOurPage(event)) throw new Error("refused");
    try {
      return publicState(await action());
    } catch (error) {
      if (!(error instanceof BrowserLoginError)) throw error;
      return publicState(await broker.session(CLIENT).catch(() => null), error);
    }
  });
}

handle("account:session", () => broker.session(CLIENT));

handle("account:signIn", async () => {
  // Wait for the session, unless the attempt ends without one: the user
  // declined, it expired, it failed or was cancelled.
  const ended = new AbortController();
  const onAttempt = (attempt) => {
    if (attempt.client !== CLIENT || !ENDED.has(attempt.state)) return;
    const code = attempt.error?.code ?? attempt.state.toUpperCase();
    ended.abort(new BrowserLoginError(code, attempt.error?.message ?? `the sign-in ${attempt.state}`));
  };
  broker.on("login.changed", onAttempt);
  try {
    // Opens the system browser; the broker receives the callback and
    // exchanges it. This process only learns the outcome.
    await broker.start(CLIENT).catch(async (error) => {
      if (!(error instanceof BrowserFailedError)) throw error;
      // The broker could not open a browser; the attempt still waits.
      const attempt = await broker.resume(error.data.attemptId, { openBrowser: false });
      await shell.openExternal(attempt.authorizeUrl);
    });
    return await broker.wait(CLIENT, SIGN_IN_TIMEOUT_MS, { signal: ended.signal });
  } catch (error) {
    if (error instanceof AlreadySignedInError) return broker.session(CLIENT);
    throw error;
  } finally {
    broker.off("login.changed", onAttempt);
  }
});

handle("account:signOut", () => broker.signOut(CLIENT));

// Session changes made anywhere (the CLI, another window, expiry, the
// server revoking it) reach the window as public state.
broker.on("session.changed", (session) => {
  window?.webContents.send("account:changed", publicState(session));
});

function createWindow() {
  window = new BrowserWindow({
    width: 480,
    height: 320,
    webPreferences: {
      preload: path.join(__dirname, "preload.js"),
      contextIsolation: true,
      sandbox: true,
      nodeIntegration: false,
    },
  });
  window.on("closed", () => {
    window = null;
  });
  return window.loadFile(PAGE);
}

// Follow the session; after the broker restarts, subscribe again and send
// the state that may have changed meanwhile.
let quitting = false;
async function followSession() {
  try {
    await broker.subscribe({ clients: [CLIENT] });
    window?.webContents.send("account:changed", publicState(await broker.session(CLIENT)));
  } catch (error) {
    console.error(`browser-login: ${error.message}`);
    if (!quitting) setTimeout(followSession, 5000);
  }
}
broker.on("disconnected", () => {
  if (!quitting) setTimeout(followSession, 1000);
});

app.whenReady().then(async () => {
  await createWindow();
  await followSession();
});

app.on("window-all-closed", () => {
  quitting = true;
  broker.close();
  app.quit();
});
