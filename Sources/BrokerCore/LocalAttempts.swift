import BrowserLoginAPI
import BrowserLoginProtocol

/// The sign-in steps of a protocol whose server keeps no attempt a client can
/// ask about (a standard OAuth 2.0 / OpenID Connect provider): the attempt
/// lives in the broker only, keyed by a value the protocol derives from its
/// callback. The engine drives these steps in protocol-neutral terms (begin,
/// accept a callback or a poll result, redeem); a protocol offers them through
/// `SignInProtocol.localAttempts`, as a server that keeps attempts offers
/// `attemptControl`. Errors carry no attempt id: the engine adds it.
public protocol LocalAttemptSignIn: Sendable {
    /// The flow of a `login.start` that names none.
    var defaultFlow: SignInFlow { get }
    /// The issuer an attempt records (its `issuer` column).
    var issuer: String { get }
    /// How long a browser sign-in may take.
    var attemptMilliseconds: Int64 { get }
    /// Everything a browser sign-in opens with, for a redirect to `redirectURI`;
    /// `accounts` says whether the sign-in page should offer another account
    /// than the browser's current one, and which address to pre-fill.
    func authorize(redirectURI: String, accounts: AccountRequest) async throws(BrokerError) -> LocalAuthorization
    /// Checks a callback this protocol's reader claimed against its server
    /// (the issuer that answered, RFC 9207); nothing is changed when it throws.
    func check(_ callback: ClaimedCallback) async throws(BrokerError)
    /// Redeems the callback's code: sent once; the grant completes the sign-in.
    func redeem(code: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant
    /// Throws when the server offers no device sign-in (before any attempt exists).
    func deviceAvailable() async throws(BrokerError)
    /// Begins a device sign-in (RFC 8628 §3.1–3.2).
    func authorizeDevice() async throws(BrokerError) -> DeviceGrant
    /// One poll of a device sign-in (RFC 8628 §3.4–3.5), proving `dpopKey`
    /// (the grant's) when there is one.
    func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome
}

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

/// The secrets of a browser sign-in at a protocol without server attempts:
/// kept in the vault only.
public struct LocalProofs: Sendable {
    public var codeVerifier: String
    /// The callback's correlation value (OAuth's `state`).
    public var state: String
    public var nonce: String?
    public var redirectURI: String
    /// The DPoP key pair the exchange proves (RFC 9449), serialized; it
    /// becomes the session's. Nil when the client does not use DPoP.
    public var dpopKey: String?
    public init(codeVerifier: String, state: String, nonce: String?, redirectURI: String, dpopKey: String? = nil) {
        self.codeVerifier = codeVerifier
        self.state = state
        self.nonce = nonce
        self.redirectURI = redirectURI
        self.dpopKey = dpopKey
    }
}

/// What a browser sign-in opens: the URL, its proofs, and the key its
/// callback finds the attempt by (stored as the attempt's `serverAttemptId`).
public struct LocalAuthorization: Sendable {
    public var authorizeUrl: String
    public var proofs: LocalProofs
    public var lookupKey: String
    /// True when a device sign-in can take over if no browser opens.
    public var deviceFallback: Bool
    /// A pushed authorization request (RFC 9126), sent once the attempt and
    /// its proofs are committed: it answers the URL the browser opens
    /// (`client_id` and `request_uri` only; `authorizeUrl` is then not
    /// opened). A failure ends the attempt with its error and opens nothing.
    public var push: (@Sendable () async throws(BrokerError) -> String)?
    public init(
        authorizeUrl: String, proofs: LocalProofs, lookupKey: String, deviceFallback: Bool,
        push: (@Sendable () async throws(BrokerError) -> String)? = nil
    ) {
        self.authorizeUrl = authorizeUrl
        self.proofs = proofs
        self.lookupKey = lookupKey
        self.deviceFallback = deviceFallback
        self.push = push
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
    /// Compared in constant time with the attempt's `LocalProofs.state`.
    public var state: String
    /// The issuer the callback names, if any (checked by the protocol).
    public var issuer: String?
    public var outcome: Outcome
    public init(lookupKey: String, target: URLParts, state: String, issuer: String?, outcome: Outcome) {
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
    /// A well-formed refusal.
    case refused(BrokerError)
    /// No definite answer (the detail names no secret; the error is the
    /// failure's own): a code is never sent twice.
    case uncertain(String, BrokerError)
}

/// Tokens a server granted, not yet a session: `complete` checks them (an ID
/// token, userinfo) and answers the session; when it throws, the protocol has
/// already tried to revoke them (nothing was kept).
public struct LocalGrant: Sendable {
    public let complete: @Sendable () async throws(BrokerError) -> IssuedSession
    public init(complete: @escaping @Sendable () async throws(BrokerError) -> IssuedSession) {
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
