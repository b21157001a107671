"""A client for the browser-login broker: sign a desktop app in through the
system browser and call its API with the session, without ever holding a
token.

    from browser_login import Broker

    with Broker() as broker:
        broker.start("com.example.notes")             # opens the browser
        session = broker.wait("com.example.notes", timeout=300)
        me = broker.request("com.example.notes", "GET", "/api/me").json()

`AsyncBroker` is the asyncio twin with the same methods. Every error is a
`BrowserLoginError` with a stable `.code`; see docs/apps/python.md.
"""

from ._async import AsyncBroker, AsyncEventStream
from ._core import socket_path
from . import _errors
from ._errors import *  # noqa: F401,F403 - the error classes, listed in _errors.__all__
from ._sync import Broker, EventStream
from ._views import (
    FINAL_STATES, Account, Attempt, AttemptError, AttemptState, Client, Device, Event, Info, LoginChanged, Receipt,
    Response, Session, SessionChanged, SessionStatus,
)

__version__ = "0.1.0"

__all__ = [
    "Broker", "AsyncBroker", "EventStream", "AsyncEventStream", "socket_path",
    "Account", "Attempt", "AttemptError", "AttemptState", "Client", "Device", "Event", "FINAL_STATES", "Info",
    "LoginChanged", "Receipt", "Response", "Session", "SessionChanged", "SessionStatus",
]
__all__ += _errors.__all__
