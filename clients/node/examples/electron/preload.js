// Runs in the renderer's isolated world; the page sees only window.account,
// whose calls return public state (status, displayName, email, expiresAt,
// error) and whose onChange callback gets the same shape.

const { contextBridge, ipcRenderer } = require("electron");

contextBridge.exposeInMainWorld("account", {
  session: () => ipcRenderer.invoke("account:session"),
  signIn: () => ipcRenderer.invoke("account:signIn"),
  signOut: () => ipcRenderer.invoke("account:signOut"),
  onChange: (callback) => {
    const listener = (_event, state) => callback(state);
    ipcRenderer.on("account:changed", listener);
    return () => ipcRenderer.removeListener("account:changed", listener);
  },
});
