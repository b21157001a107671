#!/usr/bin/env python3
"""Sign an app in through the system browser, then call its API.

    python3 sign_in.py CLIENT_ID

The app never sees a token: the broker holds the session and adds it to the
requests it sends for the app.
"""

import sys

from browser_login import Broker, BrowserFailedError, BrowserLoginError, Session


def sign_in(broker: Broker, client: str) -> Session:
    session = broker.session(client)
    if session.signed_in:
        return session
    try:
        broker.start(client)  # opens the system browser at the login page
        print("Continue in your browser to sign in.")
    except BrowserFailedError as error:
        # No browser could be opened; the attempt still waits: offer its link.
        if error.attempt_id is None:
            raise
        attempt = broker.resume(error.attempt_id, open_browser=False)
        print(f"Open this link to sign in:\n  {attempt.authorize_url}")
    return broker.wait(client, timeout=600)  # seconds; raises WaitTimeoutError


def main(client: str) -> int:
    try:
        with Broker() as broker:
            session = sign_in(broker, client)
            if session.account is not None:
                print(f"Signed in as {session.account.email}")

            me = broker.request(client, "GET", "/api/me")
            print(f"GET /api/me: {me.status} {me.json()['email']}")

            note = broker.request(client, "POST", "/api/notes", json={"text": "hello from Python"})
            print(f"POST /api/notes: {note.status} {note.json()['text']}")
    except BrowserLoginError as error:
        print(f"sign_in: {error} [{error.code}]", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} CLIENT_ID")
    sys.exit(main(sys.argv[1]))
