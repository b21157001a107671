#!/usr/bin/env node
// Sign a Node tool in through the system browser, then call its API.
//
//   node sign-in.mjs CLIENT_ID
//
// The tool never sees a token: the broker holds the session and adds it to
// the requests it sends for the tool.
import { Broker, BrowserLoginError } from "browser-login";

const client = process.argv[2] ?? "com.example.notes";
const broker = new Broker();

try {
  if ((await broker.session(client)).status !== "signedIn") {
    await broker.start(client); // opens the browser at the login page
    console.error("Continue in your browser to sign in.");
    await broker.wait(client, 10 * 60 * 1000);
  }
  const me = await broker.request(client, "GET", "/api/me");
  console.log(`signed in as ${me.json().email} (HTTP ${me.status})`);
  const note = await broker.request(client, "POST", "/api/notes", { json: { text: "hello from Node" } });
  console.log(`note ${note.json().id} created (HTTP ${note.status})`);
} catch (error) {
  if (!(error instanceof BrowserLoginError)) throw error;
  console.error(`${error.code}: ${error.message}`);
  process.exitCode = 1;
}
// An idle Broker does not keep Node running: the tool exits here.
