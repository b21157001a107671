#!/usr/bin/env python3
"""The asyncio version of sign_in.py, watching the sign-in as events.

    python3 sign_in_async.py CLIENT_ID
"""

import asyncio
import sys

from browser_login import AsyncBroker, BrowserLoginError, LoginChanged, SessionChanged


async def main(client: str) -> int:
    try:
        async with AsyncBroker() as broker:
            # Subscribe first, so no change is missed.
            async with broker.events([client]) as events:
                if not (await broker.session(client)).signed_in:
                    await broker.start(client)
                    print("Continue in your browser to sign in.")
                    async for event in events:
                        if isinstance(event, LoginChanged):
                            attempt = event.attempt
                            print(f"sign-in {attempt.state}")
                            if attempt.final:  # cancelled, expired, denied, failed
                                reason = attempt.error.message if attempt.error else attempt.state
                                print(f"sign-in ended: {reason}", file=sys.stderr)
                                return 1
                        elif isinstance(event, SessionChanged) and event.session.signed_in:
                            break
            session = await broker.session(client)
            if session.account is not None:
                print(f"Signed in as {session.account.email}")
            me = await broker.request(client, "GET", "/api/me")
            print(f"GET /api/me: {me.status} {me.json()['email']}")
    except BrowserLoginError as error:
        print(f"sign_in_async: {error} [{error.code}]", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} CLIENT_ID")
    sys.exit(asyncio.run(main(sys.argv[1])))
