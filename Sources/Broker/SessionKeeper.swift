import BrokerCore
import BrokerStore
import BrowserLoginProtocol

/// The one owner of session state: each signed-in client's secrets (read
/// once from the vault), the refresh and verification schedules, the
/// `session.wait` callers, the sign-out revokes in flight, and `SessionBoard`,
/// the one in-memory projection of the public session views. Every write of
/// a session record goes through here.
///
/// Owned by the engine actor and used only from it: its async methods run on
/// the caller's actor (`nonisolated(nonsending)`), so a step re-reads what it
/// decides on after each await, as the engine's own steps do.
final class SessionKeeper {
    let store: BrokerStore
    let clients: [String: ClientConfig]
    let vault: any SecretVault
    let servers: [String: any SignInProtocol]
    let clock: any BrokerCore.Clock
    let logger: Logger
    let hub: EventHub
    let board: SessionBoard
    let timer: TimerSignal
    /// How often sessions are checked with `GET session`.
    let verifyIntervalMilliseconds: Int64

    /// Each signed-in client's session secrets, read once from the vault.
    var cache: [String: SessionSecrets] = [:]
    /// Refreshes in flight per client: concurrent callers share one.
    var refreshing: [String: Task<SessionSecrets, any Error>] = [:]
    /// Clients whose sign-out revoke is being sent now: at most one request per session in flight.
    var revokesInFlight: Set<String> = []
    /// `session.signOut` calls waiting for the revoke in flight (the timer's retry) to settle.
    var revokeWaiters: [String: [CheckedContinuation<Void, Never>]] = [:]
    /// When each session is next refreshed and verified.
    var nextRefresh: [String: Timestamp] = [:]
    var nextVerify: [String: Timestamp] = [:]
    /// `session.wait` callers per client.
    var waiters: [String: [UInt64: CheckedContinuation<SessionView?, Never>]] = [:]
    var waiterCounter: UInt64 = 0
    /// The last session view published per client, to publish changes only.
    var published: [String: SessionView] = [:]

    /// An owed sign-out revoke is tried again on each timer round this far apart.
    static let revokeRetryMilliseconds: Int64 = 250

    init(
        store: BrokerStore, clients: [String: ClientConfig], vault: any SecretVault,
        servers: [String: any SignInProtocol], clock: any BrokerCore.Clock, logger: Logger, board: SessionBoard,
        hub: EventHub, timer: TimerSignal, verifyIntervalMilliseconds: Int64
    ) throws {
        self.store = store
        self.clients = clients
        self.vault = vault
        self.servers = servers
        self.clock = clock
        self.logger = logger
        self.board = board
        self.hub = hub
        self.timer = timer
        self.verifyIntervalMilliseconds = verifyIntervalMilliseconds
        for id in clients.keys { board.set(try Self.computeView(store, id)) }
    }

    func now() -> Timestamp { clock.now() }

    // MARK: - Views

    /// The public session of a client: its stored session when signed in,
    /// `signingIn` while an attempt is live, else what the store says.
    func view(_ client: String) throws -> SessionView {
        if let view = board.view(client) { return view }
        return try Self.computeView(store, client)
    }

    static func computeView(_ store: BrokerStore, _ client: String) throws -> SessionView {
        let record = try store.session(client: client)
        if let record, record.status == .signedIn { return record.view }
        let live = try store.list(client: client, states: [.starting, .waiting, .exchanging], limit: 1)
        if !live.isEmpty { return SessionView(client: client, status: .signingIn) }
        return record?.view ?? .signedOut(client)
    }

    /// Brings the board up to date after a write that may change the client's view.
    @discardableResult
    func refreshBoard(_ client: String) -> SessionView? {
        guard let view = try? Self.computeView(store, client) else {
            board.remove(client)
            return nil
        }
        board.set(view)
        return view
    }

    /// Refreshes the board and publishes the client's view when it is not the
    /// one last published; a sign-in answers the waiters.
    func project(_ client: String) {
        guard let view = refreshBoard(client), published[client] != view else { return }
        published[client] = view
        hub.publish(.sessionChanged(view))
        if view.status == .signedIn, let list = waiters.removeValue(forKey: client) {
            for continuation in list.values { continuation.resume(returning: view) }
        }
    }

