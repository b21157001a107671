// Type declarations for browser-login, a client of the browser-login broker's
// JSON-RPC API (docs/rpc.md). Every value here is public state: no token,
// code or callback URL ever reaches the app.

/// <reference types="node" />
import { EventEmitter } from "node:events";

// ---- Views ----------------------------------------------------------------

export type SessionStatus = "signedOut" | "signingIn" | "signedIn" | "expired" | "revoked";

export interface Account {
  userId: string;
  email: string | null;
  displayName: string | null;
}

/** A client's session. Every member is present (null when it does not apply); times are RFC 3339 UTC. */
export interface Session {
  client: string;
  status: SessionStatus;
  account: Account | null;
  authMethod: string | null;
  authenticatedAt: string | null;
  expiresAt: string | null;
  /** Why a session ended from outside: `AUTH_USER_DISABLED`, `SESSION_REVOKED`, `SESSION_EXPIRED`. */
  reason: string | null;
  /** Only from signOut(): false when the provider could not be told. */
  revokedAtServer?: boolean;
  /** The account (opaque, stable; pass it as `account`); null for a client never signed in. */
  accountKey: string | null;
  /** Whether this is the client's current account. */
  current: boolean;
}

export type AttemptState =
  | "starting"
  | "waiting"
  | "exchanging"
  | "completed"
  | "uncertain"
  | "cancelled"
  | "expired"
  | "denied"
  | "failed"
  | "acknowledged";

export interface AttemptError {
  code: string;
  message: string;
  serverCode?: string | null;
}

export interface Receipt {
  issuedAt: string;
  sessionExpiresAt: string;
}

/** What the user needs to sign in on another device (flow "device"). */
export interface DeviceAuthorization {
  userCode: string;
  verificationUri: string;
  verificationUriComplete?: string | null;
  interval: number;
}

/** A sign-in attempt. `attemptId` is the broker's own id. */
export interface Attempt {
  attemptId: string;
  client: string;
  state: AttemptState;
  createdAt: string;
  expiresAt: string;
  updatedAt: string;
  error: AttemptError | null;
  receipt: Receipt | null;
  /** False only for an `uncertain` attempt the broker has not settled with the server yet. */
  reconciled: boolean;
  /** Only from start() and resume(): the login page, for an "open this link" fallback. Treat as private. */
  authorizeUrl?: string;
  /** Only for a waiting device sign-in. */
  device?: DeviceAuthorization;
  /** Only from finish(), once completed. */
  session?: Session;
  /** Only from status() with reconcile. */
  serverState?: string;
}

export interface BrokerInfo {
  version: string;
  protocol: number;
  socket: string;
  /** "secret-service", or "file" (Vault=file in the broker's broker.conf). */
  vault: "secret-service" | "file" | string;
  vaultAvailable: boolean;
  vaultLocked: boolean;
  vaultDetail: string | null;
}

export interface ClientInfo {
  id: string;
  appName: string;
  protocol: "browser-login" | "oidc" | "oauth2";
  server: string;
  returnUrl: string;
  policy: string;
}

// ---- Options --------------------------------------------------------------

export interface BrokerOptions {
  /** The broker's socket; default: defaultSocketPath(). */
  socket?: string;
}

export interface StartOptions {
  /** Open the system browser (default true). */
  openBrowser?: boolean;
  /** Sign the current session out first (default false). */
  switchAccount?: boolean;
  /** Sign one more account in, the signed-in ones staying (an `Accounts=multiple` client; default false). */
  addAccount?: boolean;
  /** The email address the sign-in page fills in. */
  loginHint?: string;
  /** "browser" (the default) or "device". */
  flow?: "browser" | "device";
  /** Use the client's PrivateBrowser= (default false). */
  ephemeral?: boolean;
  /**
   * The app's xdg-activation token (Wayland) or startup id (X11), from its toolkit (in Electron, for example, what
   * the launching compositor gave the app): the browser gets it as XDG_ACTIVATION_TOKEN and DESKTOP_STARTUP_ID, so
   * its window comes to the front. 1 to 256 visible ASCII characters; used for this launch only.
   */
  activationToken?: string;
}

