"""What the sync and the async client share: the socket path, the wire
format, and each method as a *plan*.

A plan is a generator that yields the RPC calls a method needs and gets each
call's decoded result back (or its error thrown in); its return value is the
method's result. `Broker` and `AsyncBroker` only carry the calls out, so a
method's logic (its params, its decoding, `wait`'s repeated calls) exists
once, with no I/O in it.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Iterable, List, Mapping, Optional, TypeVar, Union

from ._errors import BrokerNotRunningError, BrowserLoginError, ProtocolError, WaitTimeoutError, error_from_rpc
from ._views import (
    Attempt, Client, Event, Info, Response, Session, parse_attempt, parse_attempts, parse_clients, parse_event,
    parse_sessions,
    parse_info, parse_response, parse_session,
)

T = TypeVar("T")

#: The longest `session.wait` the broker takes in one call, in seconds.
MAX_WAIT_CALL = 300.0


def socket_path(socket: Optional[str] = None) -> str:
    """The broker's socket: `socket`, else ``$BROWSER_LOGIN_SOCKET`` when set
    and not empty, else ``$XDG_RUNTIME_DIR/browser-login/broker.sock`` (the
    rule the CLI and the daemon use)."""
    if socket:
        return os.fspath(socket)
    from_env = os.environ.get("BROWSER_LOGIN_SOCKET")
    if from_env:
        return from_env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        raise BrokerNotRunningError(
            "XDG_RUNTIME_DIR is not set, so the broker's socket cannot be found; "
            "set BROWSER_LOGIN_SOCKET or pass socket=PATH"
        )
    return os.path.join(runtime, "browser-login", "broker.sock")


def not_running(path: str, error: OSError) -> BrowserLoginError:
    """The error for a socket that could not be connected to."""
    if isinstance(error, (FileNotFoundError, ConnectionRefusedError, NotADirectoryError)):
        return BrokerNotRunningError(
            f"the broker is not running (no answer at {path}); start it with "
            "'systemctl --user start browser-login-broker.socket' or run 'browser-login-broker'"
        )
    reason = error.strerror or type(error).__name__
    return BrokerNotRunningError(f"cannot connect to the broker at {path}: {reason}")


@dataclass(frozen=True)
class Call:
    """One JSON-RPC call of a plan, and how to decode its result."""

    method: str
    # Out of repr: params may hold a callback URL or a request body.
    params: Dict[str, Any] = field(repr=False)
    decode: Callable[[Any], Any] = field(repr=False)


Plan = Generator[Call, Any, T]


def encode_request(request_id: int, call: Call) -> bytes:
    """One NDJSON line. `ensure_ascii` keeps the line free of raw newlines
    whatever the params hold."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": call.method, "params": call.params}
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


@dataclass(frozen=True)
class Reply:
    """The answer to the request `id`: `result`, or `error` to raise."""

    id: Any
    result: Any = None
    error: Optional[BrowserLoginError] = None


@dataclass(frozen=True)
class Notification:
    method: str
    params: Any


@dataclass(frozen=True)
class Orphan:
    """An error with ``"id": null``: the broker refused the connection or a
    message it could not read (`BUSY`, a message over 1 MiB), and closes it."""

    error: BrowserLoginError


Incoming = Union[Reply, Notification, Orphan, None]


def decode_line(line: bytes) -> Incoming:
    """Classify one line from the broker; None for what a client ignores
    (an empty line, a batch reply: this library sends no batches)."""
    if not line.strip():
        return None
    try:
        message = json.loads(line)
    except ValueError:
        raise ProtocolError("the broker sent a reply that is not JSON", code="INVALID_REPLY") from None
    if not isinstance(message, dict):
        return None
    if "method" in message and "id" not in message:
        method = message.get("method")
        return Notification(method, message.get("params")) if isinstance(method, str) else None
    request_id = message.get("id")
    if "error" in message:
        error = error_from_rpc(message["error"])
        return Orphan(error) if request_id is None else Reply(request_id, error=error)
    if "result" in message:
        return Reply(request_id, result=message["result"])
    return None


def event_of(notification: Notification) -> Optional[Event]:
    return parse_event(notification.method, notification.params)


# The plans, one per public method.


