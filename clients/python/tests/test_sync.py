"""`Broker` against the real broker (see support.py for the environment)."""

import os
import socket
import tempfile
import threading
import time
import unittest

import browser_login
from browser_login import (
    AccountUnknownError, Broker, BrokerNotRunningError, ClientForbiddenError, ClientUnknownError, ConnectionLostError, LoginChanged,
    NotSignedInError, ProtocolError, SessionChanged, WaitTimeoutError,
)

from .support import BOUND_CLIENT, CLIENT, EMAIL, SIGN_IN_TIMEOUT, live, signed_in


def collect(stream, until, timeout=SIGN_IN_TIMEOUT):
    """Events from `stream` up to the first for which `until(event)` holds."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        event = stream.get(timeout=max(0.0, deadline - time.monotonic()))
        seen.append(event)
        if until(event):
            return seen


@live
class BrokerTests(unittest.TestCase):
    def setUp(self):
        self.broker = Broker()
        self.addCleanup(self.broker.close)

    def test_info(self):
        info = self.broker.info()
        self.assertEqual(info.protocol, 1)
        self.assertEqual(info.vault, "secret-service")
        self.assertTrue(info.vault_available)
        self.assertTrue(info.version)

    def test_clients_lists_the_test_client_but_not_the_bound_one(self):
        ids = [client.id for client in self.broker.clients()]
        self.assertIn(CLIENT, ids)
        self.assertNotIn(BOUND_CLIENT, ids)

    def test_full_sign_in(self):
        self.broker.sign_out(CLIENT)
        attempt = self.broker.start(CLIENT, open_browser=True)
        self.assertEqual(attempt.client, CLIENT)
        self.assertTrue(attempt.attempt_id.startswith("at_"))
        session = self.broker.wait(CLIENT, SIGN_IN_TIMEOUT)
        self.assertEqual(session.status, "signedIn")
        self.assertTrue(session.signed_in)
        self.assertEqual(session.account.email, EMAIL)
        self.assertIsNotNone(session.expires_at.tzinfo)
        self.assertEqual(self.broker.session(CLIENT), session)
        settled = self.broker.status(attempt.attempt_id, reconcile=False)
        self.assertEqual(settled.state, "completed")
        self.assertIsNotNone(settled.receipt)
        self.assertIn(attempt.attempt_id, [a.attempt_id for a in self.broker.attempts(CLIENT)])

    def test_accounts_use_and_account_arguments(self):
        session = signed_in(self.broker)
        key = session.account_key
        self.assertTrue(key.startswith("acct_"))
        self.assertTrue(session.current)
        accounts = self.broker.accounts(CLIENT)
        self.assertEqual([a.account_key for a in accounts], [key])
        self.assertEqual(self.broker.use(CLIENT, key).account_key, key)
        self.assertEqual(self.broker.session(CLIENT, account=key).account.email, EMAIL)
        self.assertEqual(self.broker.wait(CLIENT, 5, account=key).account_key, key)
        self.assertEqual(self.broker.request(CLIENT, "GET", "/api/me", account=key).json()["email"], EMAIL)
        with self.assertRaises(AccountUnknownError):
            self.broker.session(CLIENT, account="acct_" + "A" * 22)
        with self.assertRaises(AccountUnknownError):
            self.broker.use(CLIENT, "acct_" + "A" * 22)

    def test_request_get_and_post(self):
        signed_in(self.broker)
        me = self.broker.request(CLIENT, "GET", "/api/me")
        self.assertEqual(me.status, 200)
        self.assertTrue(me.headers["content-type"].startswith("application/json"))
        self.assertEqual(me.json()["email"], EMAIL)
        self.assertIn(EMAIL, me.text)
        note = self.broker.request(CLIENT, "POST", "/api/notes", json={"text": "from python"}, timeout=30)
        self.assertEqual(note.status, 201)
        self.assertEqual(note.json()["text"], "from python")
        notes = self.broker.request(CLIENT, "GET", "/api/notes")
        self.assertEqual(notes.status, 200)
        self.assertIn("from python", notes.text)

    def test_events_of_a_sign_out_and_a_sign_in(self):
        signed_in(self.broker)
        with self.broker.events([CLIENT]) as events:
            self.broker.sign_out(CLIENT)
            seen = collect(events, lambda e: isinstance(e, SessionChanged) and e.session.status == "signedOut")
            self.assertEqual(seen[-1].session.client, CLIENT)
            attempt = self.broker.start(CLIENT)
            seen = collect(events, lambda e: isinstance(e, SessionChanged) and e.session.status == "signedIn")
        self.assertEqual(seen[-1].session.account.email, EMAIL)
        states = [e.attempt.state for e in seen
                  if isinstance(e, LoginChanged) and e.attempt.attempt_id == attempt.attempt_id]
        self.assertIn("completed", states)
        self.assertEqual(list(events), [], "a closed stream ends the iteration")

    def test_events_without_clients_cover_every_client(self):
        signed_in(self.broker)
        with self.broker.events() as events:
            self.broker.sign_out(CLIENT)
            seen = collect(events, lambda e: isinstance(e, SessionChanged) and e.session.status == "signedOut")
        self.assertEqual(seen[-1].session.client, CLIENT)

    def test_attempts_filtered_by_state(self):
        self.broker.sign_out(CLIENT)
        attempt = self.broker.start(CLIENT, open_browser=False)
        try:
            waiting = self.broker.attempts(CLIENT, states=["waiting"])
            self.assertEqual([a.attempt_id for a in waiting], [attempt.attempt_id])
            self.assertIsNone(waiting[0].authorize_url, "only start and resume carry the link")
        finally:
            self.broker.cancel(attempt.attempt_id)
        self.assertEqual(self.broker.attempts(CLIENT, states=["waiting"]), [])

    def test_sign_out_then_not_signed_in_and_wait_timeout(self):
        signed_in(self.broker)
        session = self.broker.sign_out(CLIENT)
        self.assertEqual(session.status, "signedOut")
        self.assertEqual(self.broker.session(CLIENT).status, "signedOut")
        with self.assertRaises(NotSignedInError) as caught:
            self.broker.request(CLIENT, "GET", "/api/me")
        self.assertEqual(caught.exception.code, "NOT_SIGNED_IN")
        with self.assertRaises(WaitTimeoutError) as caught:
            self.broker.wait(CLIENT, 0.3)
        self.assertEqual(caught.exception.code, "WAIT_TIMEOUT")

    def test_start_cancel_and_the_attempt_errors(self):
        self.broker.sign_out(CLIENT)
        attempt = self.broker.start(CLIENT, open_browser=False)
        self.assertEqual(attempt.state, "waiting")
        self.assertTrue(attempt.authorize_url)
        self.assertNotIn(attempt.authorize_url, repr(attempt))
        self.assertEqual(self.broker.resume(attempt.attempt_id, open_browser=False).attempt_id, attempt.attempt_id)
        cancelled = self.broker.cancel(attempt.attempt_id)
        self.assertEqual(cancelled.state, "cancelled")
        self.assertTrue(cancelled.final)
        self.assertEqual(self.broker.acknowledge(attempt.attempt_id).state, "acknowledged")
        with self.assertRaises(browser_login.AttemptUnknownError) as caught:
            self.broker.status("at_doesNotExist0000")
        self.assertEqual(caught.exception.code, "ATTEMPT_UNKNOWN")

    def test_already_signed_in(self):
        signed_in(self.broker)
        with self.assertRaises(browser_login.AlreadySignedInError):
            self.broker.start(CLIENT)

    def test_client_errors(self):
        with self.assertRaises(ClientUnknownError) as caught:
            self.broker.session("com.example.no-such-client")
        self.assertEqual(caught.exception.code, "CLIENT_UNKNOWN")
        self.assertTrue(caught.exception.message)
        with self.assertRaises(ClientForbiddenError) as caught:
            self.broker.session(BOUND_CLIENT)
        self.assertEqual(caught.exception.code, "CLIENT_FORBIDDEN")

    def test_protocol_errors(self):
        with self.assertRaises(ProtocolError) as caught:
            self.broker.call("session.get", client=CLIENT, unknownParam=1)
        self.assertEqual((caught.exception.code, caught.exception.rpc_code), ("INVALID_PARAMS", -32602))
        with self.assertRaises(ProtocolError) as caught:
            self.broker.call("no.such.method")
        self.assertEqual(caught.exception.code, "METHOD_NOT_FOUND")
        with self.assertRaises(ProtocolError) as caught:
            self.broker.request(CLIENT, "GET", "relative/path")
        self.assertEqual(caught.exception.code, "INVALID_PARAMS")

    def test_a_refused_callback_does_not_echo_its_secrets(self):
        with self.assertRaises(browser_login.BrowserLoginError) as caught:
            self.broker.finish("https://elsewhere.example/cb?code=SECRET-CODE-123&state=SECRET-STATE-456")
        self.assertIn(caught.exception.code, {"CALLBACK_MISMATCH", "CALLBACK_INVALID"})
        for text in (str(caught.exception), repr(caught.exception)):
            self.assertNotIn("SECRET", text)

    def test_broker_not_running(self):
        with tempfile.TemporaryDirectory() as directory:
            missing = os.path.join(directory, "missing.sock")
            with self.assertRaises(BrokerNotRunningError) as caught:
                Broker(missing)
            self.assertEqual(caught.exception.code, "BROKER_NOT_RUNNING")
            self.assertIn("browser-login-broker", caught.exception.message)
            stale = os.path.join(directory, "stale.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(stale)  # bound, never listening: refused, like a socket a dead broker left
            try:
                with self.assertRaises(BrokerNotRunningError):
                    Broker(stale)
            finally:
                listener.close()

    def test_a_long_wait_holds_up_no_other_call(self):
        self.broker.sign_out(CLIENT)
        outcome = []

        def wait():
            try:
                self.broker.wait(CLIENT, 3)
            except WaitTimeoutError as error:
                outcome.append((time.monotonic(), error))

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        results = []
        threads = [threading.Thread(target=lambda: results.append(self.broker.session(CLIENT))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        others_done = time.monotonic()
        self.assertEqual(len(results), 8)
        waiter.join(10)
        self.assertEqual(len(outcome), 1)
        self.assertLess(others_done, outcome[0][0])

    def test_close_fails_the_calls_in_flight(self):
        broker = Broker()
        broker.sign_out(CLIENT)
        errors = []

        def wait():
            try:
                broker.wait(CLIENT, 30)
            except browser_login.BrowserLoginError as error:
                errors.append(error)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        broker.close()
        waiter.join(5)
        self.assertFalse(waiter.is_alive())
        self.assertIsInstance(errors[0], ConnectionLostError)
        with self.assertRaises(ConnectionLostError):
            broker.info()

    def test_a_lost_connection_is_replaced_by_the_next_call(self):
        self.broker.info()
        self.broker._connection._sock.shutdown(socket.SHUT_RDWR)  # as if the broker had closed it
        time.sleep(0.1)
        self.assertEqual(self.broker.info().protocol, 1)


if __name__ == "__main__":
    unittest.main()
