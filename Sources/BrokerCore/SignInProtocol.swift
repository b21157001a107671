import BrowserLoginAPI
import BrowserLoginProtocol

/// Why a session call of a sign-in protocol (refresh, revoke, verify) did
/// not succeed, in the words the engine decides on, whatever the protocol:
/// each case carries the public error in the protocol's own words (a
/// standard provider is not "the login server") and a detail for the log.
/// Neither holds a token, a proof, a key or a code.
public enum SignInFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Certainly not sent, or it cannot be done now without sending (the
    /// server could not be reached before the request left; a DPoP key that
    /// cannot be used now): nothing was lost, try again later. The session
    /// stays as it is; an owed revoke stays owed.
    case notSent(BrokerError, detail: String)
    /// Sent, and no answer came (connection lost, timeout): the server may
    /// have processed it. Never repeated blindly — a refresh only when the
    /// protocol's `repeatsLostRefresh` says a repeat gets the same answer.
    case unanswered(BrokerError, detail: String)
    /// Sent and answered, but not definitely (a 5xx, a redirect, a broken or
    /// too large answer): it may hide a processed request; never repeated.
    case indefinite(BrokerError, detail: String)
    /// A definite refusal that ends the grant: the session is over at the
    /// server and ends here as `ending` says.
    case ended(SessionEnding, BrokerError, detail: String)
    /// Any other definite refusal: nothing was done at the server.
    case refused(BrokerError, detail: String)

    /// The public error, in the protocol's words.
    public var brokerError: BrokerError {
        switch self {
        case .notSent(let error, _), .unanswered(let error, _), .indefinite(let error, _), .ended(_, let error, _),
            .refused(let error, _):
            error
        }
    }

    public var description: String {
        switch self {
        case .notSent(_, let detail), .unanswered(_, let detail), .indefinite(_, let detail), .ended(_, _, let detail),
            .refused(_, let detail):
            detail
        }
    }
}

/// How a session ends when its server refused its grant for good.
public struct SessionEnding: Sendable, Equatable {
    /// `expired` or `revoked`.
    public var status: SessionStatus
    /// The session's recorded reason (the server's code, `REFRESH_REJECTED` …).
    public var reason: String
    /// A configuration problem the log names (the client itself was refused).
    public var warning: String?

    public init(status: SessionStatus, reason: String, warning: String? = nil) {
        self.status = status
        self.reason = reason
        self.warning = warning
    }
}

/// What a session check (`verify`) found.
public enum SessionCheck: Sendable, Equatable {
    /// The server knows the session by its access token.
    case alive
    /// The session lives, its access token does not: refresh it.
    case accessTokenExpired
    /// The access token is good, but for another session than this one.
    case anotherSession
}

/// A sign-in protocol as the engine drives it, one per client (chosen from
/// the client's configuration). Browser Login (docs/protocol.md) is the first;
/// a protocol maps its server's answers onto these values and checks them
/// (the exchange's receipt included) before it returns, so the engine, the
/// attempt machine, the store and the RPC layer never see its wire.
public protocol SignInProtocol: Sendable {
    /// Rotates the session's tokens (§5.7): the session as it is after the
    /// refresh (new access token, the rotated refresh token, expiries).
    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession
    /// Revokes the session of a signed-out client (§5.8, RFC 7009).
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse
    /// Checks the session with the server (§5.6); only called when `checksSessions`.
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck
    // MARK: The attempt's steps (SignInSteps.swift): begin, callback, exchange

