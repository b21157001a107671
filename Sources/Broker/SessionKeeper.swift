import BrokerCore
import BrokerStore
import BrowserLoginProtocol

/// The one owner of session state: each signed-in client's secrets (read
/// once from the vault), the refresh and verification schedules, the
/// `session.wait` callers, the sign-out revokes in flight, and `SessionBoard`,
/// the one in-memory projection of the public session views. It is the only
/// code that writes session records and session vault items, through methods
/// that say what happened: `adopt` (a sign-in), `refreshNow` (a rotation),
/// `signOut`, `end` (ended elsewhere), `verify`, `revokeLost`.
///
/// A session's changes are serialised per client (`beginChange`), and each
/// sign-in and each end starts a new generation of the client's session: a
/// refresh, a verification or an `http.request` answer applies only to the
/// generation its secrets were read in. A refresh answered after a sign-out
/// (or after the session ended or was replaced) revokes what it got and keeps
/// none of it; no request to a server is made while a change is held.
///
/// Owned by the engine actor and used only from it: its async methods run on
/// the caller's actor (`nonisolated(nonsending)`), so a step re-reads what it
/// decides on after each await, as the engine's own steps do.
final class SessionKeeper {
    private let store: BrokerStore
    private let clients: [String: ClientConfig]
    private let vault: any SecretVault
    private let servers: [String: any SignInProtocol]
    private let clock: any BrokerCore.Clock
    private let logger: Logger
    private let hub: EventHub
    private let board: SessionBoard
    private let timer: TimerSignal
    /// How often sessions are checked with `GET session`.
    private let verifyIntervalMilliseconds: Int64

    /// Each signed-in client's session secrets, read once from the vault.
    private var cache: [String: SessionSecrets] = [:]
    /// The callers of each client's refresh in flight: concurrent callers share one.
    private var refreshing: [String: [CheckedContinuation<SessionSecrets, any Error>]] = [:]
    /// Clients whose sign-out revoke is being sent now: at most one request per session in flight.
    private var revokesInFlight: Set<String> = []
    /// `session.signOut` calls waiting for the revoke in flight (the timer's retry) to settle.
    private var revokeWaiters: [String: [CheckedContinuation<Void, Never>]] = [:]
    /// When each session is next refreshed and verified.
    private(set) var nextRefresh: [String: Timestamp] = [:]
    private var nextVerify: [String: Timestamp] = [:]
    /// `session.wait` callers per client.
    private(set) var waiters: [String: [UInt64: CheckedContinuation<SessionView?, Never>]] = [:]
    private var waiterCounter: UInt64 = 0
    /// The last session view published per client, to publish changes only.
    private var published: [String: SessionView] = [:]
    /// Each client's session generation: a new one at each sign-in and each end.
    private var generations: [String: UInt64] = [:]
    /// Clients whose session is being changed now, and the changes waiting their turn.
    private var changing: Set<String> = []
    private var queuedChanges: [String: [CheckedContinuation<Void, Never>]] = [:]

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

