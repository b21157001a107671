import BrowserLoginAPI
import BrowserLoginProtocol

/// What a `login.start` asks of accounts (docs/rpc.md "Several accounts per
/// client"): one more (`add`, a fresh sign-in rather than the browser's
/// current one) and the address to pre-fill.
public struct AccountRequest: Sendable, Equatable {
    public var add: Bool
    public var loginHint: String?
    public init(add: Bool, loginHint: String?) {
        self.add = add
        self.loginHint = loginHint
    }
    /// A sign-in that asks nothing of accounts.
    public static let none = AccountRequest(add: false, loginHint: nil)
}

/// The secrets of a browser sign-in: kept in the vault only.
public struct LocalProofs: Sendable {
    public var codeVerifier: String
    /// The proof that lets the broker ask the server about the attempt (a
    /// protocol with `serverAttempts`); nil for one without.
    public var recoveryKey: String?
    /// The callback's correlation value (OAuth's `state`); nil when the
    /// callback names its attempt otherwise (Browser Login's attempt id).
    public var state: String?
    public var nonce: String?
    public var redirectURI: String
    /// The DPoP key pair the exchange proves (RFC 9449), serialized; it
    /// becomes the session's. Nil when the client does not use DPoP.
    public var dpopKey: String?
    public init(
        codeVerifier: String, recoveryKey: String? = nil, state: String?, nonce: String?, redirectURI: String,
        dpopKey: String? = nil
    ) {
        self.codeVerifier = codeVerifier
        self.recoveryKey = recoveryKey
        self.state = state
        self.nonce = nonce
        self.redirectURI = redirectURI
        self.dpopKey = dpopKey
    }
}

/// What a browser sign-in opens: the URL, its proofs, and the key its
/// callback finds the attempt by (stored as the attempt's `serverAttemptId`).
public struct LocalAuthorization: Sendable {
    /// The URL the browser opens, unless `open` answers another one.
    public var authorizeUrl: String
    public var proofs: LocalProofs
    /// Nil when the server names the attempt only once it is opened (`open`).
    public var lookupKey: String?
    /// True when a device sign-in can take over if no browser opens.
    public var deviceFallback: Bool
    /// The request that opens the attempt at the server, sent once the
    /// attempt's row and its proofs are committed (a Browser Login server's
    /// create, RFC 9126's pushed authorization request): it answers the URL
    /// the browser opens and, where the server names the attempt, its key
    /// and expiry. A failure ends the attempt with its error and opens
    /// nothing. Nil when there is nothing to send before the browser opens.
    public var open: (@Sendable () async throws(BrokerError) -> OpenedAttempt)?
    public init(
        authorizeUrl: String, proofs: LocalProofs, lookupKey: String?, deviceFallback: Bool,
        open: (@Sendable () async throws(BrokerError) -> OpenedAttempt)? = nil
    ) {
        self.authorizeUrl = authorizeUrl
        self.proofs = proofs
        self.lookupKey = lookupKey
        self.deviceFallback = deviceFallback
        self.open = open
    }
}

/// What opening an attempt at its server answered (`LocalAuthorization.open`).
public struct OpenedAttempt: Sendable {
    public var authorizeUrl: String
    /// The attempt's key there, when the server names it.
    public var lookupKey: String?
    /// When the server lets the attempt expire (else the protocol's `attemptMilliseconds`).
    public var expiresAt: Timestamp?
    public init(authorizeUrl: String, lookupKey: String? = nil, expiresAt: Timestamp? = nil) {
        self.authorizeUrl = authorizeUrl
        self.lookupKey = lookupKey
        self.expiresAt = expiresAt
    }
}

/// A callback a protocol recognised as its own. Holds a code and the
/// correlation value: never log it.
public struct ClaimedCallback: Sendable {
    public enum Outcome: Sendable {
        case code(String)
        /// The user declined at the server.
        case denied
        /// The server answered with another error.
        case failed(BrokerError)
    }
    public var lookupKey: String
    /// Scheme, authority and path (query and fragment not kept).
    public var target: URLParts
    /// Compared in constant time with the attempt's `LocalProofs.state`
    /// (nil for a protocol whose callbacks carry none).
    public var state: String?
    /// The issuer the callback names, if any (checked by the protocol).
    public var issuer: String?
    public var outcome: Outcome
    public init(lookupKey: String, target: URLParts, state: String?, issuer: String?, outcome: Outcome) {
        self.lookupKey = lookupKey
        self.target = target
        self.state = state
        self.issuer = issuer
        self.outcome = outcome
    }
}

/// Reads the callbacks of one protocol: nil for a callback that is not its
/// kind (the engine asks each registered reader in turn).
public protocol CallbackReader: Sendable {
    func claim(callback url: String) throws(BrokerError) -> ClaimedCallback?
}

/// Why a code was not redeemed.
public enum LocalRedeemFailure: Error, Sendable {
    /// The request certainly never left: the callback may be delivered again.
    case notSent(BrokerError)
    /// A well-formed refusal; `then` says what becomes of the attempt.
    case refused(BrokerError, then: AfterRefusal = .fails)
    /// No definite answer (the detail names no secret; the error is the
    /// failure's own): a code is never sent twice.
    case uncertain(String, BrokerError)
}

/// What a definite refusal of an exchange does to its attempt.
public enum AfterRefusal: Sendable, Equatable {
    /// It ends `failed`.
    case fails
    /// It waits for another callback (a forged or stale one must not end a
    /// genuine sign-in); `triesKept`: a callback that arrived during the
    /// exchange may be tried now (the code itself was refused).
    case waits(triesKept: Bool)
    /// The server ended the attempt: `cancelled` or `expired`.
    case cancelled
    case expired
    /// Another exchange redeemed the code: the session it got must be settled
    /// with the server (`uncertain`, reconciled).
    case redeemedElsewhere
}

/// Tokens a server granted, not yet a session: `complete` checks them (an ID
/// token, userinfo) and answers the session; when it throws, the protocol has
/// already tried to revoke them (nothing was kept).
public struct LocalGrant: Sendable {
    public let complete: @Sendable () async throws(BrokerError) -> IssuedSession
    /// When the server says it issued the session (its receipt); nil: now.
    public let issuedAt: Timestamp?
    public init(
        issuedAt: Timestamp? = nil, complete: @escaping @Sendable () async throws(BrokerError) -> IssuedSession
    ) {
        self.issuedAt = issuedAt
        self.complete = complete
    }
}

/// A device sign-in begun at the server.
public struct DeviceGrant: Sendable {
    /// Secret: kept in the vault only.
    public var deviceCode: String
    public var view: AttemptView.DeviceView
    public var expiresInSeconds: Int
    /// The attempt's key (stored as its `serverAttemptId`).
    public var lookupKey: String
    /// Secret: the DPoP key pair every poll proves (RFC 9449), serialized;
    /// it becomes the session's. Nil when the client does not use DPoP.
    public var dpopKey: String?
    public init(
        deviceCode: String, view: AttemptView.DeviceView, expiresInSeconds: Int, lookupKey: String,
        dpopKey: String? = nil
    ) {
        self.deviceCode = deviceCode
        self.view = view
        self.expiresInSeconds = expiresInSeconds
        self.lookupKey = lookupKey
        self.dpopKey = dpopKey
    }
}

/// One poll's outcome.
public enum DevicePollOutcome: Sendable {
    case pending
    case slowDown
    case denied
    case expired
    /// A definite refusal: the attempt fails with it.
    case refused(BrokerError)
    /// No definite answer: poll again, more slowly.
    case unreachable
    case granted(LocalGrant)
}
