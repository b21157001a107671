import BrokerCore
import BrowserLoginAPI
import BrowserLoginProtocol
import Synchronization

/// A third sign-in protocol, test-only, in one file (issue 29): the proof
/// that adding a protocol is a new file and a registration line. A "ticket"
/// server keeps no attempt: the browser comes back with `ticket` and `code`;
/// the code is redeemed once; sessions are refreshed and revoked by token.
/// Its answers are scripted by the test (`TicketServer.State`).
final class TicketServer: SignInProtocol {
    enum Answer: Sendable {
        case granted
        case lost
    }
    struct State {
        var calls: [String: Int] = [:]
        var redeem: [Answer] = []
        var refreshed = 0
        /// The tickets of the attempts begun, in order.
        var tickets: [String] = []
        /// The access tokens of the sessions revoked, in order.
        var revokedTokens: [String] = []
    }
    let state = Mutex(State())

    func count(_ route: String) -> Int { state.withLock { $0.calls[route] ?? 0 } }
    private func called(_ route: String) { state.withLock { $0.calls[route, default: 0] += 1 } }

    // MARK: SignInProtocol

    var repeatsLostRefresh: Bool { false }
    var checksSessions: Bool { false }
    func reservesAppPath(_ path: String, client: ClientConfig) -> Bool { false }

    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        called("refresh")
        let n = state.withLock {
            $0.refreshed += 1
            return $0.refreshed
        }
        var next = session
        next.accessToken = "ticket-access-\(n + 1)"
        next.refreshToken = "ticket-refresh-\(n + 1)"
        return next
    }
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        called("revoke")
        state.withLock { $0.revokedTokens.append(session.accessToken) }
        return RevokeResponse(revoked: true)
    }
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        throw .notSent(BrokerError(.serverUnreachable, "no session check"), detail: "a ticket server has no session check")
    }

    // MARK: The attempt's steps

    var defaultFlow: SignInFlow { .browser }
    var issuer: String { "https://tickets.example" }
    var attemptMilliseconds: Int64 { 600_000 }

    static func key(_ ticket: String) -> String { "tk_" + Crypto.digest(ticket) }

    func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    {
        called("authorize")
        guard let ticket = try? Crypto.randomToken(bytes: 16) else {
            throw BrokerError(.serverUnreachable, "no randomness")
        }
        state.withLock { $0.tickets.append(ticket) }
        return LocalAuthorization(
            authorizeUrl: "https://tickets.example/sign-in?ticket=" + ticket,
            proofs: LocalProofs(codeVerifier: "unused", state: ticket, nonce: nil, redirectURI: redirectURI),
            lookupKey: Self.key(ticket), deviceFallback: false)
    }
    func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError) {}
    func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        called("redeem")
        let answer = state.withLock { $0.redeem.isEmpty ? Answer.lost : $0.redeem.removeFirst() }
        guard answer == .granted else {
            throw .uncertain("lost", BrokerError(.providerUnreachable, "the ticket server did not answer"))
        }
        return LocalGrant { () async throws(BrokerError) -> IssuedSession in
            let now = Timestamp.now()
            return IssuedSession(
                sessionId: "ticket-session", accessToken: "ticket-access-1",
                accessTokenExpiresAt: now.adding(milliseconds: 600_000), refreshToken: "ticket-refresh-1",
                expiresAt: now.adding(milliseconds: 3_600_000), authenticatedAt: now, authMethod: "ticket",
                account: Account(userId: "u1", email: "ada@example.com", displayName: "Ada"))
        }
    }
    static let noDevice = BrokerError(.deviceFlowUnsupported, "a ticket server has no device sign-in")
    func deviceAvailable(client: ClientConfig) async throws(BrokerError) { throw Self.noDevice }
    func authorizeDevice() async throws(BrokerError) -> DeviceGrant { throw Self.noDevice }
    func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome { .refused(Self.noDevice) }
}

/// The ticket server's callbacks: they name a `ticket`.
struct TicketCallbacks: CallbackReader {
    func claim(callback url: String) throws(BrokerError) -> ClaimedCallback? {
        guard var target = URLParts(splitting: url), let query = target.query else { return nil }
        var values: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { values[parts[0]] = parts[1] }
        }
        guard let ticket = values["ticket"] else { return nil }
        guard let code = values["code"] else { throw BrokerError(.callbackInvalid, "the callback has no code") }
        target.query = nil
        target.fragment = nil
        return ClaimedCallback(
            lookupKey: TicketServer.key(ticket), target: target, state: ticket, issuer: nil, outcome: .code(code))
    }
}