export interface WaitOptions {
  /** Ends the wait early; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Wait for this account (an accountKey) rather than the current one (wait() only). */
  account?: string;
}

/** Names one of the client's accounts (an accountKey); without it, the current account. */
export interface AccountOption {
  account?: string;
}

export type HttpMethod = "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE";

export interface RequestOptions {
  /** Send as this account (an accountKey) rather than the current one. */
  account?: string;
  /** Query parameters; the broker encodes them. */
  query?: Record<string, string>;
  /** Request headers; Authorization, Cookie, Host and hop-by-hop headers are refused. */
  headers?: Record<string, string>;
  /** The body: a string is sent as text, bytes as they are. At most 1 MiB. */
  body?: string | Uint8Array | ArrayBuffer;
  /** A value sent as JSON (Content-Type application/json unless headers name one). */
  json?: unknown;
  /** The broker's timeout for the API call (default 30000, at most 120000). */
  timeoutMs?: number;
}

// ---- The client -----------------------------------------------------------

/** $BROWSER_LOGIN_SOCKET when set and not empty, else $XDG_RUNTIME_DIR/browser-login/broker.sock, else null. */
export function defaultSocketPath(env?: Record<string, string | undefined>): string | null;

/** An answer of the app's API. Set-Cookie is stripped; header names are lower case. */
export class HttpResponse {
  private constructor();
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
  /** True for a 2xx status. */
  readonly ok: boolean;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON. */
  json<T = any>(): T;
}

/**
 * The broker's API. One connection for calls (connected on the first call,
 * replies matched by id, so a long wait() holds up nothing), one more for
 * events once subscribe() is called.
 *
 * Events: 'session.changed' (Session), 'login.changed' (Attempt),
 * 'disconnected' (ConnectionLostError or BusyError: the events connection
 * closed; subscribe() again).
 */
export class Broker extends EventEmitter {
  constructor(options?: BrokerOptions);
  /** The socket this Broker talks to. */
  readonly socketPath: string | null;

  /** Any method of docs/rpc.md with named params. */
  call<T = any>(method: string, params?: Record<string, unknown>, options?: WaitOptions): Promise<T>;
  info(): Promise<BrokerInfo>;
  clients(): Promise<ClientInfo[]>;
  start(client: string, options?: StartOptions): Promise<Attempt>;
  resume(attemptId: string, options?: { openBrowser?: boolean; activationToken?: string }): Promise<Attempt>;
  finish(url: string): Promise<Attempt>;
  cancel(attemptId: string): Promise<Attempt>;
  status(attemptId: string, options?: { reconcile?: boolean }): Promise<Attempt>;
  acknowledge(attemptId: string): Promise<Attempt>;
  attempts(options?: { client?: string; states?: AttemptState[] }): Promise<Attempt[]>;
  session(client: string, options?: AccountOption): Promise<Session>;
  /** session.list: the client's accounts, the current one first, then the most recently used. */
  accounts(client: string): Promise<Session[]>;
  /** session.use: makes the account (an accountKey) current. */
  use(client: string, account: string): Promise<Session>;
  /** Resolves once signedIn; rejects WaitTimeoutError after timeoutMs (default 5000; Infinity: no limit). */
  wait(client: string, timeoutMs?: number, options?: WaitOptions): Promise<Session>;
  signOut(client: string, options?: AccountOption): Promise<Session>;
  request(client: string, method: HttpMethod, path: string, options?: RequestOptions): Promise<HttpResponse>;

  /** Subscribes (replacing any earlier subscription); resolves with the subscription id. */
  subscribe(options?: { clients?: string[] }): Promise<string>;
  /** Ends the subscription and closes the events connection. */
  unsubscribe(): Promise<void>;
  /** Closes both connections; calls in flight reject with ConnectionLostError. */
  close(): void;

