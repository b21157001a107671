"""The blocking client: `Broker` and its `EventStream`."""

from __future__ import annotations

import socket as _socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, TypeVar, Union

from . import _core
from ._core import Call, Notification, Orphan, Plan, Reply
from ._errors import BrowserLoginError, ConnectionLostError, ProtocolError, fresh
from ._views import Attempt, Client, Event, Info, Response, Session

__all__ = ["Broker", "EventStream"]

T = TypeVar("T")

_UNSET: Any = object()
_END: Any = object()
_MSG_NOSIGNAL = getattr(_socket, "MSG_NOSIGNAL", 0)


class _NotSent(Exception):
    """A call that never reached the broker, with the connection's failure."""

    def __init__(self, failure: BrowserLoginError):
        super().__init__(failure.message)
        self.failure = failure


def _run(plan: Plan[T], perform: Callable[[Call], Any]) -> T:
    """Carry a plan out with `perform(call) -> raw result`."""
    try:
        call = next(plan)
        while True:
            try:
                result = call.decode(perform(call))
            except BrowserLoginError as error:
                call = plan.throw(error)
            else:
                call = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


def _connect(path: str) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as error:
        sock.close()
        raise _core.not_running(path, error) from None
    return sock


class _LineReader:
    """Lines from a socket, keeping what is left over between reads (so a
    read that times out loses nothing)."""

    def __init__(self, sock: _socket.socket):
        self._sock = sock
        self._buffer = bytearray()
        self._scanned = 0

    def readline(self, deadline: Optional[float] = None) -> Optional[bytes]:
        """The next line without its newline; None at the end of the stream.
        Raises `TimeoutError` once `deadline` (a `time.monotonic()`) passes."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no event before the timeout")
                self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(1 << 16)
            except _socket.timeout:
                raise TimeoutError("no event before the timeout") from None
            finally:
                if deadline is not None:
                    self._sock.settimeout(None)
            if not chunk:
                return None
            self._buffer += chunk


class _Pending:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[BrowserLoginError] = None


class _Connection:
    """One socket shared by every thread: a reader thread hands each reply to
    the call waiting for its id, so a long `wait` holds up no other call."""

    def __init__(self, path: str):
        self._sock = _connect(path)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: Dict[int, _Pending] = {}
        self._next_id = 1
        self._failure: Optional[BrowserLoginError] = None
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="browser-login-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        with self._lock:
            return self._failure is None and not self._closed

    def call(self, call: Call) -> Any:
        """Send `call` and wait for its reply. Raises `_NotSent` when the call
        surely never reached the broker (so sending it again is safe)."""
        slot = _Pending()
        with self._lock:
            if self._failure is not None:
                raise _NotSent(self._failure)
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = slot
        data = _core.encode_request(request_id, call)
        try:
            with self._send_lock:
                self._sock.sendall(data, _MSG_NOSIGNAL)
        except OSError:
            lost = ConnectionLostError("the connection to the broker closed before the call was sent")
            self._fail(lost)
            raise _NotSent(lost) from None
        slot.done.wait()
        if slot.error is not None:
            raise fresh(slot.error)
        return slot.result

    def _read_loop(self) -> None:
        reader = _LineReader(self._sock)
        ending: BrowserLoginError = ConnectionLostError(
            "the broker closed the connection before it answered; the call may or may not have taken effect"
        )
        try:
            while True:
                line = reader.readline()
                if line is None:
                    break
                incoming = _core.decode_line(line)
                if isinstance(incoming, Reply):
                    with self._lock:
                        slot = self._pending.pop(incoming.id, None) if isinstance(incoming.id, int) else None
                    if slot is not None:
                        slot.result, slot.error = incoming.result, incoming.error
                        slot.done.set()
                elif isinstance(incoming, Orphan):
                    ending = incoming.error  # BUSY and the like: the answer of what is in flight
        except BrowserLoginError as error:
            ending = error
        except OSError:
            pass
        except Exception:  # never leave a caller waiting for a reply that cannot come
            ending = ProtocolError("the broker's reply could not be read", code="INVALID_REPLY")
        if self._closed:
            ending = ConnectionLostError("the Broker was closed")
        self._fail(ending)

    def _fail(self, error: BrowserLoginError) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            pending, self._pending = self._pending, {}
        for slot in pending.values():
            slot.error = error
            slot.done.set()
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(5)
        self._sock.close()


class Broker:
    """A connection to the broker: ``Broker()`` finds the socket by
    ``$BROWSER_LOGIN_SOCKET``, else ``$XDG_RUNTIME_DIR/browser-login/broker.sock``.

    Connects at once (`BrokerNotRunningError` if nothing answers). Safe to
    share between threads: calls run concurrently on one connection. If the
    connection is lost, calls in flight raise `ConnectionLostError` (or the
    broker's `BusyError`) and the next call connects again. Use it as a
    context manager, or call `close()`.
    """

    def __init__(self, socket: Optional[str] = None):
        self.socket_path: str = _core.socket_path(socket)
        self._lock = threading.Lock()
        self._closed = False
        self._connection: Optional[_Connection] = _Connection(self.socket_path)

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; calls still in flight raise `ConnectionLostError`."""
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _connected(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise ConnectionLostError("the Broker was closed")
            if self._connection is None or not self._connection.alive:
                if self._connection is not None:
                    self._connection.close()
                self._connection = None
                self._connection = _Connection(self.socket_path)
            return self._connection

    def _perform(self, call: Call) -> Any:
        # A connection the broker closed while idle (to make room for
        # another, or restarted) is replaced once, as docs/rpc.md advises;
        # only a call that surely never reached it is sent again.
        try:
            return self._connected().call(call)
        except _NotSent:
            pass
        try:
            return self._connected().call(call)
        except _NotSent as not_sent:
            raise fresh(not_sent.failure) from None

    def _run(self, plan: Plan[T]) -> T:
        return _run(plan, self._perform)

    def call(self, method: str, **params: Any) -> Any:
        """Any RPC method by name, with its wire params; the raw result."""
        return self._perform(Call(method, params, lambda result: result))

    # The API, in docs/rpc.md's order.

    def info(self) -> Info:
        """`broker.info`: the version and the keyring's state."""
        return self._run(_core.info())

    def clients(self) -> List[Client]:
        """`clients.list`: the clients this program may use."""
        return self._run(_core.clients())

    def start(
        self, client: str, *, open_browser: bool = True, switch_account: bool = False, flow: Optional[str] = None,
        ephemeral: bool = False, activation_token: Optional[str] = None, add_account: bool = False,
        login_hint: Optional[str] = None,
    ) -> Attempt:
        """`login.start`: begin a sign-in (opening the browser), or return the
        client's waiting attempt. `flow` is ``"browser"`` or ``"device"``.
        `activation_token` is the app's xdg-activation token (Wayland) or
        startup id (X11) from its toolkit: with it the browser window comes
        to the front. It is used for this launch only."""
        return self._run(_core.start(
            client, open_browser, switch_account, flow, ephemeral, activation_token, add_account, login_hint))

    def resume(self, attempt_id: str, *, open_browser: bool = True, activation_token: Optional[str] = None) -> Attempt:
        """`login.resume`: reopen the browser (or, with ``open_browser=False``,
        get the `authorize_url` to show as a link); `activation_token` as for `start`."""
        return self._run(_core.resume(attempt_id, open_browser, activation_token))

    def finish(self, url: str) -> Attempt:
        """`login.finish`: deliver a callback URL (what the URL handler does)."""
        return self._run(_core.finish(url))

    def cancel(self, attempt_id: str) -> Attempt:
        """`login.cancel`."""
        return self._run(_core.cancel(attempt_id))

    def status(self, attempt_id: str, *, reconcile: bool = True) -> Attempt:
        """`login.status`; with `reconcile`, asks the server too (`server_state`)."""
        return self._run(_core.status(attempt_id, reconcile))

    def acknowledge(self, attempt_id: str) -> Attempt:
        """`login.acknowledge`: retire a reconciled uncertain attempt."""
        return self._run(_core.acknowledge(attempt_id))

    def attempts(self, client: Optional[str] = None, states: Optional[Iterable[str]] = None) -> List[Attempt]:
        """`login.list`: attempts, newest first (at most 1000)."""
        return self._run(_core.attempts(client, states))

    def session(self, client: str, *, account: Optional[str] = None) -> Session:
        """`session.get`: the client's session (never a token).
        With `account` (an `account_key`), that account's, not the current one's."""
        return self._run(_core.session(client, account))

    def accounts(self, client: str) -> List[Session]:
        """`session.list`: the client's accounts (an ``Accounts=multiple`` client
        holds up to 16), the current one first, then the most recently used."""
        return self._run(_core.accounts(client))

    def use(self, client: str, account: str) -> Session:
        """`session.use`: makes the account (an `account_key`) the client's current one."""
        return self._run(_core.use(client, account))

    def wait(self, client: str, timeout: float, *, account: Optional[str] = None) -> Session:
        """`session.wait`: the session once signed in. `timeout` is in seconds
        and may exceed the broker's 300 s (it then waits in several calls);
        raises `WaitTimeoutError` when it passes."""
        return self._run(_core.wait(client, timeout, account=account))

    def sign_out(self, client: str, *, account: Optional[str] = None) -> Session:
        """`session.signOut`: signs out locally at once, revokes at the server."""
        return self._run(_core.sign_out(client, account))

    def request(
        self, client: str, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
        headers: Optional[Mapping[str, str]] = None, body: Union[str, bytes, None] = None, json: Any = _UNSET,
        timeout: Optional[float] = None, account: Optional[str] = None,
    ) -> Response:
        """`http.request`: call the client's API with its session; the broker
        adds the token. `body` is text or bytes; `json=` serialises a value and
        sets `Content-Type: application/json`. `timeout` in seconds (≤ 120)."""
        return self._run(_core.request(
            client, method, path, query, headers, body, None if json is _UNSET else json, json is not _UNSET, timeout,
            account))

    def events(self, clients: Optional[Iterable[str]] = None) -> "EventStream":
        """Subscribe, on a connection of its own, to `SessionChanged` and
        `LoginChanged` of `clients` (default: every client this program may
        use). The subscription is in place when this returns."""
        return EventStream(self.socket_path, clients)


class EventStream:
    """An iterator of typed events on its own connection; a context manager.

    ``for event in stream`` blocks for each event; `get(timeout)` raises
    `TimeoutError` when none comes in time. Iteration ends after `close()`;
    a lost connection raises `ConnectionLostError`.
    """

    def __init__(self, socket_path: str, clients: Optional[Iterable[str]] = None):
        subscribe = _core.subscribe(clients)
        self._sock = _connect(socket_path)
        self._reader = _LineReader(self._sock)
        self._closed = False
        self._backlog: List[Event] = []
        try:
            self._sock.sendall(_core.encode_request(1, subscribe), _MSG_NOSIGNAL)
            while True:
                incoming = self._read(None)
                if incoming is _END:
                    raise ConnectionLostError("the broker closed the event connection")
                if isinstance(incoming, Reply) and incoming.id == 1:
                    if incoming.error is not None:
                        raise incoming.error
                    break
                if isinstance(incoming, Notification):
                    self._queue(incoming)
        except BaseException:
            self._sock.close()
            raise

    def _queue(self, notification: Notification) -> None:
        event = _core.event_of(notification)
        if event is not None:
            self._backlog.append(event)

    def _read(self, deadline: Optional[float]) -> Any:
        try:
            line = self._reader.readline(deadline)
        except TimeoutError:
            raise
        except OSError:
            line = None
        if line is None:
            if self._closed:
                return _END
            raise ConnectionLostError("the broker closed the event connection")
        incoming = _core.decode_line(line)
        if isinstance(incoming, Orphan):
            raise incoming.error
        return incoming

    def _next(self, deadline: Optional[float]) -> Optional[Event]:
        while not self._backlog:
            if self._closed:
                return None
            incoming = self._read(deadline)
            if incoming is _END:
                return None
            if isinstance(incoming, Notification):
                self._queue(incoming)
        return self._backlog.pop(0)

    def get(self, timeout: Optional[float] = None) -> Event:
        """The next event; `TimeoutError` if none comes within `timeout` seconds."""
        event = self._next(None if timeout is None else time.monotonic() + timeout)
        if event is None:
            raise ConnectionLostError("the event stream was closed")
        return event

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self._next(None)
        if event is None:
            raise StopIteration
        return event

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the subscription (closing its connection ends it at the broker)."""
        self._closed = True
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