    /// The flow of a `login.start` that names none.
    var defaultFlow: SignInFlow { get }
    /// The issuer an attempt records (its `issuer` column).
    var issuer: String { get }
    /// How long a browser sign-in may take, unless opening it says (`OpenedAttempt.expiresAt`).
    var attemptMilliseconds: Int64 { get }
    /// Everything a browser sign-in of `client` opens with, for a redirect to
    /// `redirectURI`: no request leaves before its attempt is committed (what
    /// must be sent first is `LocalAuthorization.open`). `accounts` says
    /// whether the sign-in page should offer another account than the
    /// browser's current one, and which address to pre-fill.
    func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    /// Checks a callback this protocol's reader claimed (the issuer that
    /// answered, RFC 9207); nothing is changed when it throws.
    func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError)
    /// Redeems the callback's code of the attempt `key`: sent once; the grant completes the sign-in.
    func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant
    /// Throws when the server offers no device sign-in (before any attempt exists).
    func deviceAvailable(client: ClientConfig) async throws(BrokerError)
    /// Begins a device sign-in (RFC 8628 §3.1–3.2).
    func authorizeDevice() async throws(BrokerError) -> DeviceGrant
    /// One poll of a device sign-in (RFC 8628 §3.4–3.5), proving `dpopKey`
    /// (the grant's) when there is one.
    func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome
    /// What the server keeps of each attempt, for reconciliation and
    /// follow-ups (docs/protocol.md §7); nil for a protocol whose attempts
    /// live in the broker only: an exchange without a definite answer then
    /// ends its attempt, as nothing can be asked about it.
    var serverAttempts: (any ServerAttempts)? { get }

    // MARK: The session

    /// True when a refresh whose answer was lost may be sent once more at
    /// once (Browser Login's grace window gives the same successor); false
    /// for a standard provider, whose next refresh waits for the next need.
    var repeatsLostRefresh: Bool { get }
    /// False for a protocol without a session check (standard providers):
    /// their sessions are not verified on the slow interval.
    var checksSessions: Bool { get }
    /// False when the server cannot be told of a sign-out (a provider without
    /// a revocation endpoint): the `session.signOut` reply says so.
    var canRevoke: Bool { get async }
    /// Whether the app's API answered a `401` because the access token is no
    /// longer good (the request was not processed): refresh, send once more.
    func rejectsAccessToken(_ response: HTTPResponse) -> Bool
    /// The headers that authorize an app's request (`http.request`) to
    /// `method` `url` with the session's access token: `Authorization:
    /// Bearer`, or for a DPoP-bound session `Authorization: DPoP` and a proof.
    func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    /// True when the API refused the request for want of a fresh DPoP nonce
    /// (now kept): it was not processed, so it is sent once more.
    func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool
    /// True for an app path that belongs to the sign-in server, not the app
    /// (`http.request` refuses it).
    func reservesAppPath(_ path: String, client: ClientConfig) -> Bool
    /// How the session ends when the app's API answered that it is over
    /// (the request was refused, not processed); nil when it did not.
    func endsSession(_ response: HTTPResponse) -> SessionEnding?
}

extension SignInProtocol {
    /// The session after a Browser Login refresh answer (§5.7).
    public static func refreshed(_ session: IssuedSession, by answer: RefreshResponse) -> IssuedSession {
        var next = session
        next.accessToken = answer.accessToken
        next.accessTokenExpiresAt = answer.accessTokenExpiresAt
        next.refreshToken = answer.refreshToken
        next.expiresAt = answer.expiresAt
        return next
    }
    public var repeatsLostRefresh: Bool { true }
    public var checksSessions: Bool { true }
    public var canRevoke: Bool { get async { true } }
    public var serverAttempts: (any ServerAttempts)? { nil }
    public var defaultFlow: SignInFlow { .browser }
    /// Browser Login's routes under the client's `BasePath=` on its API origin.
    public func reservesAppPath(_ path: String, client: ClientConfig) -> Bool {
        client.apiOrigin == client.server && (path == client.basePath || path.hasPrefix(client.basePath + "/"))
    }
    /// Browser Login's API says `TOKEN_EXPIRED` in its error body (docs/protocol.md §6).
    public func rejectsAccessToken(_ response: HTTPResponse) -> Bool {
        response.status == 401 && response.body.count < 65_536
            && (try? JSONValue.parse(response.body).decode(ErrorBody.self))?.error.code == .tokenExpired
    }
    /// Browser Login's API says `SESSION_REVOKED`, `SESSION_EXPIRED` or
    /// `AUTH_USER_DISABLED` in a `401`/`403` error body (docs/protocol.md §6).
    public func endsSession(_ response: HTTPResponse) -> SessionEnding? {
        guard response.status == 401 || response.status == 403, response.body.count < 65_536,
            let code = (try? JSONValue.parse(response.body).decode(ErrorBody.self))?.error.code,
            code == .sessionRevoked || code == .sessionExpired || code == .authUserDisabled
        else { return nil }
        return SessionEnding(status: code == .sessionExpired ? .expired : .revoked, reason: code.rawValue)
    }
    public func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    { [HTTPHeader("Authorization", "Bearer " + session.accessToken)] }
    public func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool { false }
}