    /// Saves a session record; the board follows at once, subscribers when `project`.
    func save(_ record: SessionRecord, project: Bool = true) throws {
        try store.save(record)
        if project { self.project(record.client) } else { refreshBoard(record.client) }
    }

    // MARK: - session.wait

    func newWaiterId() -> UInt64 {
        waiterCounter += 1
        return waiterCounter
    }

    func timeOutWaiter(client: String, id: UInt64) {
        if let continuation = waiters[client]?.removeValue(forKey: id) {
            continuation.resume(returning: nil)
        }
    }

    func releaseWaiters() {
        for (_, list) in waiters { for continuation in list.values { continuation.resume(returning: nil) } }
        waiters.removeAll()
    }

    // MARK: - Secrets and refresh

    /// The signed-in session's secrets, or `NOT_SIGNED_IN`.
    nonisolated(nonsending) func current(_ clientId: String) async throws -> SessionSecrets {
        guard let record = try store.session(client: clientId), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client is not signed in; start a sign-in with login.start")
        }
        if let cached = cache[clientId] { return cached }
        let found: SessionSecrets?
        do {
            found = try await vault.lookupJSON(SessionSecrets.self, attributes: VaultKeys.session(client: clientId))
        } catch { throw error.brokerError }
        guard let found else {
            // Not in the keyring now is not "gone" (a keyring restored from a
            // backup, another keyring daemon): the session stays signed in and
            // works again once its item is back; signing out ends it.
            throw BrokerError(
                .vaultUnavailable,
                "the session's tokens are not in the keyring now; unlock or restore the login keyring, or sign out and sign in again"
            )
        }
        if try store.session(client: clientId)?.status == .signedIn { cache[clientId] = found }
        return found
    }

    /// Rotates the session's tokens (§5.7), for `BrokerEngine.refreshSession`,
    /// which shares one run among concurrent callers. A lost answer is
    /// repeated once (inside the grace window the server gives the same
    /// successor). The new pair is in the vault before either token is used.
    nonisolated(nonsending) func refreshNow(_ clientId: String, current: SessionSecrets) async throws -> SessionSecrets {
        let server = servers[clientId]!
        guard current.session.refreshToken != nil else {
            // A provider that gave no refresh token: the session ends with its access token.
            try await end(clientId, status: .expired, reason: "TOKEN_EXPIRED")
            throw BrokerError(.notSignedIn, "the session's access token expired and cannot be refreshed; sign in again")
        }
        var answer: IssuedSession?
        var lastFailure: LoginServerError?
        for attempt in 0..<2 {
            do {
                answer = try await server.refresh(current.session)
                break
            } catch {
                lastFailure = error
                if case .noAnswer = error, attempt == 0, server.repeatsLostRefresh { continue }
                break
            }
        }
        guard let answer else {
            let failure: LoginServerError = lastFailure ?? .noAnswer("no answer")
            if case .providerRefused(_, "invalid_grant", _) = failure {
                try await end(clientId, status: .expired, reason: "REFRESH_REJECTED")
                throw BrokerError(
                    .notSignedIn, "the identity provider refused the refresh token (invalid_grant); sign in again",
                    providerError: "invalid_grant")
            }
            if case .refused(_, let code, _, _) = failure,
                code == .sessionRevoked || code == .sessionExpired || code == .authUserDisabled
            {
                try await end(clientId, status: code == .sessionExpired ? .expired : .revoked, reason: code.rawValue)
                throw BrokerError(
                    .notSignedIn,
                    code == .authUserDisabled
                        ? "the account is disabled at the server (AUTH_USER_DISABLED); contact your administrator to enable it"
                        : "the session ended at the server (\(code.rawValue)); sign in again",
                    serverCode: code.rawValue)
            }
            throw server.brokerError(failure)
        }
        var next = current
        next.session = answer
        guard let client = clients[clientId] else { throw BrokerError.clientUnknown(clientId) }
        do {
            try await vault.storeJSON(
                next, label: VaultKeys.sessionLabel(appName: client.appName, email: next.session.account.email),
                attributes: VaultKeys.session(client: clientId))
        } catch { throw error.brokerError }
        guard var record = try store.session(client: clientId), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        record.accessTokenExpiresAt = answer.accessTokenExpiresAt
        record.expiresAt = answer.expiresAt
        record.updatedAt = now()
        try save(record, project: false)
        cache[clientId] = next
        nextRefresh[clientId] = nil
        logger.info("session refreshed", ["client": clientId])
        project(clientId)
        // The next refresh time is worked out by the timer.
        timer.scheduled(now())
        return next
    }

    /// True for a while after the session got an access token that had
    /// already expired by this machine's clock when it arrived: the clock is
    /// ahead of the server's, so the token's expiry says nothing here, and
    /// refreshing again at once would only get another such token (a refresh
    /// every tick). Such a session is refreshed at most once a minute; a
    /// `401 TOKEN_EXPIRED` still refreshes it at once.
    func clockAheadOfServer(_ session: SessionRecord, now: Timestamp) -> Bool {
        guard let accessExpiry = session.accessTokenExpiresAt, accessExpiry <= session.updatedAt else { return false }
        return now < session.updatedAt.adding(milliseconds: 60_000)
    }

    /// Whether the client's access token is to be refreshed before it is used for a request.
    func tokenNeedsRefresh(_ clientId: String, _ secrets: SessionSecrets) throws -> Bool {
        let now = now()
        guard let expiry = secrets.session.accessTokenExpiresAt, now.adding(milliseconds: 15_000) >= expiry else {
            return false
        }
        return !((try store.session(client: clientId)).map { clockAheadOfServer($0, now: now) } ?? false)
    }

    /// A refresh time before the access token expires: at 75–90% of its
    /// remaining life (random jitter), at least 2 s before expiry.
    func refreshTime(now: Timestamp, accessExpiry: Timestamp, updatedAt: Timestamp) -> Timestamp {
        let life = max(0, accessExpiry.millisecondsSince1970 - updatedAt.millisecondsSince1970)
        let fraction = Double.random(in: 0.75...0.9)
        let at = updatedAt.millisecondsSince1970 + Int64(Double(life) * fraction)
        return Timestamp(millisecondsSince1970: min(at, accessExpiry.millisecondsSince1970 - 2_000))
    }

    // MARK: - Sign-in and the end of a session

    /// Keeps the session an exchange (or a reconciliation) issued. Published
    /// with the attempt's commit that follows, in that order.
    func signedIn(client: String, session: IssuedSession, attemptId: String) throws {
        cache[client] = SessionSecrets(session: session, attemptId: attemptId)
        nextRefresh[client] = nil
        nextVerify[client] = now().adding(milliseconds: verifyIntervalMilliseconds)
        var record = SessionRecord(
            client: client, status: .signedIn, account: session.account, authMethod: session.authMethod,
            authenticatedAt: session.authenticatedAt, expiresAt: session.expiresAt,
            accessTokenExpiresAt: session.accessTokenExpiresAt, attemptId: attemptId, updatedAt: now(),
            verifiedAt: now())
        // A revoke still owed for an earlier session stays owed.
        record.revokePending = (try store.session(client: client))?.revokePending ?? false
        try save(record, project: false)
        logger.info(
            "signed in",
            ["client": client, "attempt.id": attemptId, Logger.messageIDKey: LogEvent.signInCompleted])
        // Its refresh time is worked out by the timer.
        timer.scheduled(now())
    }

    /// Ends a session that ended elsewhere: revoked at the server, expired,
    /// or its tokens lost. Removes its vault item and notifies subscribers.
    nonisolated(nonsending) func end(_ clientId: String, status: SessionStatus, reason: String?) async throws {
        guard var record = try store.session(client: clientId), record.status == .signedIn else { return }
        record.status = status
        record.reason = reason
        record.updatedAt = now()
        try save(record, project: false)
        forget(clientId)
        try? await vault.remove(attributes: VaultKeys.session(client: clientId))
        logger.notice("session ended", ["client": clientId, "status": status.rawValue, "reason": reason ?? "-"])
        project(clientId)
    }

    private func forget(_ clientId: String) {
        cache[clientId] = nil
        nextRefresh[clientId] = nil
        nextVerify[clientId] = nil
    }

    // MARK: - session.signOut

    /// Signs out locally at once, then revokes at the server; when the
    /// server cannot be reached, the revoke is owed and retried later.
    nonisolated(nonsending) func signOut(client clientId: String) async throws -> SessionView {
        guard let client = clients[clientId] else { throw BrokerError.clientUnknown(clientId) }
        guard var record = try store.session(client: clientId), record.status != .signedOut else {
            return try view(clientId)
        }
        let keys = VaultKeys.session(client: clientId)
        let secrets: SessionSecrets?
        do { secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys) } catch {
            throw error.brokerError
        }
        // Signed out locally first, with the revoke owed; then the tokens move
        // to the owed-revoke item. A crash in between leaves them in the
        // session item, where the owed revoke finds them.
        record = try store.session(client: clientId) ?? record
        record.status = .signedOut
        record.reason = nil
        record.revokePending = record.revokePending || secrets != nil
        record.updatedAt = now()
        try save(record, project: false)
        forget(clientId)
        logger.info("signed out", ["client": clientId])
        project(clientId)
        if let secrets {
            do {
                try await vault.storeJSON(
                    secrets, label: VaultKeys.revokeLabel(appName: client.appName),
                    attributes: VaultKeys.pendingRevoke(client: clientId))
                TestFaults.hit("after-revoke-item")
                try? await vault.remove(attributes: keys)
            } catch {
                logger.notice("the owed revoke keeps the session item", ["client": clientId, "error": "\(error)"])
            }
        }
        if record.revokePending && revokesInFlight.contains(clientId) {
            // The timer's retry is sending it now: answer once that is settled.
            await withCheckedContinuation { revokeWaiters[clientId, default: []].append($0) }
        } else if record.revokePending {
            await revokePending(clientId)
        }
        return try view(clientId)
    }

    /// Revokes a signed-out session at the server (RFC 7009), at most once
    /// in flight per client (docs/protocol.md §4). The revoke stays owed only when
    /// it provably never reached the server (`notSent`); one that may have
    /// reached it (no answer, a 5xx, a broken answer) is never sent again.
    nonisolated(nonsending) func revokePending(_ clientId: String) async {
        guard !revokesInFlight.contains(clientId),
            let record = try? store.session(client: clientId), record.revokePending
        else { return }
        revokesInFlight.insert(clientId)
        defer {
            revokesInFlight.remove(clientId)
            for waiter in revokeWaiters.removeValue(forKey: clientId) ?? [] { waiter.resume() }
        }
        let keys = VaultKeys.pendingRevoke(client: clientId)
        // The tokens are in the owed-revoke item, or still in the session
        // item when the broker stopped before moving them.
        let signedOut = record.status != .signedIn
        var secrets: SessionSecrets?
        do {
            secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys)
            if secrets == nil && signedOut {
                secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: VaultKeys.session(client: clientId))
            }
        } catch {
            // Cannot read the keyring now: the revoke stays owed.
            logger.notice(
                "sign-out revoke postponed: keyring",
                ["client": clientId, "error": "\(error)", Logger.messageIDKey: LogEvent.revokeOwed])
            timer.scheduled(now().adding(milliseconds: Self.revokeRetryMilliseconds))
            return
        }
        if let secrets {
            do {
                TestFaults.hit("before-signout-revoke")
                _ = try await servers[clientId]!.revoke(secrets.session)
                TestFaults.hit("after-signout-revoke")
                logger.info("signed-out session revoked at the server", ["client": clientId])
            } catch {
                switch error {
                case .notSent:
                    logger.notice(
                        "sign-out revoke owed: the server could not be reached",
                        ["client": clientId, "error": "\(error)", Logger.messageIDKey: LogEvent.revokeOwed])
                    timer.scheduled(now().adding(milliseconds: Self.revokeRetryMilliseconds))
                    return
                case .refused:
                    logger.info("signed-out session revoked at the server", ["client": clientId])
                default:
                    logger.warning(
                        "sign-out revoke may not have reached the server; it is not sent again (docs/protocol.md §4)",
                        ["client": clientId, "error": "\(error)"])
                }
            }
        }
        try? await vault.remove(attributes: keys)
        if signedOut { try? await vault.remove(attributes: VaultKeys.session(client: clientId)) }
        if var record = try? store.session(client: clientId), record.revokePending {
            record.revokePending = false
            record.updatedAt = now()
            try? store.save(record)
        }
    }

    // MARK: - Timer

    /// The timer's session work: owed revokes are tried again, sessions past
    /// their absolute expiry end, access tokens are refreshed before they
    /// expire (with jitter), and sessions are verified with `GET session` on
    /// a slow interval. Answers the clients due for a refresh and for a check
    /// (run off the timer by the engine), and when this work is next due.
    nonisolated(nonsending) func maintain() async -> (refresh: [String], verify: [String], due: Timestamp?) {
        var due: Timestamp?
        func consider(_ at: Timestamp) { if due.map({ at < $0 }) ?? true { due = at } }
        guard let sessions = try? store.sessions() else { return ([], [], nil) }
        for session in sessions where session.revokePending {
            await revokePending(session.client)
        }
        var refresh: [String] = []
        var verify: [String] = []
        let now = now()
        for session in (try? store.sessions()) ?? sessions {
            if session.revokePending && !revokesInFlight.contains(session.client) {
                consider(now.adding(milliseconds: Self.revokeRetryMilliseconds))
            }
            guard session.status == .signedIn else { continue }
            let client = session.client
            guard clients[client] != nil else { continue }
            if let expires = session.expiresAt, now >= expires {
                try? await end(client, status: .expired, reason: ServerErrorCode.sessionExpired.rawValue)
                continue
            }
            if let expires = session.expiresAt { consider(expires) }
            if let accessExpiry = session.accessTokenExpiresAt,
                accessExpiry < (session.expiresAt ?? accessExpiry.adding(milliseconds: 1))
            {
                if refreshing[client] != nil {
                    // Its end schedules the next one.
                } else if clockAheadOfServer(session, now: now) {
                    consider(session.updatedAt.adding(milliseconds: 60_000))
                } else {
                    let at =
                        nextRefresh[client] ?? refreshTime(now: now, accessExpiry: accessExpiry, updatedAt: session.updatedAt)
                    nextRefresh[client] = at
                    if now >= at {
                        nextRefresh[client] = now.adding(milliseconds: 5_000)
                        consider(now.adding(milliseconds: 5_000))
                        refresh.append(client)
                        continue
                    }
                    consider(at)
                }
            }
            let verifyDue = nextVerify[client] ?? now
            if now >= verifyDue {
                nextVerify[client] = now.adding(milliseconds: verifyIntervalMilliseconds)
                verify.append(client)
            }
            consider(nextVerify[client]!)
        }
        return (refresh, verify, due)
    }

    /// Checks one session with `GET session`; a session that ended at the
    /// server ends here with the server's code as the reason. Answers the
    /// secrets to refresh when the server says the access token expired.
    nonisolated(nonsending) func verify(_ clientId: String) async -> SessionSecrets? {
        guard let secrets = try? await current(clientId) else { return nil }
        let failure: LoginServerError
        do {
            _ = try await servers[clientId]!.session(accessToken: secrets.session.accessToken)
            if var record = try? store.session(client: clientId), record.status == .signedIn {
                record.verifiedAt = now()
                try? store.save(record)
            }
            return nil
        } catch {
            failure = error
        }
        guard case .refused(_, let code, _, _) = failure else { return nil }
        switch code {
        case .tokenExpired:
            return secrets
        case .sessionRevoked, .authUserDisabled, .unauthenticated:
            try? await end(clientId, status: .revoked, reason: code.rawValue)
        case .sessionExpired:
            try? await end(clientId, status: .expired, reason: code.rawValue)
        default:
            break
        }
        return nil
    }
}