def _ms(seconds: float, name: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds != seconds or seconds < 0:
        raise ValueError(f"{name} must be a number of seconds, 0 or more")
    return int(round(seconds * 1000))


def info() -> Plan[Info]:
    result: Info = yield Call("broker.info", {}, parse_info)
    return result


def clients() -> Plan[List[Client]]:
    result: List[Client] = yield Call("clients.list", {}, parse_clients)
    return result


def start(client: str, open_browser: bool, switch_account: bool, flow: Optional[str], ephemeral: bool,
          activation_token: Optional[str] = None, add_account: bool = False,
          login_hint: Optional[str] = None) -> Plan[Attempt]:
    params: Dict[str, Any] = {"client": client, "openBrowser": open_browser, "switchAccount": switch_account,
                              "ephemeral": ephemeral}
    if add_account:
        params["addAccount"] = True
    if login_hint is not None:
        params["loginHint"] = login_hint
    if flow is not None:
        params["flow"] = flow
    if activation_token is not None:
        params["activationToken"] = activation_token
    result: Attempt = yield Call("login.start", params, parse_attempt)
    return result


def resume(attempt_id: str, open_browser: bool, activation_token: Optional[str] = None) -> Plan[Attempt]:
    params: Dict[str, Any] = {"attemptId": attempt_id, "openBrowser": open_browser}
    if activation_token is not None:
        params["activationToken"] = activation_token
    result: Attempt = yield Call("login.resume", params, parse_attempt)
    return result


def finish(url: str) -> Plan[Attempt]:
    result: Attempt = yield Call("login.finish", {"url": url}, parse_attempt)
    return result


def cancel(attempt_id: str) -> Plan[Attempt]:
    result: Attempt = yield Call("login.cancel", {"attemptId": attempt_id}, parse_attempt)
    return result


def status(attempt_id: str, reconcile: bool) -> Plan[Attempt]:
    result: Attempt = yield Call("login.status", {"attemptId": attempt_id, "reconcile": reconcile}, parse_attempt)
    return result


def acknowledge(attempt_id: str) -> Plan[Attempt]:
    result: Attempt = yield Call("login.acknowledge", {"attemptId": attempt_id}, parse_attempt)
    return result


def attempts(client: Optional[str], states: Optional[Iterable[str]]) -> Plan[List[Attempt]]:
    params: Dict[str, Any] = {}
    if client is not None:
        params["client"] = client
    if states is not None:
        if isinstance(states, str):
            raise TypeError("states is a list of states, not one string")
        params["states"] = list(states)
    result: List[Attempt] = yield Call("login.list", params, parse_attempts)
    return result


def _with_account(params: Dict[str, Any], account: Optional[str]) -> Dict[str, Any]:
    if account is not None:
        params["account"] = account
    return params


def session(client: str, account: Optional[str] = None) -> Plan[Session]:
    result: Session = yield Call("session.get", _with_account({"client": client}, account), parse_session)
    return result


def accounts(client: str) -> Plan[List[Session]]:
    """`session.list`: the client's accounts, the current one first."""
    result: List[Session] = yield Call("session.list", {"client": client}, parse_sessions)
    return result


def use(client: str, account: str) -> Plan[Session]:
    """`session.use`: makes the account current."""
    result: Session = yield Call("session.use", {"client": client, "account": account}, parse_session)
    return result


def wait(client: str, timeout: float, clock: Callable[[], float] = time.monotonic,
         account: Optional[str] = None) -> Plan[Session]:
    """`session.wait`, in calls of at most 300 s until `timeout` has passed."""
    _ms(timeout, "timeout")
    deadline = clock() + timeout
    calls = 0
    while True:
        remaining = max(0.0, deadline - clock())
        chunk = min(remaining, MAX_WAIT_CALL)
        calls += 1
        params = _with_account({"client": client, "timeoutMs": _ms(chunk, "timeout")}, account)
        try:
            result: Session = yield Call("session.wait", params, parse_session)
            return result
        except WaitTimeoutError as error:
            if deadline - clock() > 0.001:
                continue
            if calls == 1:
                raise
            # The broker's message names the last call's share of the wait.
            raise WaitTimeoutError(
                f"the client did not become signed in within {timeout:g} s; start a sign-in, or wait longer",
                data=error.data,
            ) from None


def sign_out(client: str, account: Optional[str] = None) -> Plan[Session]:
    result: Session = yield Call("session.signOut", _with_account({"client": client}, account), parse_session)
    return result


def request(
    client: str, method: str, path: str, query: Optional[Mapping[str, str]], headers: Optional[Mapping[str, str]],
    body: Union[str, bytes, bytearray, memoryview, None], json_body: Any, has_json: bool, timeout: Optional[float],
    account: Optional[str] = None,
) -> Plan[Response]:
    params: Dict[str, Any] = _with_account({"client": client, "method": method.upper(), "path": path}, account)
    if query is not None:
        params["query"] = dict(query)
    header_map = dict(headers) if headers is not None else {}
    if has_json:
        if body is not None:
            raise ValueError("pass body or json, not both")
        body = json.dumps(json_body, separators=(",", ":"))
        if not any(name.lower() == "content-type" for name in header_map):
            header_map["Content-Type"] = "application/json"
    if header_map:
        params["headers"] = header_map
    if isinstance(body, str):
        params["body"] = body
    elif isinstance(body, (bytes, bytearray, memoryview)):
        params["bodyBase64"] = base64.b64encode(bytes(body)).decode("ascii")
    elif body is not None:
        raise TypeError("body is str or bytes; use json= for other values")
    if timeout is not None:
        params["timeoutMs"] = _ms(timeout, "timeout")
    result: Response = yield Call("http.request", params, parse_response)
    return result


def subscribe(clients: Optional[Iterable[str]]) -> Call:
    """The `events.subscribe` call of an event stream."""
    params: Dict[str, Any] = {}
    if clients is not None:
        if isinstance(clients, str):
            raise TypeError("clients is a list of client ids, not one string")
        params["clients"] = list(clients)
    return Call("events.subscribe", params, lambda result: result)
