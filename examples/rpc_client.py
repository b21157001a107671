#!/usr/bin/env python3
"""A minimal browser-login client: JSON-RPC 2.0, newline-delimited, on the
broker's Unix socket. Standard library only.

    python3 rpc_client.py CLIENT_ID            # show the session
    python3 rpc_client.py CLIENT_ID --me       # GET /api/me through http.request
    python3 rpc_client.py CLIENT_ID --get PATH # one GET of PATH through http.request
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


def main():
    client = sys.argv[1]
    broker = Broker()
    session = broker.call("session.get", client=client)
    print(json.dumps(session, sort_keys=True))
    if "--get" in sys.argv:
        path = sys.argv[sys.argv.index("--get") + 1]
        answer = broker.call("http.request", client=client, method="GET", path=path)
        print(answer["status"], answer.get("body", ""))
    if "--me" in sys.argv:
        answer = broker.call("http.request", client=client, method="GET", path="/api/me")
        print(answer["status"], answer.get("body", ""))
        created = broker.call("http.request", client=client, method="POST", path="/api/notes",
                              headers={"Content-Type": "application/json"},
                              body=json.dumps({"text": "written from Python"}))
        print(created["status"], created.get("body", ""))


if __name__ == "__main__":
    try:
        main()
    except BrokerError as error:
        print(f"browser-login: {error}", file=sys.stderr)
        sys.exit(1)
