#!/usr/bin/env python3
"""A minimal browser-login client: JSON-RPC 2.0, newline-delimited, on the
broker's Unix socket. Standard library only.

    python3 rpc_client.py CLIENT_ID            # show the session
    python3 rpc_client.py CLIENT_ID --me       # GET /api/me through http.request
    python3 rpc_client.py CLIENT_ID --get PATH # one GET of PATH through http.request

The account switcher, for a client whose file says Accounts=multiple:

    python3 rpc_client.py CLIENT_ID --accounts          # the accounts, * before the current one
    python3 rpc_client.py CLIENT_ID --use KEY [--me]    # make that account current
    python3 rpc_client.py CLIENT_ID --add-account [--login-hint ADDRESS] [--me]
                                                        # sign one more in, in the browser
    python3 rpc_client.py CLIENT_ID --account KEY [--me]  # read and call as that account
"""
import itertools
import json
import os
import socket
import sys


class BrokerError(Exception):
    """A JSON-RPC error; `code` is data.code for application errors."""

    def __init__(self, error):
        data = error.get("data") or {}
        self.code = data.get("code") or error.get("code")
        super().__init__(f"{self.code}: {error.get('message')}")


class Broker:
    def __init__(self, path=None):
        path = path or os.environ.get("BROWSER_LOGIN_SOCKET") or os.path.join(
            os.environ["XDG_RUNTIME_DIR"], "browser-login", "broker.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")
        self.ids = itertools.count(1)
        self.notifications = []

    def call(self, rpc_method, /, **params):
        """Calls `rpc_method` with named params; answers its result or raises BrokerError."""
        request_id = next(self.ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": rpc_method, "params": params}
        self.sock.sendall(json.dumps(message).encode() + b"\n")
        while True:
            reply = json.loads(self.reader.readline())
            if "id" not in reply:  # a notification (events.subscribe)
                self.notifications.append(reply)
                continue
            if reply["id"] != request_id:
                continue
            if "error" in reply:
                raise BrokerError(reply["error"])
            return reply["result"]

    def notification(self):
        """The next notification (after events.subscribe)."""
        while not self.notifications:
            message = json.loads(self.reader.readline())
            if "id" not in message:
                self.notifications.append(message)
        return self.notifications.pop(0)


def option(name):
    """The value after `name` on the command line, or None."""
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else None


def add_account(broker, client, login_hint=None):
    """Signs one more account in (the browser asks for a fresh sign-in); it is then current."""
    broker.call("events.subscribe", clients=[client])
    hint = {"loginHint": login_hint} if login_hint else {}
    attempt = broker.call("login.start", client=client, addAccount=True, **hint)
    # The wait ends with the attempt: the current account may be signed in all along.
    while attempt["state"] not in ("completed", "cancelled", "expired", "denied", "failed", "acknowledged"):
        message = broker.notification()
        changed = message.get("params", {}).get("attempt")
        if message["method"] == "login.changed" and changed["attemptId"] == attempt["attemptId"]:
            attempt = changed
    if attempt["state"] != "completed":
        raise BrokerError(attempt.get("error") or {"code": attempt["state"], "message": "no account was added"})


def main():
    client = sys.argv[1]
    broker = Broker()
    if "--accounts" in sys.argv:
        for s in broker.call("session.list", client=client):
            email = (s.get("account") or {}).get("email") or "-"
            print("*" if s["current"] else " ", s.get("accountKey") or "-", email, s["status"])
        return
    if "--use" in sys.argv:
        broker.call("session.use", client=client, account=option("--use"))
    if "--add-account" in sys.argv:
        add_account(broker, client, option("--login-hint"))
    # Without `account`, the calls act as the current account.
    account = {"account": option("--account")} if "--account" in sys.argv else {}
    session = broker.call("session.get", client=client, **account)
    print(json.dumps(session, sort_keys=True))
    if "--get" in sys.argv:
        path = sys.argv[sys.argv.index("--get") + 1]
        answer = broker.call("http.request", client=client, method="GET", path=path, **account)
        print(answer["status"], answer.get("body", ""))
    if "--me" in sys.argv:
        answer = broker.call("http.request", client=client, method="GET", path="/api/me", **account)
        print(answer["status"], answer.get("body", ""))
        created = broker.call("http.request", client=client, method="POST", path="/api/notes",
                              headers={"Content-Type": "application/json"},
                              body=json.dumps({"text": "written from Python"}), **account)
        print(created["status"], created.get("body", ""))


if __name__ == "__main__":
    try:
        main()
    except BrokerError as error:
        print(f"browser-login: {error}", file=sys.stderr)
        sys.exit(1)
