"""The asyncio client: `AsyncBroker` and its `AsyncEventStream`, on asyncio
Unix streams. The calls, views and errors are `_core`'s, as for `Broker`."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, Iterable, List, Mapping, Optional, TypeVar, Union

from . import _core
from ._core import Call, Notification, Orphan, Plan, Reply
from ._errors import BrowserLoginError, ConnectionLostError, ProtocolError, fresh
from ._views import Attempt, Client, Event, Info, Response, Session

__all__ = ["AsyncBroker", "AsyncEventStream"]

T = TypeVar("T")

_UNSET: Any = object()

# A reply line may be large: an 8 MiB API answer, base64-encoded and escaped.
_LINE_LIMIT = 64 << 20


async def _open(path: str) -> "tuple[asyncio.StreamReader, asyncio.StreamWriter]":
    try:
        return await asyncio.open_unix_connection(path, limit=_LINE_LIMIT)
    except OSError as error:
        raise _core.not_running(path, error) from None


async def _readline(reader: asyncio.StreamReader) -> Optional[bytes]:
    """The next line without its newline; None at the end of the stream."""
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError):
        raise ProtocolError("the broker sent a reply over 64 MiB", code="INVALID_REPLY") from None
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    return line[:-1]


async def _shut(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, asyncio.CancelledError):
        pass


class _NotSent(Exception):
    def __init__(self, failure: BrowserLoginError):
        super().__init__(failure.message)
        self.failure = failure


class _Connection:
    """One stream shared by every task: a reader task hands each reply to the
    future waiting for its id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._send_lock = asyncio.Lock()
        self._pending: Dict[int, "asyncio.Future[Any]"] = {}
        self._next_id = 1
        self._failure: Optional[BrowserLoginError] = None
        self._closed = False
        self._task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, path: str) -> "_Connection":
        reader, writer = await _open(path)
        return cls(reader, writer)

    @property
    def alive(self) -> bool:
        return self._failure is None and not self._closed

    async def call(self, call: Call) -> Any:
        if self._failure is not None:
            raise _NotSent(self._failure)
        request_id = self._next_id
        self._next_id += 1
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            try:
                async with self._send_lock:
                    self._writer.write(_core.encode_request(request_id, call))
                    await self._writer.drain()
            except OSError:
                lost = ConnectionLostError("the connection to the broker closed before the call was sent")
                self._fail(lost)
                raise _NotSent(lost) from None
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def _read_loop(self) -> None:
        ending: BrowserLoginError = ConnectionLostError(
            "the broker closed the connection before it answered; the call may or may not have taken effect"
        )
        try:
            while True:
                line = await _readline(self._reader)
                if line is None:
                    break
                incoming = _core.decode_line(line)
                if isinstance(incoming, Reply):
                    future = self._pending.pop(incoming.id, None) if isinstance(incoming.id, int) else None
                    if future is not None and not future.done():
                        if incoming.error is not None:
                            future.set_exception(incoming.error)
                        else:
                            future.set_result(incoming.result)
                elif isinstance(incoming, Orphan):
                    ending = incoming.error
        except BrowserLoginError as error:
            ending = error
        except asyncio.CancelledError:
            pass
        except Exception:  # never leave a caller waiting for a reply that cannot come
            ending = ProtocolError("the broker's reply could not be read", code="INVALID_REPLY")
        if self._closed:
            ending = ConnectionLostError("the AsyncBroker was closed")
        self._fail(ending)

    def _fail(self, error: BrowserLoginError) -> None:
        if self._failure is None:
            self._failure = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(fresh(error))
        self._writer.close()

    async def close(self) -> None:
        self._closed = True
        await _shut(self._writer)
        try:
            await asyncio.wait_for(self._task, 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


class AsyncBroker:
    """The asyncio twin of `Broker`: the same methods, awaited.

    ``async with AsyncBroker() as broker:`` connects (a first call does too,
    when not used as a context manager); `await broker.close()` closes.
    Calls from many tasks run concurrently on one connection; a lost
    connection fails the calls in flight and the next call connects again.
    """

    def __init__(self, socket: Optional[str] = None):
        self.socket_path: str = _core.socket_path(socket)
        self._connection: Optional[_Connection] = None
        self._lock: Optional[asyncio.Lock] = None
        self._closed = False

    async def __aenter__(self) -> "AsyncBroker":
        await self._connected()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; calls still in flight raise `ConnectionLostError`."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _connected(self) -> _Connection:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._closed:
                raise ConnectionLostError("the AsyncBroker was closed")
            if self._connection is None or not self._connection.alive:
                old, self._connection = self._connection, None
                if old is not None:
                    await old.close()
                self._connection = await _Connection.open(self.socket_path)
            return self._connection

    async def _perform(self, call: Call) -> Any:
        try:
            return await (await self._connected()).call(call)
        except _NotSent:
            pass
        try:
            return await (await self._connected()).call(call)
        except _NotSent as not_sent:
            raise fresh(not_sent.failure) from None

    async def _run(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    result = call.decode(await self._perform(call))
                except BrowserLoginError as error:
                    call = plan.throw(error)
                else:
                    call = plan.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value

    async def call(self, method: str, **params: Any) -> Any:
        """Any RPC method by name, with its wire params; the raw result."""
        return await self._perform(Call(method, params, lambda result: result))

    async def info(self) -> Info:
        """`broker.info`: the version and the keyring's state."""
        return await self._run(_core.info())

    async def clients(self) -> List[Client]:
        """`clients.list`: the clients this program may use."""
        return await self._run(_core.clients())

    async def start(
        self, client: str, *, open_browser: bool = True, switch_account: bool = False, flow: Optional[str] = None,
        ephemeral: bool = False, activation_token: Optional[str] = None, add_account: bool = False,
        login_hint: Optional[str] = None,
    ) -> Attempt:
        """`login.start` (see `Broker.start`)."""
        return await self._run(_core.start(
            client, open_browser, switch_account, flow, ephemeral, activation_token, add_account, login_hint))

    async def resume(self, attempt_id: str, *, open_browser: bool = True,
                     activation_token: Optional[str] = None) -> Attempt:
        """`login.resume` (see `Broker.resume`)."""
        return await self._run(_core.resume(attempt_id, open_browser, activation_token))

    async def finish(self, url: str) -> Attempt:
        """`login.finish`: deliver a callback URL."""
        return await self._run(_core.finish(url))

    async def cancel(self, attempt_id: str) -> Attempt:
        """`login.cancel`."""
        return await self._run(_core.cancel(attempt_id))

    async def status(self, attempt_id: str, *, reconcile: bool = True) -> Attempt:
        """`login.status`."""
        return await self._run(_core.status(attempt_id, reconcile))

    async def acknowledge(self, attempt_id: str) -> Attempt:
        """`login.acknowledge`."""
        return await self._run(_core.acknowledge(attempt_id))

    async def attempts(self, client: Optional[str] = None, states: Optional[Iterable[str]] = None) -> List[Attempt]:
        """`login.list`: attempts, newest first."""
        return await self._run(_core.attempts(client, states))

    async def session(self, client: str, *, account: Optional[str] = None) -> Session:
        """`session.get`.
        With `account` (an `account_key`), that account's, not the current one's."""
        return await self._run(_core.session(client, account))

    async def accounts(self, client: str) -> List[Session]:
        """`session.list`: the client's accounts (an ``Accounts=multiple`` client
        holds up to 16), the current one first, then the most recently used."""
        return await self._run(_core.accounts(client))

    async def use(self, client: str, account: str) -> Session:
        """`session.use`: makes the account (an `account_key`) the client's current one."""
        return await self._run(_core.use(client, account))

    async def wait(self, client: str, timeout: float, *, account: Optional[str] = None) -> Session:
        """`session.wait` (see `Broker.wait`); `WaitTimeoutError` when `timeout` passes."""
        return await self._run(_core.wait(client, timeout, account=account))

    async def sign_out(self, client: str, *, account: Optional[str] = None) -> Session:
        """`session.signOut`."""
        return await self._run(_core.sign_out(client, account))

    async def request(
        self, client: str, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
        headers: Optional[Mapping[str, str]] = None, body: Union[str, bytes, None] = None, json: Any = _UNSET,
        timeout: Optional[float] = None, account: Optional[str] = None,
    ) -> Response:
        """`http.request` (see `Broker.request`)."""
        return await self._run(_core.request(
            client, method, path, query, headers, body, None if json is _UNSET else json, json is not _UNSET, timeout,
            account))

    def events(self, clients: Optional[Iterable[str]] = None) -> "AsyncEventStream":
        """An event stream on its own connection: ``async with broker.events()
        as events: async for event in events``. It subscribes on entering (or
        on the first event when not used as a context manager)."""
        return AsyncEventStream(self.socket_path, clients)


class AsyncEventStream:
    """`async for` typed events on a connection of its own.

    `await get(timeout)` raises `TimeoutError` when no event comes in time.
    Iteration ends after `close()`; a lost connection raises
    `ConnectionLostError`.
    """

    def __init__(self, socket_path: str, clients: Optional[Iterable[str]] = None):
        self._path = socket_path
        self._subscribe = _core.subscribe(clients)
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._backlog: List[Event] = []
        self._closed = False

    async def subscribe(self) -> None:
        """Connect and subscribe (done by ``async with`` and the first event)."""
        if self._reader is not None:
            return
        self._reader, self._writer = await _open(self._path)
        try:
            self._writer.write(_core.encode_request(1, self._subscribe))
            await self._writer.drain()
            while True:
                incoming = await self._read()
                if incoming is None:
                    raise ConnectionLostError("the broker closed the event connection")
                if isinstance(incoming, Reply) and incoming.id == 1:
                    if incoming.error is not None:
                        raise incoming.error
                    return
                if isinstance(incoming, Notification):
                    self._queue(incoming)
        except BaseException:
            await self.close()
            raise

    def _queue(self, notification: Notification) -> None:
        event = _core.event_of(notification)
        if event is not None:
            self._backlog.append(event)

    async def _read(self) -> Any:
        assert self._reader is not None
        line = await _readline(self._reader)
        if line is None:
            return None
        incoming = _core.decode_line(line)
        if isinstance(incoming, Orphan):
            raise incoming.error
        return incoming

    async def _next(self) -> Optional[Event]:
        if self._reader is None and not self._closed:
            await self.subscribe()
        while not self._backlog:
            if self._closed:
                return None
            incoming = await self._read()
            if incoming is None:
                if self._closed:
                    return None
                raise ConnectionLostError("the broker closed the event connection")
            if isinstance(incoming, Notification):
                self._queue(incoming)
        return self._backlog.pop(0)

    async def get(self, timeout: Optional[float] = None) -> Event:
        """The next event; `TimeoutError` if none comes within `timeout` seconds."""
        try:
            event = await asyncio.wait_for(self._next(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError("no event before the timeout") from None
        if event is None:
            raise ConnectionLostError("the event stream was closed")
        return event

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        event = await self._next()
        if event is None:
            raise StopAsyncIteration
        return event

    async def __aenter__(self) -> "AsyncEventStream":
        await self.subscribe()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """End the subscription by closing its connection."""
        self._closed = True
        if self._writer is not None:
            await _shut(self._writer)
