// The page: it knows the account's public state and nothing else.

const stateLine = document.getElementById("state");

function show(state) {
  if (state.error) stateLine.textContent = state.error.message;
  else if (state.status === "signedIn") stateLine.textContent = `Signed in as ${state.displayName ?? state.email}`;
  else stateLine.textContent = state.status === "signingIn" ? "Signing in…" : "Signed out";
  document.getElementById("sign-in").hidden = state.status === "signedIn";
  document.getElementById("sign-out").hidden = state.status !== "signedIn";
}

document.getElementById("sign-in").addEventListener("click", async () => show(await window.account.signIn()));
document.getElementById("sign-out").addEventListener("click", async () => show(await window.account.signOut()));
window.account.onChange(show);
window.account.session().then(show);
