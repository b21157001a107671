"""The broker's public views (docs/rpc.md "Public views") as frozen dataclasses.

Member names are the snake_case of the wire names; timestamps are aware UTC
`datetime`s; states are the wire's strings (typed as `Literal`s), so a state
a newer broker adds still reads. Members this library does not know are
ignored, so a newer broker's additions never break an older app.
"""

from __future__ import annotations

import base64
import binascii
import json as _json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Union

from ._errors import ProtocolError

__all__ = [
    "SessionStatus",
    "AttemptState",
    "FINAL_STATES",
    "Account",
    "Session",
    "AttemptError",
    "Receipt",
    "Device",
    "Attempt",
    "Client",
    "Info",
    "Response",
    "SessionChanged",
    "LoginChanged",
    "Event",
]

#: `Session.status`. ``"signingIn"`` means an attempt is in progress.
SessionStatus = Literal["signedOut", "signingIn", "signedIn", "expired", "revoked"]

#: `Attempt.state`.
AttemptState = Literal[
    "starting", "waiting", "exchanging", "completed", "uncertain",
    "cancelled", "expired", "denied", "failed", "acknowledged",
]

#: The states no attempt leaves (but by `acknowledge`).
FINAL_STATES = frozenset({"cancelled", "expired", "denied", "failed", "acknowledged"})


@dataclass(frozen=True)
class Account:
    """The signed-in account."""

    user_id: str
    email: str
    display_name: str


@dataclass(frozen=True)
class Session:
    """The public session of one client. Never holds a token.

    `reason` carries the server's code when the session ended from outside
    (``AUTH_USER_DISABLED``: show "contact your administrator";
    ``SESSION_REVOKED``, ``SESSION_EXPIRED``). `revoked_at_server` is set only
    by `sign_out`: False when the provider cannot be told (its own sign-out
    page ends the browser session there).
    """

    client: str
    status: SessionStatus
    account: Optional[Account] = None
    auth_method: Optional[str] = None
    authenticated_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    reason: Optional[str] = None
    revoked_at_server: Optional[bool] = None
    #: The account (docs/rpc.md "Several accounts per client"): opaque and
    #: stable; pass it as ``account=``. None for a client never signed in.
    account_key: Optional[str] = None
    #: Whether this is the client's current account.
    current: bool = True

    @property
    def signed_in(self) -> bool:
        return self.status == "signedIn"


@dataclass(frozen=True)
class AttemptError:
    """Why an attempt ended in a refusal: `code` is an error code of the table."""

    code: str
    message: str
    server_code: Optional[str] = None


@dataclass(frozen=True)
class Receipt:
    """Set once an attempt issued a session."""

    issued_at: datetime
    session_expires_at: Optional[datetime] = None


@dataclass(frozen=True)
class Device:
    """What the user needs for a device sign-in (RFC 8628): show "open
    `verification_uri` and enter `user_code`". `interval` is the seconds
    between the broker's polls."""

    user_code: str
    verification_uri: str
    verification_uri_complete: Optional[str]
    interval: int


@dataclass(frozen=True)
class Attempt:
    """One sign-in attempt. `attempt_id` is the broker's own id.

    `authorize_url` comes only from `start` and `resume` (while waiting): an
    "open this link" fallback. Treat it as private: it is left out of
    `repr()`, so logging an attempt does not log it. `session` comes only
    from `finish` once completed, `server_state` only from `status` with
    reconcile, `device` only for a waiting device sign-in.
    """

    attempt_id: str
    client: str
    state: AttemptState
    created_at: datetime
    expires_at: Optional[datetime]
    updated_at: datetime
    error: Optional[AttemptError] = None
    receipt: Optional[Receipt] = None
    reconciled: bool = True
    authorize_url: Optional[str] = field(default=None, repr=False)
    session: Optional[Session] = None
    server_state: Optional[str] = None
    device: Optional[Device] = None

    @property
    def final(self) -> bool:
        """Whether the attempt is over (cancelled, expired, denied, failed, acknowledged)."""
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class Client:
    """A configured client (`clients()`). `protocol` is ``"browser-login"``,
    ``"oidc"`` or ``"oauth2"``; `server` the login server or the issuer's
    origin; `return_url` the redirect as configured."""

    id: str
    app_name: str
    protocol: str
    server: str
    return_url: str
    policy: Optional[str] = None


@dataclass(frozen=True)
class Info:
    """`info()`: the broker's version and the keyring's state."""

    version: str
    protocol: int
    socket: Optional[str]
    #: "secret-service", or "file" (Vault=file in the broker's broker.conf).
    vault: str
    vault_available: bool
    vault_locked: bool
    vault_detail: Optional[str] = None


