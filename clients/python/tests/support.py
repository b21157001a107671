"""What the live tests share: the environment contract and a few helpers.

The live tests run against a real broker. They read:

    BROWSER_LOGIN_SOCKET   the broker's socket (the tests skip without it)
    BL_TEST_CLIENT         a client that signs in by itself when login.start
                           opens "the browser" (a scripted user agent)
    BL_TEST_BOUND_CLIENT   a client whose Peers= refuses this program
    BL_TEST_EMAIL          the account that signs in
"""

import os
import unittest
from pathlib import Path

SOCKET = os.environ.get("BROWSER_LOGIN_SOCKET") or None
CLIENT = os.environ.get("BL_TEST_CLIENT", "com.example.notes")
BOUND_CLIENT = os.environ.get("BL_TEST_BOUND_CLIENT", "com.example.bound")
EMAIL = os.environ.get("BL_TEST_EMAIL", "")

#: clients/python
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: the repository's root (clients/python/../..)
REPO_ROOT = PACKAGE_ROOT.parent.parent

SIGN_IN_TIMEOUT = 60

live = unittest.skipUnless(
    SOCKET and EMAIL,
    "BROWSER_LOGIN_SOCKET (and BL_TEST_CLIENT, BL_TEST_EMAIL) unset: the live tests need a running broker "
    "whose test client signs in by itself",
)


def signed_in(broker):
    """Sign the test client in (the scripted user agent plays the user)."""
    session = broker.session(CLIENT)
    if session.status == "signedIn":
        return session
    broker.start(CLIENT, open_browser=True)
    return broker.wait(CLIENT, SIGN_IN_TIMEOUT)


async def signed_in_async(broker):
    session = await broker.session(CLIENT)
    if session.status == "signedIn":
        return session
    await broker.start(CLIENT, open_browser=True)
    return await broker.wait(CLIENT, SIGN_IN_TIMEOUT)