  on(event: "session.changed", listener: (session: Session) => void): this;
  on(event: "login.changed", listener: (attempt: Attempt) => void): this;
  on(event: "disconnected", listener: (error: BrowserLoginError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: "session.changed", listener: (session: Session) => void): this;
  once(event: "login.changed", listener: (attempt: Attempt) => void): this;
  once(event: "disconnected", listener: (error: BrowserLoginError) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
  off(event: "session.changed", listener: (session: Session) => void): this;
  off(event: "login.changed", listener: (attempt: Attempt) => void): this;
  off(event: "disconnected", listener: (error: BrowserLoginError) => void): this;
  off(event: string | symbol, listener: (...args: any[]) => void): this;
}

// ---- Errors ---------------------------------------------------------------

/** What the broker's `data` may carry besides `code`. Never a secret. */
export interface ErrorData {
  code?: string;
  attemptId?: string;
  serverCode?: string;
  providerError?: string;
  retryAfterSeconds?: number;
  [key: string]: unknown;
}

/** Every error a Broker call rejects with. Branch on the class or `code`, never on `message`. */
export class BrowserLoginError extends Error {
  constructor(code: string, message: string, data?: ErrorData);
  /** A stable code: the broker's `data.code`, or one of this library's. */
  readonly code: string;
  readonly data: ErrorData;
}

/** A JSON-RPC level error (a bug in the call): `code` names `rpcCode`. */
export class ProtocolError extends BrowserLoginError {
  constructor(rpcCode: number, message: string, data?: ErrorData);
  readonly code: "PARSE_ERROR" | "INVALID_REQUEST" | "METHOD_NOT_FOUND" | "INVALID_PARAMS" | "INTERNAL_ERROR" | "PROTOCOL_ERROR";
  /** -32700, -32600, -32601, -32602 or -32603. */
  readonly rpcCode: number;
}

/** No broker at the socket (missing, refused, another user's); the message says how to start it. */
export class BrokerNotRunningError extends BrowserLoginError {
  constructor(message: string, data?: ErrorData);
  readonly code: "BROKER_NOT_RUNNING";
}

/** The connection closed before the answer; the next call reconnects. */
export class ConnectionLostError extends BrowserLoginError {
  constructor(message?: string, data?: ErrorData);
  readonly code: "CONNECTION_LOST";
}

/** `CLIENT_UNKNOWN`: No such client is configured: check the client id, or install its client file. */
export class ClientUnknownError extends BrowserLoginError {
  static readonly code: "CLIENT_UNKNOWN";
  readonly code: "CLIENT_UNKNOWN";
  constructor(message: string, data?: ErrorData);
}

/** `CLIENT_FORBIDDEN`: This program is not in the client file's `Peers=`. */
export class ClientForbiddenError extends BrowserLoginError {
  static readonly code: "CLIENT_FORBIDDEN";
  readonly code: "CLIENT_FORBIDDEN";
  constructor(message: string, data?: ErrorData);
}

/** `ALREADY_SIGNED_IN`: start() on a signed-in client: pass `switchAccount: true`, or sign out first. */
export class AlreadySignedInError extends BrowserLoginError {
  static readonly code: "ALREADY_SIGNED_IN";
  readonly code: "ALREADY_SIGNED_IN";
  constructor(message: string, data?: ErrorData);
}

/** `ATTEMPT_UNKNOWN`: No such attempt: start again. */
export class AttemptUnknownError extends BrowserLoginError {
  static readonly code: "ATTEMPT_UNKNOWN";
  readonly code: "ATTEMPT_UNKNOWN";
  constructor(message: string, data?: ErrorData);
}

/** `ATTEMPT_EXPIRED`: The attempt's time ran out: start again. */
export class AttemptExpiredError extends BrowserLoginError {
  static readonly code: "ATTEMPT_EXPIRED";
  readonly code: "ATTEMPT_EXPIRED";
  constructor(message: string, data?: ErrorData);
}

/** `ATTEMPT_NOT_WAITING`: The attempt is not waiting for a callback: show its state. */
export class AttemptNotWaitingError extends BrowserLoginError {
  static readonly code: "ATTEMPT_NOT_WAITING";
  readonly code: "ATTEMPT_NOT_WAITING";
  constructor(message: string, data?: ErrorData);
}

/** `CALLBACK_INVALID`: The callback URL is malformed (or an error callback the server did not confirm); nothing changed. */
export class CallbackInvalidError extends BrowserLoginError {
  static readonly code: "CALLBACK_INVALID";
  readonly code: "CALLBACK_INVALID";
  constructor(message: string, data?: ErrorData);
}

/** `CALLBACK_MISMATCH`: The callback is not the return URL of its attempt; nothing changed. */
export class CallbackMismatchError extends BrowserLoginError {
  static readonly code: "CALLBACK_MISMATCH";
  readonly code: "CALLBACK_MISMATCH";
  constructor(message: string, data?: ErrorData);
}

/** `ISSUER_MISMATCH`: `iss` is not the client's login server or provider issuer; nothing changed. */
export class IssuerMismatchError extends BrowserLoginError {
  static readonly code: "ISSUER_MISMATCH";
  readonly code: "ISSUER_MISMATCH";
  constructor(message: string, data?: ErrorData);
}

/** `ACCESS_DENIED`: The user declined on the login page: show "sign-in cancelled". */
export class AccessDeniedError extends BrowserLoginError {
  static readonly code: "ACCESS_DENIED";
  readonly code: "ACCESS_DENIED";
  constructor(message: string, data?: ErrorData);
}

/** `EXCHANGE_UNCERTAIN`: The exchange got no definite answer; the broker reconciles it (watch 'login.changed'). */
export class ExchangeUncertainError extends BrowserLoginError {
  static readonly code: "EXCHANGE_UNCERTAIN";
  readonly code: "EXCHANGE_UNCERTAIN";
  constructor(message: string, data?: ErrorData);
}

/** `ACK_NOT_RECONCILED`: acknowledge() of an attempt not reconciled yet: try later. */
export class AckNotReconciledError extends BrowserLoginError {
  static readonly code: "ACK_NOT_RECONCILED";
  readonly code: "ACK_NOT_RECONCILED";
  constructor(message: string, data?: ErrorData);
}

/** `SERVER_UNREACHABLE`: The login server or the API could not be reached: retry later. */
export class ServerUnreachableError extends BrowserLoginError {
  static readonly code: "SERVER_UNREACHABLE";
  readonly code: "SERVER_UNREACHABLE";
  constructor(message: string, data?: ErrorData);
}

/** `SERVER_PROTOCOL_ERROR`: The server broke the protocol: report to its operator. */
export class ServerProtocolError extends BrowserLoginError {
  static readonly code: "SERVER_PROTOCOL_ERROR";
  readonly code: "SERVER_PROTOCOL_ERROR";
  constructor(message: string, data?: ErrorData);
}

/** `SERVER_ERROR`: The server refused, with `data.serverCode` (e.g. `AUTH_USER_DISABLED`). */
export class ServerError extends BrowserLoginError {
  static readonly code: "SERVER_ERROR";
  readonly code: "SERVER_ERROR";
  constructor(message: string, data?: ErrorData);
}

/** `VAULT_UNAVAILABLE`: No Secret Service (keyring) on the session bus; the message says how to start one. */
export class VaultUnavailableError extends BrowserLoginError {
  static readonly code: "VAULT_UNAVAILABLE";
  readonly code: "VAULT_UNAVAILABLE";
  constructor(message: string, data?: ErrorData);
}

/** `VAULT_LOCKED`: The keyring is locked: ask the user to unlock it. */
export class VaultLockedError extends BrowserLoginError {
  static readonly code: "VAULT_LOCKED";
  readonly code: "VAULT_LOCKED";
  constructor(message: string, data?: ErrorData);
}

/** `BROWSER_FAILED`: The browser could not be opened; the attempt stays waiting (resume with `openBrowser: false` for its `authorizeUrl`). */
export class BrowserFailedError extends BrowserLoginError {
  static readonly code: "BROWSER_FAILED";
  readonly code: "BROWSER_FAILED";
  constructor(message: string, data?: ErrorData);
}

/** `EPHEMERAL_UNSUPPORTED`: `ephemeral: true` but the client has no `PrivateBrowser=`. */
export class EphemeralUnsupportedError extends BrowserLoginError {
  static readonly code: "EPHEMERAL_UNSUPPORTED";
  readonly code: "EPHEMERAL_UNSUPPORTED";
  constructor(message: string, data?: ErrorData);
}

/** `WAIT_TIMEOUT`: wait() timed out before the client was signed in. */
export class WaitTimeoutError extends BrowserLoginError {
  static readonly code: "WAIT_TIMEOUT";
  readonly code: "WAIT_TIMEOUT";
  constructor(message: string, data?: ErrorData);
}

/** `NOT_SIGNED_IN`: request() without a session: start a sign-in. */
export class NotSignedInError extends BrowserLoginError {
  static readonly code: "NOT_SIGNED_IN";
  readonly code: "NOT_SIGNED_IN";
  constructor(message: string, data?: ErrorData);
}

/** `PROVIDER_UNREACHABLE`: A standard provider's endpoint could not be reached: retry later. */
export class ProviderUnreachableError extends BrowserLoginError {
  static readonly code: "PROVIDER_UNREACHABLE";
  readonly code: "PROVIDER_UNREACHABLE";
  constructor(message: string, data?: ErrorData);
}

/** `PROVIDER_ERROR`: A standard provider refused, with its OAuth `error` in `data.providerError`. */
export class ProviderError extends BrowserLoginError {
  static readonly code: "PROVIDER_ERROR";
  readonly code: "PROVIDER_ERROR";
  constructor(message: string, data?: ErrorData);
}

/** `ID_TOKEN_INVALID`: An OpenID Connect ID token failed validation; the message says which check. */
export class IdTokenInvalidError extends BrowserLoginError {
  static readonly code: "ID_TOKEN_INVALID";
  readonly code: "ID_TOKEN_INVALID";
  constructor(message: string, data?: ErrorData);
}

/** `DEVICE_FLOW_UNSUPPORTED`: `flow: "device"` for a client whose provider has no device endpoint. */
export class DeviceFlowUnsupportedError extends BrowserLoginError {
  static readonly code: "DEVICE_FLOW_UNSUPPORTED";
  readonly code: "DEVICE_FLOW_UNSUPPORTED";
  constructor(message: string, data?: ErrorData);
}

/** `DPOP_KEY_UNAVAILABLE`: the session's DPoP key is gone from the vault: sign in again. */
export class DpopKeyUnavailableError extends BrowserLoginError {
  static readonly code: "DPOP_KEY_UNAVAILABLE";
  readonly code: "DPOP_KEY_UNAVAILABLE";
  constructor(message: string, data?: ErrorData);
}

/** `PAR_FAILED`: the provider refused the pushed authorization request; nothing was opened. */
export class ParFailedError extends BrowserLoginError {
  static readonly code: "PAR_FAILED";
  readonly code: "PAR_FAILED";
  constructor(message: string, data?: ErrorData);
}

/** `RESPONSE_TOO_LARGE`: The API's answer is over 8 MiB: page the request. */
export class ResponseTooLargeError extends BrowserLoginError {
  static readonly code: "RESPONSE_TOO_LARGE";
  readonly code: "RESPONSE_TOO_LARGE";
  constructor(message: string, data?: ErrorData);
}

/** `STORAGE_UNAVAILABLE`: The broker's state directory cannot be written; it carries on by itself. */
export class StorageUnavailableError extends BrowserLoginError {
  static readonly code: "STORAGE_UNAVAILABLE";
  readonly code: "STORAGE_UNAVAILABLE";
  constructor(message: string, data?: ErrorData);
}

/** `BUSY`: A broker limit is used up (connections, unread replies, subscriptions): try again shortly. */
export class BusyError extends BrowserLoginError {
  static readonly code: "BUSY";
  readonly code: "BUSY";
  constructor(message: string, data?: ErrorData);
}

/** `ACCOUNT_UNKNOWN`: an `account` that is not one of the client's accounts: list them with accounts(). */
export class AccountUnknownError extends BrowserLoginError {
  static readonly code: "ACCOUNT_UNKNOWN";
  readonly code: "ACCOUNT_UNKNOWN";
  constructor(message: string, data?: ErrorData);
}

/** `ACCOUNT_LIMIT`: start() with addAccount on a client that holds 16 accounts: sign one out first. */
export class AccountLimitError extends BrowserLoginError {
  static readonly code: "ACCOUNT_LIMIT";
  readonly code: "ACCOUNT_LIMIT";
  constructor(message: string, data?: ErrorData);
}

/** The error class of each broker code, e.g. `errorClasses.NOT_SIGNED_IN === NotSignedInError`. */
export const errorClasses: {
  readonly CLIENT_UNKNOWN: typeof ClientUnknownError;
  readonly CLIENT_FORBIDDEN: typeof ClientForbiddenError;
  readonly ALREADY_SIGNED_IN: typeof AlreadySignedInError;
  readonly ATTEMPT_UNKNOWN: typeof AttemptUnknownError;
  readonly ATTEMPT_EXPIRED: typeof AttemptExpiredError;
  readonly ATTEMPT_NOT_WAITING: typeof AttemptNotWaitingError;
  readonly CALLBACK_INVALID: typeof CallbackInvalidError;
  readonly CALLBACK_MISMATCH: typeof CallbackMismatchError;
  readonly ISSUER_MISMATCH: typeof IssuerMismatchError;
  readonly ACCESS_DENIED: typeof AccessDeniedError;
  readonly EXCHANGE_UNCERTAIN: typeof ExchangeUncertainError;
  readonly ACK_NOT_RECONCILED: typeof AckNotReconciledError;
  readonly SERVER_UNREACHABLE: typeof ServerUnreachableError;
  readonly SERVER_PROTOCOL_ERROR: typeof ServerProtocolError;
  readonly SERVER_ERROR: typeof ServerError;
  readonly VAULT_UNAVAILABLE: typeof VaultUnavailableError;
  readonly VAULT_LOCKED: typeof VaultLockedError;
  readonly BROWSER_FAILED: typeof BrowserFailedError;
  readonly EPHEMERAL_UNSUPPORTED: typeof EphemeralUnsupportedError;
  readonly WAIT_TIMEOUT: typeof WaitTimeoutError;
  readonly NOT_SIGNED_IN: typeof NotSignedInError;
  readonly PROVIDER_UNREACHABLE: typeof ProviderUnreachableError;
  readonly PROVIDER_ERROR: typeof ProviderError;
  readonly ID_TOKEN_INVALID: typeof IdTokenInvalidError;
  readonly DEVICE_FLOW_UNSUPPORTED: typeof DeviceFlowUnsupportedError;
  readonly DPOP_KEY_UNAVAILABLE: typeof DpopKeyUnavailableError;
  readonly PAR_FAILED: typeof ParFailedError;
  readonly RESPONSE_TOO_LARGE: typeof ResponseTooLargeError;
  readonly STORAGE_UNAVAILABLE: typeof StorageUnavailableError;
  readonly BUSY: typeof BusyError;
  readonly ACCOUNT_UNKNOWN: typeof AccountUnknownError;
  readonly ACCOUNT_LIMIT: typeof AccountLimitError;
};

/** The broker's error codes (`data.code`) of docs/rpc.md. */
export type BrokerErrorCode =
  | "CLIENT_UNKNOWN"
  | "CLIENT_FORBIDDEN"
  | "ALREADY_SIGNED_IN"
  | "ATTEMPT_UNKNOWN"
  | "ATTEMPT_EXPIRED"
  | "ATTEMPT_NOT_WAITING"
  | "CALLBACK_INVALID"
  | "CALLBACK_MISMATCH"
  | "ISSUER_MISMATCH"
  | "ACCESS_DENIED"
  | "EXCHANGE_UNCERTAIN"
  | "ACK_NOT_RECONCILED"
  | "SERVER_UNREACHABLE"
  | "SERVER_PROTOCOL_ERROR"
  | "SERVER_ERROR"
  | "VAULT_UNAVAILABLE"
  | "VAULT_LOCKED"
  | "BROWSER_FAILED"
  | "EPHEMERAL_UNSUPPORTED"
  | "WAIT_TIMEOUT"
  | "NOT_SIGNED_IN"
  | "PROVIDER_UNREACHABLE"
  | "PROVIDER_ERROR"
  | "ID_TOKEN_INVALID"
  | "DEVICE_FLOW_UNSUPPORTED"
  | "RESPONSE_TOO_LARGE"
  | "STORAGE_UNAVAILABLE"
  | "BUSY"
  | "ACCOUNT_UNKNOWN"
  | "ACCOUNT_LIMIT";
