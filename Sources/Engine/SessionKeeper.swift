import BrokerCore
import BrokerStore
import BrowserLoginProtocol

/// One account's session of one client: what the session keeper keys its
/// state by (docs/rpc.md "Several accounts per client").
struct AccountSlot: Hashable, Sendable {
    let client: String
    let account: String
}

/// The one owner of session state: each signed-in account's secrets (read
/// once from the vault), the refresh and verification schedules, the
/// `session.wait` callers, the sign-out revokes in flight, and `SessionBoard`,
/// the one in-memory projection of the public session views. It is the only
/// code that writes session records and session vault items, through methods
/// that say what happened: `adopt` (a sign-in), `refreshNow` (a rotation),
/// `signOut`, `end` (ended elsewhere), `verify`, `revokeLost`.
///
/// A client holds one session per account (`AccountSlot`); one is current.
/// A session's changes are serialised per account (`beginChange`), and each
/// sign-in and each end starts a new generation of the account's session: a
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

    /// Each signed-in account's session secrets, read once from the vault.
    private var cache: [AccountSlot: SessionSecrets] = [:]
    /// The callers of each session's refresh in flight: concurrent callers share one.
    private var refreshing: [AccountSlot: [CheckedContinuation<SessionSecrets, any Error>]] = [:]
    /// Sessions whose sign-out revoke is being sent now: at most one request per session in flight.
    private var revokesInFlight: Set<AccountSlot> = []
    /// Owed revokes that cannot be sent now for a reason of this machine's
    /// (a DPoP key that cannot be used), and when they are tried again.
    private var revokesDeferred: [AccountSlot: Timestamp] = [:]
    /// Owed revokes whose server could not be reached, with the wait before
    /// the next try after another failure (0 after the first: the next timer
    /// round tries again at once); doubled each time up to `revokeRetryCapMilliseconds`.
    private var revokeBackoff: [AccountSlot: Int64] = [:]
    /// `session.signOut` calls waiting for the revoke in flight (the timer's retry) to settle.
    private var revokeWaiters: [AccountSlot: [CheckedContinuation<Void, Never>]] = [:]
    /// When each session is next refreshed and verified.
    private(set) var nextRefresh: [AccountSlot: Timestamp] = [:]
    private var nextVerify: [AccountSlot: Timestamp] = [:]
    /// A `session.wait` caller: of the current account (`account` nil) or of one account.
    struct Waiter {
        let account: String?
        let continuation: CheckedContinuation<SessionView?, Never>
    }
    /// `session.wait` callers per client.
    private(set) var waiters: [String: [UInt64: Waiter]] = [:]
    private var waiterCounter: UInt64 = 0
    /// The last session views published per client: the client's own view
    /// under "", each other account's under its key.
    private var published: [String: [String: SessionView]] = [:]
    /// Each session's generation: a new one at each sign-in and each end.
    private var generations: [AccountSlot: UInt64] = [:]
    /// Sessions being changed now, and the changes waiting their turn.
    private var changing: Set<AccountSlot> = []
    private var queuedChanges: [AccountSlot: [CheckedContinuation<Void, Never>]] = [:]

    /// An owed sign-out revoke is tried again on each timer round this far apart.
    static let revokeRetryMilliseconds: Int64 = 250
    /// The reason a session records when its own expiry passes (the word the
    /// public state uses whatever the protocol, docs/rpc.md `session.changed`).
    static let expiredReason = "SESSION_EXPIRED"
    /// An owed revoke whose server stays unreachable is tried at most this far apart.
    static let revokeRetryCapMilliseconds: Int64 = 5_000
    /// A refresh or revoke that cannot be sent for a reason of this machine's
    /// (not the network's: a DPoP key that cannot be used) is tried again
    /// by the timer this far apart, not at its usual pace.
    static let unusableRetryMilliseconds: Int64 = 60_000

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
        // A session kept before accounts gets its key (`004-accounts`).
        for record in try store.sessions() where record.accountKey.isEmpty {
            guard let config = clients[record.client], let userId = record.account?.userId else { continue }
            try store.fillAccountKey(client: record.client, key: AccountKeys.key(issuer: config.issuer, userId: userId))
        }
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

    /// The attempt states that make a client without a session `signingIn`:
    /// the only way an attempt changes a client's view.
    static let signingInStates: [AttemptState] = [.starting, .waiting, .exchanging]

    static func computeView(_ store: BrokerStore, _ client: String) throws -> SessionView {
        let record = try store.session(client: client)
        if let record, record.status == .signedIn { return record.view }
        let live = try store.list(client: client, states: signingInStates, limit: 1)
        if !live.isEmpty { return SessionView(client: client, status: .signingIn) }
        return record?.view ?? .signedOut(client)
    }

    /// One account's session (`account` nil: the client's view), or `ACCOUNT_UNKNOWN`.
    func view(_ client: String, account: String?) throws -> SessionView {
        guard let account else { return try view(client) }
        guard let record = try store.session(client: client, account: account) else {
            throw Self.accountUnknown(client)
        }
        return record.view
    }

    /// `session.list`: the current account first, then the most recently used.
    func list(_ client: String) throws -> [SessionView] {
        let records = try store.sessions(client: client)
        if records.isEmpty { return [try view(client)] }
        return records.map(\.view)
    }

    static func accountUnknown(_ client: String) -> BrokerError {
        BrokerError(
            .accountUnknown,
            "'account' is not one of this client's accounts; list them with session.list (browser-login accounts \(client))")
    }

    /// The session an `account` param names (nil: the current account's), or
    /// `ACCOUNT_UNKNOWN`; `NOT_SIGNED_IN` when the client has no account at all.
    func slot(_ client: String, account: String?) throws -> AccountSlot {
        if let account {
            guard try store.session(client: client, account: account) != nil else { throw Self.accountUnknown(client) }
            return AccountSlot(client: client, account: account)
        }
        guard let record = try store.session(client: client) else {
            throw BrokerError(.notSignedIn, "the client is not signed in; start a sign-in with login.start")
        }
        return AccountSlot(client: client, account: record.accountKey)
    }

    /// The accounts that count toward the limit: every one not signed out.
    func heldAccounts(_ client: String) throws -> Int {
        try store.sessions(client: client).filter { $0.status != .signedOut }.count
    }

    /// `session.use`: makes the account current (a `session.changed` for the
    /// old current account and the new one).
    func use(client: String, account: String) throws -> SessionView {
        guard var record = try store.session(client: client, account: account) else { throw Self.accountUnknown(client) }
        if !record.current {
            let previous = try store.session(client: client)
            record.current = true
            record.usedAt = now()
            try store.save(record)
            if let previous { dropIfSettled(AccountSlot(client: client, account: previous.accountKey)) }
            logger.info("account made current", ["client": client])
            project(client)
        }
        return try view(client)
    }

    /// An `http.request` with an `account` that is not the current one: it
    /// becomes the most recently used of the others.
    func used(_ slot: AccountSlot) {
        guard var record = try? store.session(client: slot.client, account: slot.account), !record.current else { return }
        record.usedAt = now()
        try? store.save(record)
    }

    /// The vault attributes of a session's items: keyed by client and
    /// account, or by client only (`vaultKeyed` false: as before accounts).
    static func sessionKeys(_ record: SessionRecord) -> [String: String] {
        VaultKeys.session(client: record.client, account: record.vaultKeyed ? record.accountKey : nil)
    }

    static func revokeKeys(_ record: SessionRecord) -> [String: String] {
        VaultKeys.pendingRevoke(client: record.client, account: record.vaultKeyed ? record.accountKey : nil)
    }

    /// The account key of the session the secrets are of.
    func accountKey(_ client: String, _ secrets: SessionSecrets) -> String? {
        clients[client].map { AccountKeys.key(issuer: $0.issuer, userId: secrets.session.account.userId) }
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

    /// Refreshes the board and publishes each of the client's views that is
    /// not the one last published (the other accounts first, then the
    /// client's own); a sign-in answers the waiters.
    func project(_ client: String) {
        guard let view = refreshBoard(client) else { return }
        let records = (try? store.sessions(client: client)) ?? []
        var last = published[client] ?? [:]
        var changes: [SessionView] = []
        var kept: [String: SessionView] = [:]
        for record in records where !record.current && !record.accountKey.isEmpty {
            let other = record.view
            kept[record.accountKey] = other
            if last[record.accountKey] != other { changes.append(other) }
        }
        if last[""] != view { changes.append(view) }
        kept[""] = view
        last = kept
        published[client] = last
        for change in changes { hub.publish(.sessionChanged(change)) }
        guard var list = waiters[client], !list.isEmpty else { return }
        for (id, waiter) in list {
            if let account = waiter.account {
                guard let record = records.first(where: { $0.accountKey == account }), record.status == .signedIn else {
                    continue
                }
                list[id] = nil
                waiter.continuation.resume(returning: record.current ? view : record.view)
            } else if view.status == .signedIn {
                list[id] = nil
                waiter.continuation.resume(returning: view)
            }
        }
        waiters[client] = list.isEmpty ? nil : list
    }

    /// Saves a session record; the board follows at once, subscribers when `project`.
    func save(_ record: SessionRecord, project: Bool = true) throws {
        try store.save(record)
        if project { self.project(record.client) } else { refreshBoard(record.client) }
    }

    /// Removes the row of a signed-out account that is not current and owes nothing.
    private func dropIfSettled(_ slot: AccountSlot) {
        guard let record = try? store.session(client: slot.client, account: slot.account), !record.current,
            record.status == .signedOut, !record.revokePending, !revokesInFlight.contains(slot)
        else { return }
        try? store.deleteSession(client: slot.client, account: slot.account)
        forget(slot)
        if published[slot.client]?[slot.account] != nil { published[slot.client]?[slot.account] = nil }
    }

    // MARK: - session.wait

    func newWaiterId() -> UInt64 {
        waiterCounter += 1
        return waiterCounter
    }

    func addWaiter(
        client: String, account: String? = nil, id: UInt64, _ continuation: CheckedContinuation<SessionView?, Never>
    ) {
        waiters[client, default: [:]][id] = Waiter(account: account, continuation: continuation)
    }

    func timeOutWaiter(client: String, id: UInt64) {
        if let waiter = waiters[client]?.removeValue(forKey: id) {
            waiter.continuation.resume(returning: nil)
        }
    }

    func releaseWaiters() {
        for (_, list) in waiters { for waiter in list.values { waiter.continuation.resume(returning: nil) } }
        waiters.removeAll()
    }

    // MARK: - One change at a time

    /// Waits until no other change of the session is in progress; changes
    /// run in the order they asked. Ended with `endChange`.
    private nonisolated(nonsending) func beginChange(_ slot: AccountSlot) async {
        if changing.insert(slot).inserted { return }
        await withCheckedContinuation { queuedChanges[slot, default: []].append($0) }
    }

    /// Hands the session to the next change waiting, if any.
    private func endChange(_ slot: AccountSlot) {
        guard var queue = queuedChanges[slot], !queue.isEmpty else {
            changing.remove(slot)
            return
        }
        let next = queue.removeFirst()
        queuedChanges[slot] = queue.isEmpty ? nil : queue
        next.resume()
    }

    private func generation(_ slot: AccountSlot) -> UInt64 { generations[slot, default: 0] }

    /// A sign-in or an end: what was read of the session before no longer applies.
    private func newGeneration(_ slot: AccountSlot) { generations[slot, default: 0] += 1 }

    private func record(_ slot: AccountSlot) throws -> SessionRecord? {
        try store.session(client: slot.client, account: slot.account)
    }

    // MARK: - Secrets and refresh

    /// The signed-in session's secrets, or `NOT_SIGNED_IN`.
    nonisolated(nonsending) func current(_ slot: AccountSlot) async throws -> SessionSecrets {
        while true {
            guard let record = try record(slot), record.status == .signedIn else {
                throw BrokerError(.notSignedIn, "the client is not signed in; start a sign-in with login.start")
            }
            if let cached = cache[slot] { return cached }
            let generation = generation(slot)
            let found: SessionSecrets?
            do {
                found = try await vault.lookupJSON(SessionSecrets.self, attributes: Self.sessionKeys(record))
            } catch { throw error.brokerError }
            // Signed out or in again meanwhile: read what is current now.
            guard generation == self.generation(slot) else { continue }
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
            if try self.record(slot)?.status == .signedIn { cache[slot] = found }
            return found
        }
    }

    /// Adds a caller of the session's refresh; true when none is in flight
    /// (the caller starts it), false when it joined the one in flight.
    func awaitRefresh(_ slot: AccountSlot, _ continuation: CheckedContinuation<SessionSecrets, any Error>) -> Bool {
        refreshing[slot, default: []].append(continuation)
        return refreshing[slot]!.count == 1
    }

    /// The session's refresh ended: every caller gets its result.
    func refreshEnded(_ slot: AccountSlot, _ result: Result<SessionSecrets, any Error>) {
        for continuation in refreshing.removeValue(forKey: slot) ?? [] { continuation.resume(with: result) }
    }

    /// Rotates the session's tokens (§5.7), for `BrokerEngine.refreshSession`,
    /// which shares one run among concurrent callers. A lost answer is
    /// repeated once (inside the grace window the server gives the same
    /// successor). The new pair is in the vault before either token is used;
    /// an answer for a generation that is no longer current is revoked.
    nonisolated(nonsending) func refreshNow(_ slot: AccountSlot, current: SessionSecrets) async throws -> SessionSecrets {
        let clientId = slot.client
        let server = servers[clientId]!
        guard current.session.refreshToken != nil else {
            // A provider that gave no refresh token: the session ends with its access token.
            try await end(slot, status: .expired, reason: "TOKEN_EXPIRED", generation: current.generation)
            throw BrokerError(.notSignedIn, "the session's access token expired and cannot be refreshed; sign in again")
        }
        var answer: IssuedSession?
        var lastFailure: SignInFailure?
        for attempt in 0..<2 {
            do {
                answer = try await server.refresh(current.session)
                break
            } catch {
                lastFailure = error
                if case .unanswered = error, attempt == 0, server.repeatsLostRefresh { continue }
                break
            }
        }
        guard let answer else {
            let failure = lastFailure ?? .unanswered(BrokerError(.serverUnreachable, "no answer"), detail: "no answer")
            switch failure {
            case .ended(let ending, let error, _):
                if let warning = ending.warning {
                    logger.warning(
                        warning, ["client": clientId, "error": error.providerError ?? error.serverCode ?? ending.reason])
                }
                try await end(slot, status: ending.status, reason: ending.reason, generation: current.generation)
            case .notSent(let error, let detail) where error.code != .serverUnreachable && error.code != .providerUnreachable:
                // Cannot be done now (a DPoP key that cannot be used): nothing was sent, the session
                // stays; the timer tries again in a minute rather than at its 5 s pace.
                logger.notice(
                    "session refresh not sent: \(error.code.rawValue)", ["client": clientId, "error": detail])
                nextRefresh[slot] = now().adding(milliseconds: Self.unusableRetryMilliseconds)
            default:
                break
            }
            throw failure.brokerError
        }
        var next = current
        next.session = answer
        return try await refreshed(slot, next)
    }

    /// Keeps a refresh's answer: the new pair in the vault, then the record.
    /// When the session it belongs to ended or was replaced meanwhile, the
    /// pair is revoked and none of it is kept as the session.
    private nonisolated(nonsending) func refreshed(_ slot: AccountSlot, _ next: SessionSecrets) async throws
        -> SessionSecrets
    {
        let clientId = slot.client
        guard let client = clients[clientId] else { throw BrokerError.clientUnknown(clientId) }
        await beginChange(slot)
        let live: SessionRecord?
        do {
            let record = try record(slot)
            live = next.generation == generation(slot) && record?.status == .signedIn ? record : nil
        } catch {
            endChange(slot)
            throw error
        }
        guard let live else {
            endChange(slot)
            await revokeSuperseded(slot, next)
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        defer { endChange(slot) }
        do {
            try await vault.storeJSON(
                next, label: VaultKeys.sessionLabel(appName: client.appName, email: next.session.account.email),
                attributes: Self.sessionKeys(live))
        } catch { throw error.brokerError }
        guard var record = try record(slot), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        record.accessTokenExpiresAt = next.session.accessTokenExpiresAt
        record.expiresAt = next.session.expiresAt
        record.updatedAt = now()
        try save(record, project: false)
        cache[slot] = next
        nextRefresh[slot] = nil
        logger.info("session refreshed", ["client": clientId])
        project(clientId)
        // The next refresh time is worked out by the timer.
        timer.scheduled(now())
        return next
    }

    /// A refresh answered after its session ended: what it issued is owed a
    /// revoke, as a signed-out session's tokens are, and sent now.
    private nonisolated(nonsending) func revokeSuperseded(_ slot: AccountSlot, _ secrets: SessionSecrets) async {
        let clientId = slot.client
        guard let client = clients[clientId] else { return }
        logger.notice("a refresh was answered after its session ended: its tokens are revoked, not kept", ["client": clientId])
        await beginChange(slot)
        var owed = false
        do {
            if var record = try record(slot) {
                try await vault.storeJSON(
                    secrets, label: VaultKeys.revokeLabel(appName: client.appName), attributes: Self.revokeKeys(record))
                record = try self.record(slot) ?? record
                record.revokePending = true
                record.updatedAt = now()
                try store.save(record)
                owed = true
            }
        } catch {
            logger.notice("cannot keep the owed revoke; it is sent once now", ["client": clientId, "error": "\(error)"])
        }
        endChange(slot)
        if owed {
            await revokePending(slot)
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

    /// Whether the session's access token is to be refreshed before it is used for a request.
    func tokenNeedsRefresh(_ slot: AccountSlot, _ secrets: SessionSecrets) throws -> Bool {
        let now = now()
        guard let expiry = secrets.session.accessTokenExpiresAt, now.adding(milliseconds: 15_000) >= expiry else {
            return false
        }
        return !((try record(slot)).map { clockAheadOfServer($0, now: now) } ?? false)
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
    /// record; it becomes the client's current account. An account the
    /// client already holds signed in is signed out first (its old session
    /// revoked), never two sessions for one account. A `single` client keeps
    /// one session, as before accounts. Published with the attempt's commit
    /// that follows, in that order.
    nonisolated(nonsending) func adopt(client: String, session: IssuedSession, attemptId: String) async throws {
        guard let config = clients[client] else { throw BrokerError.clientUnknown(client) }
        let key = AccountKeys.key(issuer: config.issuer, userId: session.account.userId)
        let slot = AccountSlot(client: client, account: key)
        if let held = try record(slot), held.status == .signedIn {
            logger.info("account signed in again: its old session is signed out first", ["client": client])
            _ = try await signOut(slot)
        }
        await beginChange(slot)
        defer { endChange(slot) }
        let existing = try record(slot)
        // A row kept from before (an owed revoke) keeps how its items are keyed.
        let keyed = existing?.vaultKeyed ?? (config.accounts == .multiple)
        var record = SessionRecord(
            client: client, accountKey: key, status: .signedIn, account: session.account,
            authMethod: session.authMethod, authenticatedAt: session.authenticatedAt, expiresAt: session.expiresAt,
            accessTokenExpiresAt: session.accessTokenExpiresAt, attemptId: attemptId, updatedAt: now(),
            verifiedAt: now(), current: true, usedAt: now(), vaultKeyed: keyed)
        try await vault.storeJSON(
            SessionSecrets(session: session, attemptId: attemptId),
            label: VaultKeys.sessionLabel(appName: config.appName, email: session.account.email),
            attributes: Self.sessionKeys(record))
        newGeneration(slot)
        cache[slot] = SessionSecrets(session: session, attemptId: attemptId, generation: generation(slot))
        nextRefresh[slot] = nil
        nextVerify[slot] = now().adding(milliseconds: verifyIntervalMilliseconds)
        // A revoke still owed for an earlier session stays owed.
        record.revokePending = existing?.revokePending ?? false
        var replaced: [AccountSlot] = []
        if config.accounts == .single && !keyed {
            // One session per client, as before accounts: the earlier one's row
            // gives way (its items were keyed by client, as this one's are).
            for other in try store.sessions(client: client) where other.accountKey != key && !other.vaultKeyed {
                record.revokePending = record.revokePending || other.revokePending
                replaced.append(AccountSlot(client: client, account: other.accountKey))
            }
        }
        try save(record, project: false)
        for other in replaced {
            try store.deleteSession(client: other.client, account: other.account)
            newGeneration(other)
            forget(other)
            published[client]?[other.account] = nil
        }
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
        _ slot: AccountSlot, status: SessionStatus, reason: String?, generation: UInt64? = nil
    ) async throws {
        await beginChange(slot)
        defer { endChange(slot) }
        if let generation, generation != self.generation(slot) { return }
        guard var record = try record(slot), record.status == .signedIn else { return }
        record.status = status
        record.reason = reason
        record.updatedAt = now()
        // Recorded first (a crash after it still ends the session); the board
        // and the subscribers learn of it once the tokens have left the keyring,
        // so an app told `expired` finds none of them there.
        try store.save(record)
        newGeneration(slot)
        forget(slot)
        try? await vault.remove(attributes: Self.sessionKeys(record))
        logger.notice("session ended", ["client": slot.client, "status": status.rawValue, "reason": reason ?? "-"])
        project(slot.client)
    }

    private func forget(_ slot: AccountSlot) {
        cache[slot] = nil
        nextRefresh[slot] = nil
        nextVerify[slot] = nil
    }

    /// The sessions whose vault items are `item`'s (file vault loss): the
    /// account it names (`VaultKeys.session`), or those of its client keyed by client only.
    func slots(forVaultItem item: [String: String]) -> [AccountSlot] {
        let client = item["client"] ?? ""
        if let account = item["attempt"], !account.isEmpty { return [AccountSlot(client: client, account: account)] }
        return ((try? store.sessions(client: client)) ?? []).filter { !$0.vaultKeyed }.map {
            AccountSlot(client: client, account: $0.accountKey)
        }
    }

    // MARK: - session.signOut

    /// Signs out locally at once, then revokes at the server; when the
    /// server cannot be reached, the revoke is owed and retried later.
    /// Signing out the current account makes the most recently used
    /// signed-in one current.
    nonisolated(nonsending) func signOut(_ slot: AccountSlot) async throws -> SessionView {
        let clientId = slot.client
        guard let client = clients[clientId] else { throw BrokerError.clientUnknown(clientId) }
        let owed: Bool
        do {
            // A refresh in flight is superseded: its answer finds a new generation and is revoked.
            await beginChange(slot)
            defer { endChange(slot) }
            guard var record = try record(slot), record.status != .signedOut else {
                return try view(clientId, account: slot.account)
            }
            let keys = Self.sessionKeys(record)
            let secrets: SessionSecrets?
            do { secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys) } catch {
                throw error.brokerError
            }
            // Signed out locally first, with the revoke owed; then the tokens move
            // to the owed-revoke item. A crash in between leaves them in the
            // session item, where the owed revoke finds them.
            record = try self.record(slot) ?? record
            record.status = .signedOut
            record.reason = nil
            record.revokePending = record.revokePending || secrets != nil
            record.updatedAt = now()
            if record.current,
                let next = try store.sessions(client: clientId).first(where: {
                    !$0.current && $0.status == .signedIn
                })
            {
                var next = next
                next.current = true
                record.current = false
                try store.save(record)
                try save(next, project: false)
            } else {
                try save(record, project: false)
            }
            newGeneration(slot)
            forget(slot)
            logger.info("signed out", ["client": clientId])
            project(clientId)
            if let secrets {
                do {
                    try await vault.storeJSON(
                        secrets, label: VaultKeys.revokeLabel(appName: client.appName),
                        attributes: Self.revokeKeys(record))
                    TestFaults.hit("after-revoke-item")
                    try? await vault.remove(attributes: keys)
                } catch {
                    logger.notice("the owed revoke keeps the session item", ["client": clientId, "error": "\(error)"])
                }
            }
            owed = record.revokePending
        }
        if owed && revokesInFlight.contains(slot) {
            // The timer's retry is sending it now: answer once that is settled.
            await withCheckedContinuation { revokeWaiters[slot, default: []].append($0) }
        } else if owed {
            await revokePending(slot)
        }
        // The client's own view while the account is current (as before accounts), else the account's.
        let after = try record(slot)
        var answer =
            try after.map { $0.current ? try view(clientId) : $0.view }
            ?? SessionView(client: clientId, status: .signedOut, current: false)
        if answer.accountKey == nil && !slot.account.isEmpty && answer.status == .signedOut {
            answer.accountKey = slot.account
        }
        dropIfSettled(slot)
        return answer
    }

    /// Signs out the client's current account (nothing to do without one).
    nonisolated(nonsending) func signOut(client clientId: String) async throws -> SessionView {
        guard let record = try store.session(client: clientId) else { return try view(clientId) }
        return try await signOut(AccountSlot(client: clientId, account: record.accountKey))
    }

    /// Revokes a signed-out session at the server (RFC 7009), at most once
    /// in flight per session (docs/protocol.md §4). The revoke stays owed only when
    /// it provably never reached the server (`notSent`); one that may have
    /// reached it (no answer, a 5xx, a broken answer) is never sent again.
    nonisolated(nonsending) func revokePending(_ slot: AccountSlot) async {
        let clientId = slot.client
        guard !revokesInFlight.contains(slot), let record = try? record(slot), record.revokePending else { return }
        if let until = revokesDeferred[slot], now() < until { return }
        revokesInFlight.insert(slot)
        defer {
            revokesInFlight.remove(slot)
            for waiter in revokeWaiters.removeValue(forKey: slot) ?? [] { waiter.resume() }
        }
        let keys = Self.revokeKeys(record)
        // The tokens are in the owed-revoke item, or still in the session
        // item when the broker stopped before moving them.
        let signedOut = record.status != .signedIn
        var secrets: SessionSecrets?
        do {
            secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys)
            if secrets == nil && signedOut {
                secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: Self.sessionKeys(record))
                // An item keyed by client only may be another account's now: never revoke that one.
                if let found = secrets, accountKey(clientId, found) != slot.account { secrets = nil }
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
                case .notSent(let brokerError, _):
                    if brokerError.code == .serverUnreachable || brokerError.code == .providerUnreachable {
                        // The next round tries again; after that, 250 ms doubling up to 5 s. Said once per outage.
                        let wait = revokeBackoff[slot].map {
                            min(max($0 * 2, Self.revokeRetryMilliseconds), Self.revokeRetryCapMilliseconds)
                        }
                        logger.log(
                            wait == nil ? .notice : .debug, "sign-out revoke owed: the server could not be reached",
                            ["client": clientId, "error": "\(error)", Logger.messageIDKey: LogEvent.revokeOwed])
                        revokeBackoff[slot] = wait ?? 0
                        let until = now().adding(milliseconds: wait ?? Self.revokeRetryMilliseconds)
                        if wait != nil { revokesDeferred[slot] = until }
                        timer.scheduled(until)
                    } else {
                        // Cannot be sent now for a reason of this machine's: owed, tried again later.
                        let until = now().adding(milliseconds: Self.unusableRetryMilliseconds)
                        revokesDeferred[slot] = until
                        logger.notice(
                            "sign-out revoke owed: \(brokerError.code.rawValue)",
                            ["client": clientId, "error": "\(error)", Logger.messageIDKey: LogEvent.revokeOwed])
                        timer.scheduled(until)
                    }
                    return
                case .ended:
                    logger.info("signed-out session revoked at the server", ["client": clientId])
                case .refused:
                    logger.warning(
                        "sign-out revoke refused by the server; it is not sent again (docs/protocol.md §4)",
                        ["client": clientId, "error": "\(error)"])
                case .unanswered, .indefinite:
                    logger.warning(
                        "sign-out revoke may not have reached the server; it is not sent again (docs/protocol.md §4)",
                        ["client": clientId, "error": "\(error)"])
                }
            }
        }
        await beginChange(slot)
        defer { endChange(slot) }
        // A refresh answered after the sign-out may have put its pair in the
        // item meanwhile: that revoke is owed still.
        let owedNow = try? await vault.lookupJSON(SessionSecrets.self, attributes: keys)
        if let owedNow = owedNow ?? nil, owedNow.session.accessToken != secrets?.session.accessToken {
            timer.scheduled(now().adding(milliseconds: Self.revokeRetryMilliseconds))
            return
        }
        try? await vault.remove(attributes: keys)
        if signedOut, let now = try? self.record(slot), now.status != .signedIn, secrets != nil || record.vaultKeyed {
            try? await vault.remove(attributes: Self.sessionKeys(now))
        }
        revokeSettled(slot)
    }

    /// Nothing is owed any more for the signed-out session.
    private func revokeSettled(_ slot: AccountSlot) {
        revokesDeferred[slot] = nil
        revokeBackoff[slot] = nil
        if var record = try? record(slot), record.revokePending {
            record.revokePending = false
            record.updatedAt = now()
            try? store.save(record)
        }
        if !revokesInFlight.contains(slot) { dropIfSettled(slot) }
    }

    /// An owed revoke whose tokens are gone with the file vault's key: it is
    /// dropped (the session ends at the server when it expires).
    func revokeLost(_ slot: AccountSlot) { revokeSettled(slot) }

    // MARK: - Timer

    /// The timer's session work: owed revokes are tried again, sessions past
    /// their absolute expiry end, access tokens are refreshed before they
    /// expire (with jitter), and sessions are verified with `GET session` on
    /// a slow interval. Answers the sessions due for a refresh and for a check
    /// (run off the timer by the engine), and when this work is next due.
    nonisolated(nonsending) func maintain() async -> (refresh: [AccountSlot], verify: [AccountSlot], due: Timestamp?) {
        var due: Timestamp?
        func consider(_ at: Timestamp) { if due.map({ at < $0 }) ?? true { due = at } }
        guard let sessions = try? store.sessions() else { return ([], [], nil) }
        for session in sessions where session.revokePending {
            await revokePending(AccountSlot(client: session.client, account: session.accountKey))
        }
        var refresh: [AccountSlot] = []
        var verify: [AccountSlot] = []
        let now = now()
        for session in (try? store.sessions()) ?? sessions {
            let slot = AccountSlot(client: session.client, account: session.accountKey)
            if session.revokePending && !revokesInFlight.contains(slot) {
                consider(revokesDeferred[slot] ?? now.adding(milliseconds: Self.revokeRetryMilliseconds))
            }
            guard session.status == .signedIn else { continue }
            guard clients[slot.client] != nil else { continue }
            if let expires = session.expiresAt, now >= expires {
                try? await end(slot, status: .expired, reason: Self.expiredReason)
                continue
            }
            if let expires = session.expiresAt { consider(expires) }
            if let accessExpiry = session.accessTokenExpiresAt,
                accessExpiry < (session.expiresAt ?? accessExpiry.adding(milliseconds: 1))
            {
                if refreshing[slot] != nil {
                    // Its end schedules the next one.
                } else if clockAheadOfServer(session, now: now) {
                    consider(session.updatedAt.adding(milliseconds: 60_000))
                } else {
                    let at =
                        nextRefresh[slot] ?? refreshTime(now: now, accessExpiry: accessExpiry, updatedAt: session.updatedAt)
                    nextRefresh[slot] = at
                    if now >= at {
                        nextRefresh[slot] = now.adding(milliseconds: 5_000)
                        consider(now.adding(milliseconds: 5_000))
                        refresh.append(slot)
                        continue
                    }
                    consider(at)
                }
            }
            let verifyDue = nextVerify[slot] ?? now
            if now >= verifyDue {
                nextVerify[slot] = now.adding(milliseconds: verifyIntervalMilliseconds)
                verify.append(slot)
            }
            consider(nextVerify[slot]!)
        }
        return (refresh, verify, due)
    }

    /// Checks one session with `GET session`; a session that ended at the
    /// server ends here with the server's code as the reason. Answers the
    /// secrets to refresh when the server says the access token expired.
    nonisolated(nonsending) func verify(_ slot: AccountSlot) async -> SessionSecrets? {
        guard let secrets = try? await current(slot) else { return nil }
        let check: SessionCheck
        do { check = try await servers[slot.client]!.verify(secrets.session) } catch {
            if case .ended(let ending, _, _) = error {
                try? await end(slot, status: ending.status, reason: ending.reason, generation: secrets.generation)
            }
            return nil
        }
        if check == .accessTokenExpired { return secrets }
        if secrets.generation == generation(slot), var record = try? record(slot), record.status == .signedIn {
            record.verifiedAt = now()
            try? store.save(record)
        }
        return nil
    }
}
