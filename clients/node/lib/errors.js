"use strict";
// The errors a Broker call rejects with. Every one is a BrowserLoginError with
// a stable string `code`: branch on the class or on `code`, never on
// `message`. The broker's messages say what to do next and are safe to show.

/** The base class: a stable `code`, a message safe to show, and `data`. */
class BrowserLoginError extends Error {
  constructor(code, message, data = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    // The broker's `data`: `code`, and where they apply `attemptId`,
    // `serverCode`, `providerError`, `retryAfterSeconds`. Never a secret.
    this.data = data ?? {};
  }
}

/** The broker answered a JSON-RPC level error (-32700 … -32603): a bug in the call. */
class ProtocolError extends BrowserLoginError {
  constructor(rpcCode, message, data = {}) {
    super(PROTOCOL_CODES[rpcCode] ?? "PROTOCOL_ERROR", message, data);
    /** The JSON-RPC error code, e.g. -32602 for invalid params. */
    this.rpcCode = rpcCode;
  }
}

const PROTOCOL_CODES = {
  [-32700]: "PARSE_ERROR",
  [-32600]: "INVALID_REQUEST",
  [-32601]: "METHOD_NOT_FOUND",
  [-32602]: "INVALID_PARAMS",
  [-32603]: "INTERNAL_ERROR",
};

/** No broker answers on the socket: it is missing, or nobody listens on it. */
class BrokerNotRunningError extends BrowserLoginError {
  constructor(message, data = {}) {
    super("BROKER_NOT_RUNNING", message, data);
  }
}

/** The connection closed before the call was answered; the next call reconnects. */
class ConnectionLostError extends BrowserLoginError {
  constructor(message = "the connection to the broker was lost before it answered; call again", data = {}) {
    super("CONNECTION_LOST", message, data);
  }
}

// One subclass per `data.code` of the broker's error table (docs/rpc.md),
// named after it: CLIENT_UNKNOWN → ClientUnknownError, SERVER_ERROR → ServerError.
const BROKER_CODES = [
  "CLIENT_UNKNOWN",
  "CLIENT_FORBIDDEN",
  "ALREADY_SIGNED_IN",
  "ATTEMPT_UNKNOWN",
  "ATTEMPT_EXPIRED",
  "ATTEMPT_NOT_WAITING",
  "CALLBACK_INVALID",
  "CALLBACK_MISMATCH",
  "ISSUER_MISMATCH",
  "ACCESS_DENIED",
  "EXCHANGE_UNCERTAIN",
  "ACK_NOT_RECONCILED",
  "SERVER_UNREACHABLE",
  "SERVER_PROTOCOL_ERROR",
  "SERVER_ERROR",
  "VAULT_UNAVAILABLE",
  "VAULT_LOCKED",
  "BROWSER_FAILED",
  "EPHEMERAL_UNSUPPORTED",
  "WAIT_TIMEOUT",
  "NOT_SIGNED_IN",
  "PROVIDER_UNREACHABLE",
  "PROVIDER_ERROR",
  "ID_TOKEN_INVALID",
  "DEVICE_FLOW_UNSUPPORTED",
  "DPOP_KEY_UNAVAILABLE",
  "PAR_FAILED",
  "RESPONSE_TOO_LARGE",
  "STORAGE_UNAVAILABLE",
  "BUSY",
  "ACCOUNT_UNKNOWN",
  "ACCOUNT_LIMIT",
];

function className(code) {
  const words = code.toLowerCase().split("_");
  const name = words.map((w) => w[0].toUpperCase() + w.slice(1)).join("");
  return name.endsWith("Error") ? name : name + "Error";
}

/** `{ CLIENT_UNKNOWN: ClientUnknownError, … }`: the class for each broker code. */
const errorClasses = {};
for (const code of BROKER_CODES) {
  const name = className(code);
  // A named class per code, so stack traces and `instanceof` both read well.
  const cls = {
    [name]: class extends BrowserLoginError {
      constructor(message, data = {}) {
        super(code, message, { ...data, code });
      }
    },
  }[name];
  cls.code = code;
  errorClasses[code] = cls;
}
Object.freeze(errorClasses);

/** The error for one JSON-RPC `error` member of a reply. */
function errorFromReply(error) {
  const message = typeof error?.message === "string" ? error.message : "the broker answered an error";
  const data = error?.data && typeof error.data === "object" ? error.data : {};
  if (error?.code === -32000) {
    const cls = errorClasses[data.code];
    if (cls) return new cls(message, data);
    // A code newer than this library: still a BrowserLoginError with its code.
    return new BrowserLoginError(typeof data.code === "string" ? data.code : "UNKNOWN_ERROR", message, data);
  }
  return new ProtocolError(typeof error?.code === "number" ? error.code : -32603, message, data);
}

const byName = {};
for (const cls of Object.values(errorClasses)) byName[cls.name] = cls;

module.exports = {
  BrowserLoginError,
  ProtocolError,
  BrokerNotRunningError,
  ConnectionLostError,
  ...byName,
  errorClasses,
  errorFromReply,
};
