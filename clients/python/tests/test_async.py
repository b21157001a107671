"""`AsyncBroker`, the asyncio twin, against the real broker."""

import asyncio
import os
import tempfile
import time
import unittest

import browser_login
from browser_login import (
    AsyncBroker, BrokerNotRunningError, ClientForbiddenError, ClientUnknownError, ConnectionLostError, LoginChanged,
    NotSignedInError, ProtocolError, SessionChanged, WaitTimeoutError,
)

from .support import BOUND_CLIENT, CLIENT, EMAIL, SIGN_IN_TIMEOUT, live, signed_in_async


async def collect(stream, until, timeout=SIGN_IN_TIMEOUT):
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        event = await stream.get(timeout=max(0.0, deadline - time.monotonic()))
        seen.append(event)
        if until(event):
            return seen


@live
class AsyncBrokerTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.broker = AsyncBroker()
        await self.broker.__aenter__()

    async def asyncTearDown(self):
        await self.broker.close()

    async def test_info_and_clients(self):
        info = await self.broker.info()
        self.assertEqual((info.protocol, info.vault), (1, "secret-service"))
        self.assertIn(CLIENT, [client.id for client in await self.broker.clients()])

    async def test_full_sign_in_with_events_request_and_sign_out(self):
        await self.broker.sign_out(CLIENT)
        async with self.broker.events([CLIENT]) as events:
            attempt = await self.broker.start(CLIENT, open_browser=True)
            session = await self.broker.wait(CLIENT, SIGN_IN_TIMEOUT)
            self.assertEqual((session.status, session.account.email), ("signedIn", EMAIL))
            seen = await collect(events, lambda e: isinstance(e, SessionChanged) and e.session.status == "signedIn")
            self.assertIn("completed", [e.attempt.state for e in seen
                                        if isinstance(e, LoginChanged) and e.attempt.attempt_id == attempt.attempt_id])

            me = await self.broker.request(CLIENT, "GET", "/api/me")
            self.assertEqual((me.status, me.json()["email"]), (200, EMAIL))
            note = await self.broker.request(CLIENT, "POST", "/api/notes", json={"text": "from asyncio"})
            self.assertEqual((note.status, note.json()["text"]), (201, "from asyncio"))

            signed_out = await self.broker.sign_out(CLIENT)
            self.assertEqual(signed_out.status, "signedOut")
            seen = await collect(events, lambda e: isinstance(e, SessionChanged) and e.session.status == "signedOut")
            self.assertEqual(seen[-1].session.client, CLIENT)
        self.assertEqual([event async for event in events], [], "a closed stream ends the iteration")

    async def test_errors(self):
        await self.broker.sign_out(CLIENT)
        with self.assertRaises(NotSignedInError):
            await self.broker.request(CLIENT, "GET", "/api/me")
        with self.assertRaises(WaitTimeoutError):
            await self.broker.wait(CLIENT, 0.3)
        with self.assertRaises(ClientUnknownError):
            await self.broker.session("com.example.no-such-client")
        with self.assertRaises(ClientForbiddenError):
            await self.broker.session(BOUND_CLIENT)
        with self.assertRaises(browser_login.AttemptUnknownError):
            await self.broker.cancel("at_doesNotExist0000")
        with self.assertRaises(ProtocolError) as caught:
            await self.broker.call("session.get", client=CLIENT, unknownParam=1)
        self.assertEqual(caught.exception.code, "INVALID_PARAMS")
        with tempfile.TemporaryDirectory() as directory:
            with self.assertRaises(BrokerNotRunningError):
                await AsyncBroker(os.path.join(directory, "missing.sock")).info()

    async def test_a_long_wait_holds_up_no_other_call(self):
        await self.broker.sign_out(CLIENT)
        waiter = asyncio.ensure_future(self.broker.wait(CLIENT, 3))
        await asyncio.sleep(0.2)
        sessions = await asyncio.gather(*(self.broker.session(CLIENT) for _ in range(8)))
        self.assertEqual({s.status for s in sessions}, {"signedOut"})
        self.assertFalse(waiter.done())
        with self.assertRaises(WaitTimeoutError):
            await waiter

    async def test_close_fails_the_calls_in_flight(self):
        broker = AsyncBroker()
        await broker.sign_out(CLIENT)
        waiter = asyncio.ensure_future(broker.wait(CLIENT, 30))
        await asyncio.sleep(0.3)
        await broker.close()
        with self.assertRaises(ConnectionLostError):
            await asyncio.wait_for(waiter, 5)
        with self.assertRaises(ConnectionLostError):
            await broker.info()

    async def test_signed_in_helper_and_session(self):
        session = await signed_in_async(self.broker)
        self.assertEqual(await self.broker.session(CLIENT), session)


if __name__ == "__main__":
    unittest.main()
