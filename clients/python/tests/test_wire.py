"""The connection handling a real broker shows only under load, played by a
small scripted server on a Unix socket: replies out of order, notifications
on a call connection, a reply of several MiB, and the `BUSY` line with a null
id that comes before the broker closes a connection."""

import asyncio
import base64
import json
import os
import socket
import tempfile
import threading
import unittest

from browser_login import AsyncBroker, Broker, BusyError


class ScriptedServer:
    """Accepts connections; `script(connection, requests)` answers each one.
    `requests` yields the parsed requests of that connection."""

    def __init__(self, script):
        self.directory = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.directory.name, "broker.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        self.script = script
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._run, args=(connection,), daemon=True).start()

    def _run(self, connection):
        reader = connection.makefile("rb")

        def requests():
            for line in reader:
                yield json.loads(line)

        try:
            self.script(connection, requests())
        except OSError:
            pass
        finally:
            connection.close()

    def close(self):
        self.listener.close()
        self.directory.cleanup()


def send(connection, message):
    connection.sendall(json.dumps(message).encode() + b"\n")


def reply(request, result):
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


SESSION = {"client": "c", "status": "signedOut", "account": None, "authMethod": None,
           "authenticatedAt": None, "expiresAt": None, "reason": None}


def out_of_order(connection, requests):
    """Holds the first two requests, then answers the second first, with a
    notification and a large answer in between; then echoes."""
    first, second = next(requests), next(requests)
    send(connection, {"jsonrpc": "2.0", "method": "session.changed", "params": {"session": SESSION}})
    big = base64.b64encode(os.urandom(6 << 20)).decode()
    for request in (second, first):
        if request["method"] == "http.request":
            send(connection, reply(request, {"status": 200, "headers": {"Content-Type": "x/y"}, "bodyBase64": big}))
        else:
            send(connection, reply(request, dict(SESSION, client=request["params"]["client"])))
    for request in requests:
        send(connection, reply(request, dict(SESSION, client=request["params"]["client"])))


def busy_then_close(connection, requests):
    """The first connection: BUSY with a null id, then closed. Later ones answer."""
    if busy_then_close.first:
        busy_then_close.first = False
        next(requests)
        send(connection, {"jsonrpc": "2.0", "id": None,
                          "error": {"code": -32000, "message": "the broker is busy", "data": {"code": "BUSY"}}})
        return
    for request in requests:
        send(connection, reply(request, dict(SESSION, client=request["params"]["client"])))


class SyncWireTests(unittest.TestCase):
    def test_replies_out_of_order_reach_their_callers(self):
        server = ScriptedServer(out_of_order)
        self.addCleanup(server.close)
        with Broker(server.path) as broker:
            results = {}
            threads = [
                threading.Thread(target=lambda: results.__setitem__("session", broker.session("a"))),
                threading.Thread(target=lambda: results.__setitem__("http", broker.request("a", "GET", "/big"))),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            self.assertEqual(results["session"].client, "a")
            self.assertEqual(len(results["http"].body), 6 << 20)
            self.assertEqual(broker.session("b").client, "b")

    def test_busy_fails_the_call_in_flight_and_the_next_call_reconnects(self):
        busy_then_close.first = True
        server = ScriptedServer(busy_then_close)
        self.addCleanup(server.close)
        with Broker(server.path) as broker:
            with self.assertRaises(BusyError) as caught:
                broker.session("a")
            self.assertEqual(caught.exception.message, "the broker is busy")
            self.assertEqual(broker.session("b").client, "b")
        self.assertEqual(server.connections, 2)


class AsyncWireTests(unittest.IsolatedAsyncioTestCase):
    async def test_replies_out_of_order_reach_their_callers(self):
        server = ScriptedServer(out_of_order)
        self.addCleanup(server.close)
        async with AsyncBroker(server.path) as broker:
            session, response = await asyncio.gather(broker.session("a"), broker.request("a", "GET", "/big"))
            self.assertEqual(session.client, "a")
            self.assertEqual(len(response.body), 6 << 20)
            self.assertEqual((await broker.session("b")).client, "b")

    async def test_busy_fails_the_call_in_flight_and_the_next_call_reconnects(self):
        busy_then_close.first = True
        server = ScriptedServer(busy_then_close)
        self.addCleanup(server.close)
        async with AsyncBroker(server.path) as broker:
            with self.assertRaises(BusyError):
                await broker.session("a")
            self.assertEqual((await broker.session("b")).client, "b")
        self.assertEqual(server.connections, 2)


if __name__ == "__main__":
    unittest.main()
