"""The errors of the broker's API, one class per `data.code`.

The broker answers an application error with JSON-RPC code -32000 and a
stable `data.code`; code branches on the class (or on `.code`), never on the
message. The message says what to do next and is safe to show: the broker
never puts a secret in it, and this library adds none (no request body, no
URL, no token).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "BrowserLoginError",
    "ProtocolError",
    "BrokerNotRunningError",
    "ConnectionLostError",
    "ClientUnknownError",
    "ClientForbiddenError",
    "AlreadySignedInError",
    "AttemptUnknownError",
    "AttemptExpiredError",
    "AttemptNotWaitingError",
    "CallbackInvalidError",
    "CallbackMismatchError",
    "IssuerMismatchError",
    "AccessDeniedError",
    "ExchangeUncertainError",
    "AckNotReconciledError",
    "ServerUnreachableError",
    "ServerProtocolError",
    "ServerError",
    "VaultUnavailableError",
    "VaultLockedError",
    "BrowserFailedError",
    "EphemeralUnsupportedError",
    "WaitTimeoutError",
    "NotSignedInError",
    "ProviderUnreachableError",
    "ProviderError",
    "IdTokenInvalidError",
    "DeviceFlowUnsupportedError",
    "DpopKeyUnavailableError",
    "ParFailedError",
    "ResponseTooLargeError",
    "StorageUnavailableError",
    "BusyError",
    "AccountUnknownError",
    "AccountLimitError",
    "ERROR_CLASSES",
]


class BrowserLoginError(Exception):
    """Every error this library raises.

    `code` is the broker's `data.code` (for example ``"NOT_SIGNED_IN"``), or
    one of this library's own: ``"BROKER_NOT_RUNNING"``, ``"CONNECTION_LOST"``,
    or a JSON-RPC error name for a `ProtocolError`. `message` is safe to show.
    `data` is the error's `data` object as sent (it may carry `attemptId`,
    `serverCode`, `providerError`, `retryAfterSeconds`).
    """

    code: str = "UNKNOWN"

    def __init__(self, message: str, *, code: Optional[str] = None, data: Optional[Mapping[str, Any]] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.data: Dict[str, Any] = dict(data or {})

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    @property
    def attempt_id(self) -> Optional[str]:
        """The broker's id of the attempt concerned, when there is one."""
        return _string(self.data.get("attemptId"))

    @property
    def server_code(self) -> Optional[str]:
        """The login server's own code (`SERVER_ERROR`), e.g. ``"AUTH_USER_DISABLED"``."""
        return _string(self.data.get("serverCode"))

    @property
    def provider_error(self) -> Optional[str]:
        """A standard provider's OAuth `error` (`PROVIDER_ERROR`), e.g. ``"invalid_client"``."""
        return _string(self.data.get("providerError"))

    @property
    def retry_after_seconds(self) -> Optional[int]:
        """How long to wait before trying again, when the broker says."""
        value = self.data.get("retryAfterSeconds")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _string(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


class ProtocolError(BrowserLoginError):
    """A JSON-RPC level error: the call itself was wrong (invalid params, an
    unknown method, a message over 1 MiB) or the broker's reply could not be
    read. `code` is the JSON-RPC error's name (``"INVALID_PARAMS"``,
    ``"METHOD_NOT_FOUND"``, ``"INVALID_REQUEST"``, ``"PARSE_ERROR"``,
    ``"INTERNAL_ERROR"``, ``"INVALID_REPLY"``) and `rpc_code` its number."""

    code = "INVALID_REQUEST"

    def __init__(
        self, message: str, *, code: Optional[str] = None, data: Optional[Mapping[str, Any]] = None,
        rpc_code: Optional[int] = None,
    ):
        super().__init__(message, code=code, data=data)
        self.rpc_code = rpc_code


class BrokerNotRunningError(BrowserLoginError):
    """Nothing answers at the socket (missing, or refused: a stale socket)."""

    code = "BROKER_NOT_RUNNING"


class ConnectionLostError(BrowserLoginError):
    """The connection closed before the reply came. The call may or may not
    have taken effect; the next call connects again."""

    code = "CONNECTION_LOST"


# One class per row of docs/rpc.md's error table, in its order. The
# docstrings restate what the app does.


class ClientUnknownError(BrowserLoginError):
    """No such client is configured: check the client id, install the client file."""

    code = "CLIENT_UNKNOWN"


class ClientForbiddenError(BrowserLoginError):
    """This program is not in the client's `Peers=`."""

    code = "CLIENT_FORBIDDEN"


class AlreadySignedInError(BrowserLoginError):
    """`start` on a signed-in client: pass ``switch_account=True`` or sign out first."""

    code = "ALREADY_SIGNED_IN"


class AttemptUnknownError(BrowserLoginError):
    """No such attempt (or a callback for none): start again."""

    code = "ATTEMPT_UNKNOWN"


class AttemptExpiredError(BrowserLoginError):
    """The attempt's time ran out: start again."""

    code = "ATTEMPT_EXPIRED"


class AttemptNotWaitingError(BrowserLoginError):
    """The attempt is not waiting for a callback: show its state."""

    code = "ATTEMPT_NOT_WAITING"


class CallbackInvalidError(BrowserLoginError):
    """The callback URL is malformed (or an unconfirmed error callback); nothing changed."""

    code = "CALLBACK_INVALID"


class CallbackMismatchError(BrowserLoginError):
    """The callback is not the return URL of its attempt; nothing changed."""

    code = "CALLBACK_MISMATCH"


class IssuerMismatchError(BrowserLoginError):
    """`iss` or the provider's metadata names another issuer; fix `Issuer=`."""

    code = "ISSUER_MISMATCH"


class AccessDeniedError(BrowserLoginError):
    """The user declined on the login page: show "sign-in cancelled"."""

    code = "ACCESS_DENIED"


class ExchangeUncertainError(BrowserLoginError):
    """The exchange got no definite answer; the broker reconciles it. Watch
    `LoginChanged`, or call `status`."""

    code = "EXCHANGE_UNCERTAIN"


class AckNotReconciledError(BrowserLoginError):
    """`acknowledge` of an attempt not reconciled yet: try later."""

    code = "ACK_NOT_RECONCILED"


class ServerUnreachableError(BrowserLoginError):
    """The login server or the API could not be reached: retry later."""

    code = "SERVER_UNREACHABLE"


class ServerProtocolError(BrowserLoginError):
    """The server broke the protocol: report to the server's operator."""

    code = "SERVER_PROTOCOL_ERROR"


class ServerError(BrowserLoginError):
    """The server refused; branch on `server_code` (``AUTH_USER_DISABLED``:
    "contact your admin")."""

    code = "SERVER_ERROR"


class VaultUnavailableError(BrowserLoginError):
    """No Secret Service (keyring) on the session bus; the message says how to start one."""

    code = "VAULT_UNAVAILABLE"


class VaultLockedError(BrowserLoginError):
    """The keyring is locked: ask the user to unlock it."""

    code = "VAULT_LOCKED"


class BrowserFailedError(BrowserLoginError):
    """The browser could not be opened; the attempt stays waiting. Show its
    `authorize_url` (``resume(attempt_id, open_browser=False)``) as a link."""

    code = "BROWSER_FAILED"


class EphemeralUnsupportedError(BrowserLoginError):
    """``ephemeral=True`` but the client has no `PrivateBrowser=`."""

    code = "EPHEMERAL_UNSUPPORTED"


class WaitTimeoutError(BrowserLoginError):
    """`wait` timed out before the client was signed in."""

    code = "WAIT_TIMEOUT"


class NotSignedInError(BrowserLoginError):
    """`request` without a session: start a sign-in."""

    code = "NOT_SIGNED_IN"


class ProviderUnreachableError(BrowserLoginError):
    """A standard provider's endpoint could not be reached: retry later; check
    the network and `Issuer=`."""

    code = "PROVIDER_UNREACHABLE"


class ProviderError(BrowserLoginError):
    """A standard provider refused; branch on `provider_error`."""

    code = "PROVIDER_ERROR"


class IdTokenInvalidError(BrowserLoginError):
    """An OpenID Connect ID token failed validation; the message says which check."""

    code = "ID_TOKEN_INVALID"


class DeviceFlowUnsupportedError(BrowserLoginError):
    """``flow="device"`` for a client whose provider has no device endpoint."""

    code = "DEVICE_FLOW_UNSUPPORTED"


class DpopKeyUnavailableError(BrowserLoginError):
    """The session's DPoP key is gone from the vault: sign in again."""

    code = "DPOP_KEY_UNAVAILABLE"


class ParFailedError(BrowserLoginError):
    """The provider refused the pushed authorization request; nothing was opened."""

    code = "PAR_FAILED"


class ResponseTooLargeError(BrowserLoginError):
    """The API's answer is over 8 MiB: page the request."""

    code = "RESPONSE_TOO_LARGE"


class StorageUnavailableError(BrowserLoginError):
    """The broker's state directory cannot be written; the message names it."""

    code = "STORAGE_UNAVAILABLE"


class BusyError(BrowserLoginError):
    """One of the broker's limits is used up: close unused connections, try
    again shortly."""

    code = "BUSY"


class AccountUnknownError(BrowserLoginError):
    """An `account` that is not one of this client's accounts: list them with `accounts`."""

    code = "ACCOUNT_UNKNOWN"


class AccountLimitError(BrowserLoginError):
    """``add_account`` on a client that holds 16 accounts: sign one out first."""

    code = "ACCOUNT_LIMIT"


#: The class for each `data.code` of docs/rpc.md's error table.
ERROR_CLASSES: Mapping[str, Type[BrowserLoginError]] = {
    cls.code: cls
    for cls in (
        ClientUnknownError, ClientForbiddenError, AlreadySignedInError, AttemptUnknownError,
        AttemptExpiredError, AttemptNotWaitingError, CallbackInvalidError, CallbackMismatchError,
        IssuerMismatchError, AccessDeniedError, ExchangeUncertainError, AckNotReconciledError,
        ServerUnreachableError, ServerProtocolError, ServerError, VaultUnavailableError,
        VaultLockedError, BrowserFailedError, EphemeralUnsupportedError, WaitTimeoutError,
        NotSignedInError, ProviderUnreachableError, ProviderError, IdTokenInvalidError,
        DeviceFlowUnsupportedError, DpopKeyUnavailableError, ParFailedError, ResponseTooLargeError,
        StorageUnavailableError, BusyError, AccountUnknownError, AccountLimitError,
    )
}

_RPC_NAMES = {
    -32700: "PARSE_ERROR",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
}


def fresh(error: BrowserLoginError) -> BrowserLoginError:
    """A copy of `error` to raise once more: one failure of a connection is
    the answer of every call in flight, and raising one instance again and
    again would pile their tracebacks onto it."""
    clone = copy.copy(error)
    clone.__traceback__ = None
    return clone


def error_from_rpc(error: Any) -> BrowserLoginError:
    """The exception for a JSON-RPC `error` object."""
    if not isinstance(error, dict):
        return ProtocolError("the broker sent a malformed error", code="INVALID_REPLY")
    rpc_code = error.get("code")
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = "the broker reported an error without a message"
    raw_data = error.get("data")
    data: Dict[str, Any] = raw_data if isinstance(raw_data, dict) else {}
    app_code = data.get("code")
    if rpc_code == -32000 and isinstance(app_code, str):
        cls = ERROR_CLASSES.get(app_code)
        if cls is None:
            # A code newer than this library: still a BrowserLoginError with its code.
            return BrowserLoginError(message, code=app_code, data=data)
        return cls(message, data=data)
    number = rpc_code if isinstance(rpc_code, int) and not isinstance(rpc_code, bool) else None
    name = _RPC_NAMES.get(number, f"JSON_RPC_{number}") if number is not None else "INVALID_REPLY"
    return ProtocolError(message, code=name, data=data, rpc_code=number)