/// The optional capability of a sign-in protocol whose server keeps each
/// attempt and answers for it with the attempt's recovery key (Browser Login,
/// docs/protocol.md §5.3–§5.5, §5.8), in the engine's terms: reconciliation
/// and follow-ups decide on these answers only.
public protocol ServerAttempts: Sendable {
    /// What the server says of the attempt (safe to repeat).
    func status(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) -> ServerAttemptReport
    func cancel(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure)
    func acknowledge(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure)
    /// Revokes the session the attempt's exchange issued, by the attempt's proof.
    func revokeSession(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure)
}

/// An attempt at its server: its key there and the proof that it is ours.
/// Holds a secret: never log it.
public struct ServerAttemptRef: Sendable {
    public var key: String
    public var recoveryKey: String
    public init(key: String, recoveryKey: String) {
        self.key = key
        self.recoveryKey = recoveryKey
    }
}

/// What the server says of an attempt.
public struct ServerAttemptReport: Sendable, Equatable {
    public var state: ServerAttemptState
    /// For a completed attempt: when its session was issued and the digest
    /// of its access token (to recognise the session the broker holds).
    public var issuedAt: Timestamp?
    public var tokenDigest: String?
    public var sessionRevoked: Bool?
    public var sessionExpiresAt: Timestamp?
    public init(
        state: ServerAttemptState, issuedAt: Timestamp? = nil, tokenDigest: String? = nil, sessionRevoked: Bool? = nil,
        sessionExpiresAt: Timestamp? = nil
    ) {
        self.state = state
        self.issuedAt = issuedAt
        self.tokenDigest = tokenDigest
        self.sessionRevoked = sessionRevoked
        self.sessionExpiresAt = sessionExpiresAt
    }
}

/// Why a call about a server-kept attempt did not succeed, in the words the
/// engine decides on.
public struct ServerAttemptFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The server knows no such attempt (any more): nothing is owed there.
        case unknown
        /// The server refused the attempt's proof.
        case proofRefused
        /// The attempt's code was exchanged already (a cancel came too late).
        case alreadyExchanged
        /// The attempt is still open (an acknowledge came too early).
        case stillActive
        /// Another definite refusal.
        case refused
        /// No definite answer (not sent, no answer, a 5xx, a broken answer): try again later.
        case unanswered
    }
    public var kind: Kind
    /// The public error, in the protocol's words.
    public var error: BrokerError
    /// For the log; names no secret.
    public var detail: String
    public init(_ kind: Kind, _ error: BrokerError, detail: String) {
        self.kind = kind
        self.error = error
        self.detail = detail
    }
    public var description: String { detail }
}

/// The server attempts of a protocol without them: every attempt is unknown
/// there, so nothing is owed and an uncertain attempt is retired.
public struct NoServerAttempts: ServerAttempts {
    public init() {}
    static let unknown = ServerAttemptFailure(
        .unknown, BrokerError(.attemptUnknown, "the protocol keeps no attempt at the server"),
        detail: "the protocol keeps no attempt at the server")
    public func status(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) -> ServerAttemptReport {
        throw Self.unknown
    }
    public func cancel(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) { throw Self.unknown }
    public func acknowledge(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) { throw Self.unknown }
    public func revokeSession(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) { throw Self.unknown }
}