    func addWaiter(client: String, id: UInt64, _ continuation: CheckedContinuation<SessionView?, Never>) {
        waiters[client, default: [:]][id] = continuation
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

    // MARK: - One change at a time

    /// Waits until no other change of the client's session is in progress;
    /// changes run in the order they asked. Ended with `endChange`.
    private nonisolated(nonsending) func beginChange(_ client: String) async {
        if changing.insert(client).inserted { return }
        await withCheckedContinuation { queuedChanges[client, default: []].append($0) }
    }

    /// Hands the client's session to the next change waiting, if any.
    private func endChange(_ client: String) {
        guard var queue = queuedChanges[client], !queue.isEmpty else {
            changing.remove(client)
            return
        }
        let next = queue.removeFirst()
        queuedChanges[client] = queue.isEmpty ? nil : queue
        next.resume()
    }

    private func generation(_ client: String) -> UInt64 { generations[client, default: 0] }

    /// A sign-in or an end: what was read of the session before no longer applies.
    private func newGeneration(_ client: String) { generations[client, default: 0] += 1 }

    // MARK: - Secrets and refresh

    /// The signed-in session's secrets, or `NOT_SIGNED_IN`.
    nonisolated(nonsending) func current(_ clientId: String) async throws -> SessionSecrets {
        while true {
            guard let record = try store.session(client: clientId), record.status == .signedIn else {
                throw BrokerError(.notSignedIn, "the client is not signed in; start a sign-in with login.start")
            }
            if let cached = cache[clientId] { return cached }
            let generation = generation(clientId)
            let found: SessionSecrets?
            do {
                found = try await vault.lookupJSON(SessionSecrets.self, attributes: VaultKeys.session(client: clientId))
            } catch { throw error.brokerError }
            // Signed out or in again meanwhile: read what is current now.
            guard generation == self.generation(clientId) else { continue }
            guard var found else {
                // Not in the keyring now is not "gone" (a keyring restored from a
                // backup, another keyring daemon): the session stays signed in and
                // works again once its item is back; signing out ends it.
                throw BrokerError(
                    .vaultUnavailable,
                    "the session's tokens are not in the keyring now; unlock or restore the login keyring, or sign out and sign in again"
                )
            }
            found.generation = generation
            if try store.session(client: clientId)?.status == .signedIn { cache[clientId] = found }
            return found
        }
    }

    /// Adds a caller of the client's refresh; true when none is in flight
    /// (the caller starts it), false when it joined the one in flight.
    func awaitRefresh(_ clientId: String, _ continuation: CheckedContinuation<SessionSecrets, any Error>) -> Bool {
        refreshing[clientId, default: []].append(continuation)
        return refreshing[clientId]!.count == 1
    }

    /// The client's refresh ended: every caller gets its result.
    func refreshEnded(_ clientId: String, _ result: Result<SessionSecrets, any Error>) {
        for continuation in refreshing.removeValue(forKey: clientId) ?? [] { continuation.resume(with: result) }
    }

    /// Rotates the session's tokens (§5.7), for `BrokerEngine.refreshSession`,
    /// which shares one run among concurrent callers. A lost answer is
    /// repeated once (inside the grace window the server gives the same
    /// successor). The new pair is in the vault before either token is used;
    /// an answer for a generation that is no longer current is revoked.
    nonisolated(nonsending) func refreshNow(_ clientId: String, current: SessionSecrets) async throws -> SessionSecrets {
        let server = servers[clientId]!
        guard current.session.refreshToken != nil else {
            // A provider that gave no refresh token: the session ends with its access token.
            try await end(clientId, status: .expired, reason: "TOKEN_EXPIRED", generation: current.generation)
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
            // Issue 31 (OAUTH.md §4): these refusals end the session; a bodiless 400/401 arrives as invalid_grant.
            if case .providerRefused(let status, let code, _) = failure, status == 400 || status == 401,
                ["invalid_grant", "invalid_client", "unauthorized_client"].contains(code)
            {
                if code != "invalid_grant" {
                    logger.warning(
                        "the provider refused the client at refresh: check ClientId=, ClientSecret= and the provider's client settings",
                        ["client": clientId, "error": code])
                }
                try await end(clientId, status: .expired, reason: "REFRESH_REJECTED", generation: current.generation)
                throw BrokerError(
                    .notSignedIn, "the identity provider refused the refresh token (\(code)); sign in again",
                    providerError: code)
            }
            if case .refused(_, let code, _, _) = failure,
                code == .sessionRevoked || code == .sessionExpired || code == .authUserDisabled
            {
                try await end(
                    clientId, status: code == .sessionExpired ? .expired : .revoked, reason: code.rawValue,
                    generation: current.generation)
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
        return try await refreshed(clientId, next)
    }

    /// Keeps a refresh's answer: the new pair in the vault, then the record.
    /// When the session it belongs to ended or was replaced meanwhile, the
    /// pair is revoked and none of it is kept as the session.
    private nonisolated(nonsending) func refreshed(_ clientId: String, _ next: SessionSecrets) async throws
        -> SessionSecrets
    {
        guard let client = clients[clientId] else { throw BrokerError.clientUnknown(clientId) }
        await beginChange(clientId)
        let live: Bool
        do {
            let record = try store.session(client: clientId)
            live = next.generation == generation(clientId) && record?.status == .signedIn
        } catch {
            endChange(clientId)
            throw error
        }
        guard live else {
            endChange(clientId)
            await revokeSuperseded(clientId, next)
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        defer { endChange(clientId) }
        do {
            try await vault.storeJSON(
                next, label: VaultKeys.sessionLabel(appName: client.appName, email: next.session.account.email),
                attributes: VaultKeys.session(client: clientId))
        } catch { throw error.brokerError }
        guard var record = try store.session(client: clientId), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        record.accessTokenExpiresAt = next.session.accessTokenExpiresAt
        record.expiresAt = next.session.expiresAt
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

    /// A refresh answered after its session ended: what it issued is owed a
    /// revoke, as a signed-out session's tokens are, and sent now.
    private nonisolated(nonsending) func revokeSuperseded(_ clientId: String, _ secrets: SessionSecrets) async {
        guard let client = clients[clientId] else { return }
        logger.notice("a refresh was answered after its session ended: its tokens are revoked, not kept", ["client": clientId])
        await beginChange(clientId)
        var owed = false
        do {
            try await vault.storeJSON(
                secrets, label: VaultKeys.revokeLabel(appName: client.appName),
                attributes: VaultKeys.pendingRevoke(client: clientId))
            if var record = try store.session(client: clientId) {
                record.revokePending = true
                record.updatedAt = now()
                try store.save(record)
                owed = true
            }
        } catch {
            logger.notice("cannot keep the owed revoke; it is sent once now", ["client": clientId, "error": "\(error)"])
        }
        endChange(clientId)
        if owed {
            await revokePending(clientId)
        } else {
            _ = try? await servers[clientId]!.revoke(secrets.session)
        }
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

    /// Keeps the session an exchange (or a reconciliation) issued: its tokens
    /// in the vault (a vault failure is thrown as the `VaultError`), then its
    /// record. Published with the attempt's commit that follows, in that order.
    nonisolated(nonsending) func adopt(client: String, session: IssuedSession, attemptId: String) async throws {
        guard let config = clients[client] else { throw BrokerError.clientUnknown(client) }
        await beginChange(client)
        defer { endChange(client) }
        try await vault.storeJSON(
            SessionSecrets(session: session, attemptId: attemptId),
            label: VaultKeys.sessionLabel(appName: config.appName, email: session.account.email),
            attributes: VaultKeys.session(client: client))
        newGeneration(client)
        cache[client] = SessionSecrets(session: session, attemptId: attemptId, generation: generation(client))
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
    /// With a `generation`, only while that generation is current (what was
    /// learnt with its secrets says nothing of a later session).
    nonisolated(nonsending) func end(
        _ clientId: String, status: SessionStatus, reason: String?, generation: UInt64? = nil
    ) async throws {
        await beginChange(clientId)
        defer { endChange(clientId) }
        if let generation, generation != self.generation(clientId) { return }
        guard var record = try store.session(client: clientId), record.status == .signedIn else { return }
        record.status = status
        record.reason = reason
        record.updatedAt = now()
        try save(record, project: false)
        newGeneration(clientId)
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
        let owed: Bool
        do {
            // A refresh in flight is superseded: its answer finds a new generation and is revoked.
            await beginChange(clientId)
            defer { endChange(clientId) }
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
            newGeneration(clientId)
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
            owed = record.revokePending
        }
        if owed && revokesInFlight.contains(clientId) {
            // The timer's retry is sending it now: answer once that is settled.
            await withCheckedContinuation { revokeWaiters[clientId, default: []].append($0) }
        } else if owed {
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
        await beginChange(clientId)
        defer { endChange(clientId) }
        // A refresh answered after the sign-out may have put its pair in the
        // item meanwhile: that revoke is owed still.
        let owedNow = try? await vault.lookupJSON(SessionSecrets.self, attributes: keys)
        if let owedNow = owedNow ?? nil, owedNow.session.accessToken != secrets?.session.accessToken {
            timer.scheduled(now().adding(milliseconds: Self.revokeRetryMilliseconds))
            return
        }
        try? await vault.remove(attributes: keys)
        if signedOut, (try? store.session(client: clientId))?.status != .signedIn {
            try? await vault.remove(attributes: VaultKeys.session(client: clientId))
        }
        revokeSettled(clientId)
    }

    /// Nothing is owed any more for the client's signed-out session.
    private func revokeSettled(_ clientId: String) {
        if var record = try? store.session(client: clientId), record.revokePending {
            record.revokePending = false
            record.updatedAt = now()
            try? store.save(record)
        }
    }

    /// An owed revoke whose tokens are gone with the file vault's key: it is
    /// dropped (the session ends at the server when it expires).
    func revokeLost(_ clientId: String) { revokeSettled(clientId) }

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
            if secrets.generation == generation(clientId), var record = try? store.session(client: clientId),
                record.status == .signedIn
            {
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
            try? await end(clientId, status: .revoked, reason: code.rawValue, generation: secrets.generation)
        case .sessionExpired:
            try? await end(clientId, status: .expired, reason: code.rawValue, generation: secrets.generation)
        default:
            break
        }
        return nil
    }
}