@dataclass(frozen=True)
class Response:
    """An answer of the app's API through `request`.

    `headers` has lower-case names (repeated headers joined with ``", "``;
    no `Set-Cookie`). `body` is the raw bytes, however the broker sent them.
    """

    status: int
    headers: Dict[str, str]
    body: bytes = field(repr=False)

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body decoded with the content type's charset (UTF-8 by default)."""
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = part.strip().partition("=")
            if name.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (`json.JSONDecodeError` if it is not)."""
        return _json.loads(self.body)


@dataclass(frozen=True)
class SessionChanged:
    """A `session.changed` notification."""

    session: Session


@dataclass(frozen=True)
class LoginChanged:
    """A `login.changed` notification."""

    attempt: Attempt


Event = Union[SessionChanged, LoginChanged]


# Parsing. A reply that lacks a member the view needs is a ProtocolError
# ("INVALID_REPLY"); members this library does not know are ignored.


def _bad(what: str) -> ProtocolError:
    return ProtocolError(f"the broker sent a malformed {what}", code="INVALID_REPLY")


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _bad(what)
    return value


def _str(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _bad(what)
    return value


def _opt_str(obj: Mapping[str, Any], key: str) -> Optional[str]:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def _opt_bool(obj: Mapping[str, Any], key: str) -> Optional[bool]:
    value = obj.get(key)
    return value if isinstance(value, bool) else None


def parse_time(value: Any, what: str) -> datetime:
    """An RFC 3339 UTC timestamp (``2026-12-01T10:00:00.000Z``)."""
    if not isinstance(value, str):
        raise _bad(what)
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise _bad(what) from None


def _opt_time(obj: Mapping[str, Any], key: str, what: str) -> Optional[datetime]:
    value = obj.get(key)
    return None if value is None else parse_time(value, what)


def parse_session(value: Any) -> Session:
    o = _obj(value, "session")
    account = o.get("account")
    if account is not None:
        a = _obj(account, "account")
        account = Account(
            user_id=_str(a, "userId", "account"), email=_str(a, "email", "account"),
            display_name=_opt_str(a, "displayName") or "",
        )
    return Session(
        client=_str(o, "client", "session"), status=_str(o, "status", "session"),  # type: ignore[arg-type]
        account=account, auth_method=_opt_str(o, "authMethod"),
        authenticated_at=_opt_time(o, "authenticatedAt", "session"),
        expires_at=_opt_time(o, "expiresAt", "session"), reason=_opt_str(o, "reason"),
        revoked_at_server=_opt_bool(o, "revokedAtServer"), account_key=_opt_str(o, "accountKey"),
        current=_opt_bool(o, "current") is not False,
    )


def parse_sessions(value: Any) -> List[Session]:
    if not isinstance(value, list):
        raise _bad("session list")
    return [parse_session(item) for item in value]


def parse_attempt(value: Any) -> Attempt:
    o = _obj(value, "attempt")
    error = o.get("error")
    if error is not None:
        e = _obj(error, "attempt error")
        error = AttemptError(
            code=_str(e, "code", "attempt error"), message=_opt_str(e, "message") or "",
            server_code=_opt_str(e, "serverCode"),
        )
    receipt = o.get("receipt")
    if receipt is not None:
        r = _obj(receipt, "receipt")
        receipt = Receipt(
            issued_at=parse_time(r.get("issuedAt"), "receipt"),
            session_expires_at=_opt_time(r, "sessionExpiresAt", "receipt"),
        )
    device = o.get("device")
    if device is not None:
        d = _obj(device, "device")
        interval = d.get("interval")
        device = Device(
            user_code=_str(d, "userCode", "device"), verification_uri=_str(d, "verificationUri", "device"),
            verification_uri_complete=_opt_str(d, "verificationUriComplete"),
            interval=interval if isinstance(interval, int) and not isinstance(interval, bool) else 5,
        )
    session = o.get("session")
    reconciled = _opt_bool(o, "reconciled")
    return Attempt(
        attempt_id=_str(o, "attemptId", "attempt"), client=_str(o, "client", "attempt"),
        state=_str(o, "state", "attempt"),  # type: ignore[arg-type]
        created_at=parse_time(o.get("createdAt"), "attempt"), expires_at=_opt_time(o, "expiresAt", "attempt"),
        updated_at=parse_time(o.get("updatedAt"), "attempt"), error=error, receipt=receipt,
        reconciled=True if reconciled is None else reconciled, authorize_url=_opt_str(o, "authorizeUrl"),
        session=None if session is None else parse_session(session),
        server_state=_opt_str(o, "serverState"), device=device,
    )


def parse_attempts(value: Any) -> List[Attempt]:
    if not isinstance(value, list):
        raise _bad("attempt list")
    return [parse_attempt(item) for item in value]


def parse_client(value: Any) -> Client:
    o = _obj(value, "client")
    return Client(
        id=_str(o, "id", "client"), app_name=_opt_str(o, "appName") or "",
        protocol=_opt_str(o, "protocol") or "browser-login", server=_opt_str(o, "server") or "",
        return_url=_opt_str(o, "returnUrl") or "", policy=_opt_str(o, "policy"),
    )


def parse_clients(value: Any) -> List[Client]:
    if not isinstance(value, list):
        raise _bad("client list")
    return [parse_client(item) for item in value]


def parse_info(value: Any) -> Info:
    o = _obj(value, "broker info")
    protocol = o.get("protocol")
    return Info(
        version=_str(o, "version", "broker info"),
        protocol=protocol if isinstance(protocol, int) and not isinstance(protocol, bool) else 0,
        socket=_opt_str(o, "socket"), vault=_opt_str(o, "vault") or "",
        vault_available=bool(o.get("vaultAvailable")), vault_locked=bool(o.get("vaultLocked")),
        vault_detail=_opt_str(o, "vaultDetail"),
    )


def parse_response(value: Any) -> Response:
    o = _obj(value, "http response")
    status = o.get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        raise _bad("http response")
    raw_headers = o.get("headers") or {}
    headers = {str(k).lower(): str(v) for k, v in _obj(raw_headers, "http response").items()}
    if isinstance(o.get("bodyBase64"), str):
        try:
            body = base64.b64decode(o["bodyBase64"], validate=True)
        except (binascii.Error, ValueError):
            raise _bad("http response") from None
    elif isinstance(o.get("body"), str):
        body = o["body"].encode("utf-8")
    else:
        body = b""
    return Response(status=status, headers=headers, body=body)


def parse_event(method: Any, params: Any) -> Optional[Event]:
    """The typed event of a notification, or None for one this library does not know."""
    if method == "session.changed":
        return SessionChanged(parse_session(_obj(params, "notification").get("session")))
    if method == "login.changed":
        return LoginChanged(parse_attempt(_obj(params, "notification").get("attempt")))
    return None
