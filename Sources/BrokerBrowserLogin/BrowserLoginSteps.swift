import BrokerCore
import BrowserLoginProtocol

/// Browser Login's routes for one attempt (docs/protocol.md §5.1–§5.5,
/// §5.8) on the wire: `LoginServerClient` sends them over HTTP; a unit test's
/// scripted server answers them. Everything the engine asks of a Browser
/// Login attempt goes through the seam's steps below, which map these routes'
/// answers and errors onto the seam's own terms.
public protocol BrowserLoginRoutes: SignInProtocol {
    /// The server origin: the issuer every answer and callback must name.
    var origin: Origin { get }
    func create(_ request: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(LoginServerError) -> ExchangeResponse
    func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse
    func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState
    func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError)
    func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> RevokeResponse
}

extension BrowserLoginRoutes {
    public var issuer: String { origin.serialized }
    /// The server says how long an attempt lives when it creates it (§5.1).
    public var attemptMilliseconds: Int64 { 600_000 }
    public var serverAttempts: (any ServerAttempts)? { BrowserLoginAttempts(routes: self) }

    /// The PKCE verifier and the recovery key, both new; the server names the
    /// attempt when it creates it (§5.1), sent once both are in the vault.
    public func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    {
        let codeVerifier: ProofSecret
        let recoveryKey: ProofSecret
        do {
            codeVerifier = try ProofSecret.generate()
            recoveryKey = try ProofSecret.generate()
        } catch { throw BrokerError(.busy, "the system could not make the sign-in's random proofs now; try again") }
        let request = CreateAttemptRequest(
            clientId: client.id, returnUrl: redirectURI, codeChallenge: codeVerifier.challenge,
            recoveryChallenge: recoveryKey.challenge, ephemeral: ephemeral, prompt: accounts.add ? "login" : nil,
            loginHint: accounts.loginHint)
        let allowsHTTP = client.server.isLoopback
        return LocalAuthorization(
            authorizeUrl: "",
            proofs: LocalProofs(
                codeVerifier: codeVerifier.value, recoveryKey: recoveryKey.value, state: nil, nonce: nil,
                redirectURI: redirectURI),
            lookupKey: nil, deviceFallback: false,
            open: { () async throws(BrokerError) -> OpenedAttempt in
                let created: CreateAttemptResponse
                do throws(LoginServerError) { created = try await self.create(request) } catch {
                    throw error.brokerError()
                }
                try Self.checkCreated(created, issuer: self.issuer, allowsHTTP: allowsHTTP)
                return OpenedAttempt(
                    authorizeUrl: created.authorizeUrl, lookupKey: created.attemptId, expiresAt: created.expiresAt)
            })
    }

    /// §7 Create: the issuer must be the configured origin, the id opaque, the page https.
    static func checkCreated(_ created: CreateAttemptResponse, issuer: String, allowsHTTP: Bool) throws(BrokerError) {
        if created.issuer != issuer {
            throw BrokerError(
                .serverProtocolError,
                "the login server answered with another issuer than the client's Server= origin; check the client file")
        }
        if !isValidOpaqueId(created.attemptId) {
            throw BrokerError(.serverProtocolError, "the login server answered with a malformed attempt id")
        }
        guard let parts = URLParts(splitting: created.authorizeUrl),
            parts.scheme == "https" || (parts.scheme == "http" && allowsHTTP)
        else {
            throw BrokerError(.serverProtocolError, "the login server's authorizeUrl is not an https URL")
        }
    }

    /// The callback's issuer must be this client's login server (§7).
    public func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError) {
        guard callback.issuer == issuer else {
            throw BrokerError(.issuerMismatch, "the callback's issuer is not this client's login server; nothing was changed")
        }
    }

    /// §5.2, sent once; the answer was checked against the attempt and the issued session.
    public func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        let answer: ExchangeResponse
        do {
            answer = try await exchange(
                attemptId: key, ExchangeRequest(code: code, codeVerifier: proofs.codeVerifier))
        } catch { throw error.redeemFailure }
        let session = answer.session
        return LocalGrant(issuedAt: answer.receipt.issuedAt) { () async throws(BrokerError) -> IssuedSession in session }
    }

    public func deviceAvailable(client: ClientConfig) async throws(BrokerError) {
        throw BrokerError(
            .deviceFlowUnsupported,
            "\(client.appName) signs in with a Browser Login server, which has no device sign-in; start without 'flow', or open the sign-in page on another device with 'browser-login start --no-browser'"
        )
    }
    public func authorizeDevice() async throws(BrokerError) -> DeviceGrant {
        throw BrokerError(.deviceFlowUnsupported, "a Browser Login server has no device sign-in")
    }
    public func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome {
        .refused(BrokerError(.deviceFlowUnsupported, "a Browser Login server has no device sign-in"))
    }
}

/// Browser Login's server-kept attempts (§5.3–§5.5, §5.8) in the seam's terms.
struct BrowserLoginAttempts<Routes: BrowserLoginRoutes>: ServerAttempts {
    let routes: Routes

    func status(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) -> ServerAttemptReport {
        let answer = try await mapped { () async throws(LoginServerError) in
            try await routes.status(attemptId: attempt.key, recoveryKey: attempt.recoveryKey)
        }
        return ServerAttemptReport(
            state: answer.state, issuedAt: answer.receipt?.issuedAt, tokenDigest: answer.receipt?.tokenDigest,
            sessionRevoked: answer.sessionRevoked, sessionExpiresAt: answer.sessionExpiresAt)
    }
    func cancel(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        _ = try await mapped { () async throws(LoginServerError) in
            try await routes.cancel(attemptId: attempt.key, recoveryKey: attempt.recoveryKey)
        }
    }
    func acknowledge(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        try await mapped { () async throws(LoginServerError) in
            try await routes.acknowledge(attemptId: attempt.key, recoveryKey: attempt.recoveryKey)
        }
    }
    func revokeSession(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        _ = try await mapped { () async throws(LoginServerError) in
            try await routes.revokeByProof(attemptId: attempt.key, recoveryKey: attempt.recoveryKey)
        }
    }

    /// A route's wire error in the seam's terms (`attemptFailure`).
    private func mapped<T>(_ route: () async throws(LoginServerError) -> T) async throws(ServerAttemptFailure) -> T {
        do { return try await route() } catch { throw error.attemptFailure }
    }
}

/// Browser Login's callbacks (§7): `code` (or `error`), `attempt` and `iss`,
/// each exactly once. Asked last: it claims every callback the other
/// protocols' readers left, and refuses what is not well-formed.
public struct BrowserLoginCallbacks: CallbackReader {
    public init() {}

    public func claim(callback url: String) throws(BrokerError) -> ClaimedCallback? {
        let callback: Callback
        do { callback = try Callback(parsing: url) } catch {
            throw BrokerError(.callbackInvalid, "the callback URL was refused: \(error.message)")
        }
        let outcome: ClaimedCallback.Outcome
        switch callback.outcome {
        case .code(let code): outcome = .code(code)
        // Confirmed with the server before it ends anything (§7: the attempt's status must say cancelled).
        case .error: outcome = .denied
        }
        return ClaimedCallback(
            lookupKey: callback.attempt, target: callback.target, state: nil, issuer: callback.issuer, outcome: outcome)
    }
}

/// Server ids are opaque and URL-safe (docs/protocol.md §4).
func isValidOpaqueId(_ id: String) -> Bool {
    (16...256).contains(id.utf8.count)
        && id.utf8.allSatisfy {
            ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F
                || $0 == 0x2E || $0 == 0x7E
        }
}
