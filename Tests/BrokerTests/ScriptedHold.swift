import BrokerCore
import BrowserLoginAPI
import BrowserLoginProtocol
import Synchronization

/// Holds the next code exchange (or refresh) at its server once the server
/// has processed it, its answer not yet sent, until the test releases it:
/// the moment a broker that stops leaves its attempt `exchanging`, or a
/// sign-out meets a refresh in flight. Unarmed, it holds nothing.
final class ExchangeHold: Sendable {
    private struct State {
        var armed = false
        var released = false
        var waiting: CheckedContinuation<Void, Never>?
        var holding = false
    }
    private let state = Mutex(State())

    /// The next exchange to arrive is held.
    func arm() { state.withLock { $0.armed = true } }

    /// True while an exchange is held.
    var isHolding: Bool { state.withLock { $0.holding } }

    /// Called by a server with an exchange processed: waits when armed.
    func arrive() async {
        let hold = state.withLock {
            guard $0.armed, !$0.released else { return false }
            $0.armed = false
            $0.holding = true
            return true
        }
        guard hold else { return }
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock {
                if $0.released { return true }
                $0.waiting = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Lets the held exchange answer (and any later one pass).
    func release() {
        let waiting = state.withLock { held in
            held.released = true
            held.holding = false
            let waiting = held.waiting
            held.waiting = nil
            return waiting
        }
        waiting?.resume()
    }
}

/// A protocol without server attempts whose code exchanges and refreshes
/// pass an `ExchangeHold` after the server has processed them; everything
/// else is its base's, unchanged.
struct HeldRedeem<Base: SignInProtocol>: SignInProtocol {
    let base: Base
    let hold: ExchangeHold
    /// Holds a refresh, processed, before its answer.
    let refreshHold: ExchangeHold

    func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        let answer: Result<LocalGrant, LocalRedeemFailure>
        do throws(LocalRedeemFailure) {
            answer = .success(try await base.redeem(code: code, key: key, proofs: proofs))
        } catch {
            answer = .failure(error)
        }
        await hold.arrive()
        return try answer.get()
    }

    // MARK: SignInProtocol, as the base

    var serverAttempts: (any ServerAttempts)? { base.serverAttempts }
    var repeatsLostRefresh: Bool { base.repeatsLostRefresh }
    var checksSessions: Bool { base.checksSessions }
    var canRevoke: Bool { get async { await base.canRevoke } }
    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        let answer: Result<IssuedSession, SignInFailure>
        do throws(SignInFailure) {
            answer = .success(try await base.refresh(session))
        } catch {
            answer = .failure(error)
        }
        await refreshHold.arrive()
        return try answer.get()
    }
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        try await base.revoke(session)
    }
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        try await base.verify(session)
    }
    func rejectsAccessToken(_ response: HTTPResponse) -> Bool { base.rejectsAccessToken(response) }
    func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    { try base.authorizationHeaders(session, method: method, url: url) }
    func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool { base.wantsFreshNonce(response, url: url) }
    func reservesAppPath(_ path: String, client: ClientConfig) -> Bool { base.reservesAppPath(path, client: client) }
    func endsSession(_ response: HTTPResponse) -> SessionEnding? { base.endsSession(response) }

    // MARK: The attempt's steps, as the base

    var defaultFlow: SignInFlow { base.defaultFlow }
    var issuer: String { base.issuer }
    var attemptMilliseconds: Int64 { base.attemptMilliseconds }
    func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    {
        try await base.authorize(client: client, redirectURI: redirectURI, accounts: accounts, ephemeral: ephemeral)
    }
    func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError) {
        try await base.check(callback, client: client)
    }
    func deviceAvailable(client: ClientConfig) async throws(BrokerError) { try await base.deviceAvailable(client: client) }
    func authorizeDevice() async throws(BrokerError) -> DeviceGrant { try await base.authorizeDevice() }
    func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome {
        await base.poll(deviceCode: deviceCode, dpopKey: dpopKey)
    }
}
