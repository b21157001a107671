import BrokerCore
import BrokerLoopback
import BrokerStore
import BrowserLoginProtocol
import Synchronization
import SystemSupport

/// The broker's entry point for the RPC methods: the sign-in flow of each
/// attempt (Engine+Login, Engine+Reconcile), one path for every protocol
/// (each a `SignInProtocol`, registered by client), over three owners — the attempts
/// and their commits (`AttemptLedger`), the sessions (`SessionKeeper`) and the
/// app's requests (`AppRequestProxy`). It persists each change before it acts
/// on it (docs/protocol.md §7 durability order), publishes each committed
/// change to subscribers in commit order (`BrokerEvent`), and keeps secrets
/// in the vault only.
///
/// An actor: its awaits on the vault and the server let other calls run, so
/// every step that decides on a state re-reads the record after an await.
/// The ledger and the keeper are its own (used from it only), so a commit or
/// a session write never adds a suspension point to a step.
public actor BrokerEngine {
    let store: BrokerStore
    let clients: [String: ClientConfig]
    /// The same, by id (the order of `clients.list`).
    package nonisolated let sortedClients: [ClientConfig]
    /// The `Peers=` of the clients that have them (most have none).
    private nonisolated let boundPeers: [String: [String]]
    package nonisolated let vault: any SecretVault
    let servers: [String: any SignInProtocol]
    /// The callback readers of the registered protocols, in the order
    /// `login.finish` asks them (the last one may claim whatever is left).
    let callbackReaders: [any CallbackReader]
    let launcher: any BrowserLauncher
    let clock: any BrokerCore.Clock
    let logger: Logger
    public let socketPath: String
    /// The directory of the state database (named in `STORAGE_UNAVAILABLE` errors).
    public nonisolated let stateDirectory: String

    let hub = EventHub()
    let attempts: AttemptLedger
    let sessions: SessionKeeper
    let proxy: AppRequestProxy
    /// The callers of each client's `login.start` in flight (one live attempt per client).
    var starting: [String: [CheckedContinuation<AttemptView, any Error>]] = [:]
    /// Every client's public session view: `session.get` reads it without a
    /// query, also off the actor (the RPC fast path).
    public nonisolated let sessionBoard = SessionBoard()
    /// The timer's next deadline and its wake-up hook.
    nonisolated let timer = TimerSignal()
    /// The loopback listener of each waiting attempt that returns over loopback (docs/desktop.md).
    var loopbacks: [String: LoopbackListener] = [:]
    /// The waiting device sign-ins being polled.
    var devicePolls: Set<String> = []
    /// The engine's background work (the daemon runs it in its `ServiceGroup`).
    public nonisolated let work: WorkService
    /// The loopback listeners' sweepers and deliveries (the daemon runs it in its `ServiceGroup`, stopped
    /// before `work`): bounded for 64 listeners at once, which one live attempt per client leaves room for.
    public nonisolated let listenerWork = WorkGroup<LoopbackWork>(limit: 64 * LoopbackListener.workLimit)
    /// How long ended attempts are kept (docs/operations.md, retention); 0 keeps them forever.
    let retentionMilliseconds: Int64
    /// When the timer next prunes ended attempts (nil: at its first tick).
    var nextPruneAt: Timestamp?

    public init(
        storePath: String, clients: [ClientConfig], vault: any SecretVault,
        makeServer: (ClientConfig) -> any SignInProtocol, callbackReaders: [any CallbackReader],
        launcher: any BrowserLauncher, transport: any HTTPTransport,
        clock: any BrokerCore.Clock = SystemClock(), logger: Logger, socketPath: String,
        verifyIntervalMilliseconds: Int64 = 300_000, retentionMilliseconds: Int64 = BrokerEngine.defaultRetentionMilliseconds,
        work: WorkService = WorkService()
    ) throws {
        self.work = work
        self.retentionMilliseconds = retentionMilliseconds
        let store = try BrokerStore(path: storePath)
        self.store = store
        self.stateDirectory = FileSystem.parent(of: storePath)
        var byId: [String: ClientConfig] = [:]
        var servers: [String: any SignInProtocol] = [:]
        for client in clients {
            byId[client.id] = client
            servers[client.id] = makeServer(client)
        }
        self.clients = byId
        self.sortedClients = byId.values.sorted { $0.id < $1.id }
        self.boundPeers = byId.compactMapValues { $0.peers.isEmpty ? nil : $0.peers }
        self.servers = servers
        self.callbackReaders = callbackReaders
        self.vault = vault
        self.launcher = launcher
        self.clock = clock
        self.logger = logger
        self.socketPath = socketPath
        self.proxy = AppRequestProxy(transport: transport)
        sessions = try SessionKeeper(
            store: store, clients: byId, vault: vault, servers: servers, clock: clock, logger: logger,
            board: sessionBoard, hub: hub, timer: timer, verifyIntervalMilliseconds: verifyIntervalMilliseconds)
        attempts = AttemptLedger(store: store, clock: clock, logger: logger, hub: hub, sessions: sessions, timer: timer)
    }

    // MARK: - Helpers

    func client(_ id: String) throws(BrokerError) -> ClientConfig {
        guard let c = clients[id] else { throw .clientUnknown(id) }
        return c
    }

    func server(_ id: String) -> any SignInProtocol { servers[id]! }

    /// What the client's server keeps of its attempts; a protocol without server attempts has none there to settle.
    func serverAttempts(_ id: String) -> any ServerAttempts { servers[id]!.serverAttempts ?? NoServerAttempts() }

    func now() -> Timestamp { clock.now() }

    func attempt(_ id: String) throws -> AttemptRecord { try attempts.attempt(id) }

    // MARK: - Info

    /// Nonisolated: apps poll it; it needs nothing of the engine's state.
    public nonisolated func info() async -> BrokerInfo { info(await vault.health()) }

    package nonisolated func info(_ health: VaultHealth) -> BrokerInfo {
        var info = BrokerInfo(
            version: BrokerVersion.string, socket: socketPath, vault: health.vault,
            vaultAvailable: health.available && !health.locked,
            vaultLocked: health.locked, vaultDetail: health.detail)
        (info.vaultDirectory, info.vaultSealed) = (health.directory, health.sealed)
        return info
    }

    /// The Secret Service announced a change (the session bus's signals): `info` asks it afresh.
    /// The broker has gone quiet: the state store gives back its page cache.
    public func releaseMemory() { store.releaseMemory() }

    public nonisolated func vaultMayHaveChanged() { vault.healthMayHaveChanged() }
    /// Whether those signals are being followed.
    public nonisolated func vaultWatched(_ watching: Bool) { vault.watchingChanges(watching) }

    public nonisolated func clientList(mayUse: (ClientConfig) -> Bool) -> [ClientSummary] {
        sortedClients.filter(mayUse).map {
            ClientSummary(
                id: $0.id, appName: $0.appName, protocol: $0.kind.rawValue, server: $0.server.serialized,
                returnUrl: $0.redirectText,
                policy: $0.policy.rawValue)
        }
    }

    /// Nonisolated: `clients` never changes, so the method table asks without an actor hop.
    public nonisolated func config(for client: String) -> ClientConfig? { clients[client] }

    /// The `Peers=` of `client`; nil when it has none (or is unknown): anyone may use it.
    package nonisolated func peers(of client: String) -> [String]? { boundPeers.isEmpty ? nil : boundPeers[client] }

    // MARK: - Lists

    public func list(client: String?, states: [AttemptState]?, mayUse: (String) -> Bool) throws -> [AttemptView] {
        if let client { _ = try self.client(client) }
        return try store.list(client: client, states: states).filter { mayUse($0.client) }.map(AttemptView.init)
    }

    public func attemptClient(_ attemptId: String) throws -> String { try attempt(attemptId).client }

    // MARK: - Subscriptions

    public func subscribe(
        connection: UInt64, clients: [String]?, mayUse: @escaping @Sendable (String) -> Bool,
        send: @escaping @Sendable (PublishedChange) -> Void
    ) throws -> String {
        if let clients { for c in clients { _ = try client(c) } }
        return hub.subscribe(connection: connection, clients: clients.map(Set.init), mayUse: mayUse, send: send)
    }

    public func unsubscribe(_ id: String, connection: UInt64) -> Bool { hub.unsubscribe(id, connection: connection) }

    public func connectionClosed(_ connection: UInt64) { hub.dropConnection(connection) }

    // MARK: - Sessions

    public func session(client clientId: String, account: String? = nil) throws -> SessionView {
        _ = try client(clientId)
        return try sessions.view(clientId, account: account)
    }

    /// `session.list`: the client's accounts, the current one first.
    public func accounts(client clientId: String) throws -> [SessionView] {
        _ = try client(clientId)
        return try sessions.list(clientId)
    }

    /// `session.use`: makes one of the client's accounts current.
    public func useAccount(client clientId: String, account: String) throws -> SessionView {
        _ = try client(clientId)
        return try sessions.use(client: clientId, account: account)
    }

    /// Answers once the client (or the account named) is signed in (also for
    /// a sign-in that starts after the call), or nil after
    /// `timeoutMilliseconds` — or at once when the calling task is cancelled
    /// (its connection closed): the waiter and its timeout are removed then,
    /// nothing of the wait is left behind. An unknown account is `ACCOUNT_UNKNOWN` at once.
    public func waitForSession(client clientId: String, account: String? = nil, timeoutMilliseconds: Int) async throws
        -> SessionView?
    {
        _ = try client(clientId)
        let current = try sessions.view(clientId, account: account)
        if current.status == .signedIn { return current }
        if Task.isCancelled { return nil }
        let id = sessions.newWaiterId()
        // The timeout: one sleeping child task, ended as soon as the wait ends in any way.
        return await withTaskGroup(of: Void.self) { group in
            group.addTask {
                try? await Task.sleep(nanoseconds: UInt64(timeoutMilliseconds) * 1_000_000)
                if !Task.isCancelled { await self.timeOutWaiter(client: clientId, id: id) }
            }
            defer { group.cancelAll() }
            return await withTaskCancellationHandler {
                // Runs on this actor up to the suspension: the waiter is registered
                // before anything else (the cancellation's removal included) can run here.
                await withCheckedContinuation { continuation in
                    sessions.addWaiter(client: clientId, account: account, id: id, continuation)
                }
            } onCancel: {
                self.work.submit { await self.timeOutWaiter(client: clientId, id: id) }
            }
        }
    }

    private func timeOutWaiter(client: String, id: UInt64) { sessions.timeOutWaiter(client: client, id: id) }

    /// Resumes every waiter (at shutdown).
    public func releaseWaiters() { sessions.releaseWaiters() }

    /// `session.signOut` (`SessionKeeper.signOut`) of the current account or the one named.
    public func signOut(client clientId: String, account: String? = nil) async throws -> SessionView {
        _ = try client(clientId)
        let slot: AccountSlot
        do { slot = try sessions.slot(clientId, account: account) } catch let error as BrokerError
            where error.code == .notSignedIn
        {
            return try sessions.view(clientId)
        }
        var view = try await sessions.signOut(slot)
        if await !server(clientId).canRevoke {
            // docs/providers.md: the provider cannot revoke; its own sign-out page ends the browser session.
            view.revokedAtServer = false
        }
        return view
    }

    func currentSession(_ slot: AccountSlot) async throws -> SessionSecrets {
        try await sessions.current(slot)
    }

    /// The current account's session secrets.
    func currentSession(_ clientId: String) async throws -> SessionSecrets {
        try await sessions.current(try sessions.slot(clientId, account: nil))
    }

    /// Refreshes the current account's session.
    func refreshSession(_ clientId: String, current: SessionSecrets) async throws -> SessionSecrets {
        try await refreshSession(try sessions.slot(clientId, account: nil), current: current)
    }

    /// Rotates the session's tokens (§5.7), as a work item that runs to its
    /// end whoever waits for it. Concurrent callers share one refresh.
    func refreshSession(_ slot: AccountSlot, current: SessionSecrets) async throws -> SessionSecrets {
        try await withCheckedThrowingContinuation { continuation in
            guard sessions.awaitRefresh(slot, continuation) else { return }
            let queued = work.submit { await self.runRefresh(slot, current: current) }
            if !queued { sessions.refreshEnded(slot, .failure(BrokerError.workRefused)) }
        }
    }

    private func runRefresh(_ slot: AccountSlot, current: SessionSecrets) async {
        let result: Result<SessionSecrets, any Error>
        do { result = .success(try await sessions.refreshNow(slot, current: current)) } catch {
            result = .failure(error)
        }
        sessions.refreshEnded(slot, result)
    }

    /// Checks the session; one whose access token expired at the server is refreshed.
    private func verifySession(_ slot: AccountSlot) async {
        if let expired = await sessions.verify(slot) { _ = try? await refreshSession(slot, current: expired) }
    }

    // MARK: - http.request

    /// `http.request`: the app's request to its API with the session's bearer
    /// token, which never leaves the broker.
    public func appRequest(_ request: AppRequest) async throws -> HTTPResponse {
        try await proxy.send(request, client: try client(request.client), engine: self)
    }

    // MARK: - Timer

    /// Start-up recovery (§7): starting → failed, exchanging → uncertain,
    /// waiting kept (expired when due); pending work resumes.
    public func recover() async throws {
        for var record in try store.attemptsNeedingWork() {
            switch record.state {
            case .starting:
                try attempts.commit(
                    &record, .recovered,
                    error: AttemptError(
                        code: BrokerErrorCode.serverProtocolError.rawValue,
                        message: "the broker stopped while creating this attempt; start a new sign-in"))
                try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
            case .exchanging:
                try markUncertain(&record, "the broker stopped while exchanging; reconciling with the server")
            default:
                break
            }
            if server(record.client).serverAttempts == nil { continue }
            if record.followUp != .none && record.reconcileTries == 0 {
                // The broker may have stopped with that request in flight.
                record.reconcileTries = 1
                try attempts.save(&record)
            }
        }
        await resumeLocalAttempts()
        await tick()
    }

    /// The timer: local expiry of waiting attempts, due reconciliations and
    /// follow-ups, owed sign-out revokes, session expiry, refresh and checks.
    /// Answers when the engine next has timer work (nil: nothing scheduled);
    /// the hook set with `setWakeUp` says when something earlier was scheduled
    /// meanwhile. The daemon's timer sleeps until that wall-clock time (a
    /// `CLOCK_REALTIME` timerfd, woken by clock changes too), at least
    /// `minimumSleepMilliseconds` between ticks.
    @discardableResult
    public func tick() async -> Timestamp? {
        let now = now()
        var due: Timestamp?
        func consider(_ at: Timestamp?) { if let at, due.map({ at < $0 }) ?? true { due = at } }
        sweepLocalAttempts()
        guard let records = try? store.attemptsNeedingWork() else {
            timer.answered(now)
            return now
        }
        for var record in records {
            if record.state == .exchanging && !attempts.isExchanging(record.id) {
                // Its exchange ended without its answer being committed (the
                // state file could not be written): reconcile it, as after a crash.
                do {
                    try markUncertain(
                        &record, "the exchange's answer could not be recorded; reconciling with the server")
                    scheduleFollowUp(record.id)
                } catch {
                    logger.warning("cannot record the attempt's state", ["attempt.id": record.id, "error": "\(error)"])
                    consider(now)
                }
                continue
            }
            if record.state == .waiting, let expiresAt = record.expiresAt, now >= expiresAt {
                try? expireLocally(&record)
                scheduleFollowUp(record.id)
                continue
            }
            // Work in flight schedules what it leaves owed when it ends.
            guard !attempts.isClaimed(record.id) else { continue }
            let workDue = record.nextReconcileAt.map { now >= $0 } ?? true
            if workDue && (record.state == .uncertain || record.followUp != .none) {
                scheduleFollowUp(record.id)
                continue
            }
            consider(AttemptLedger.due(record, now: now))
        }
        let sessionWork = await sessions.maintain()
        for slot in sessionWork.refresh {
            work.submit {
                guard let current = try? await self.currentSession(slot) else { return }
                _ = try? await self.refreshSession(slot, current: current)
            }
        }
        for slot in sessionWork.verify {
            work.submit { await self.verifySession(slot) }
        }
        consider(sessionWork.due)
        // Not a deadline of the engine's work: the daemon's timer also sleeps
        // until `nextPrune` (hourly at most).
        pruneIfDue(now)
        timer.answered(due)
        return due
    }

    /// When the next batch of pruning is due (nil: pruning is off or has not run yet).
    public var nextPrune: Timestamp? { retentionMilliseconds > 0 ? nextPruneAt : nil }

    public static let defaultRetentionMilliseconds: Int64 = 30 * 86_400_000
    /// The pause between two batches (`BrokerStore.pruneBatch`): a backlog
    /// (a first start after an upgrade, a million old attempts) drains in
    /// short steps while calls go on being served.
    static let pruneBatchPauseMilliseconds: Int64 = 1_000
    static let pruneIntervalMilliseconds: Int64 = 3_600_000

    /// Deletes one batch of attempts that ended more than the retention time
    /// ago, when due; answers when the next batch is due.
    @discardableResult
    func pruneIfDue(_ now: Timestamp) -> Timestamp? {
        guard retentionMilliseconds > 0 else { return nil }
        if let at = nextPruneAt, now < at { return at }
        let cutoff = Timestamp(millisecondsSince1970: now.millisecondsSince1970 - retentionMilliseconds)
        // At least twice per retention time, so a short one (a test's) is kept to.
        var pause = min(Self.pruneIntervalMilliseconds, max(Self.pruneBatchPauseMilliseconds, retentionMilliseconds / 2))
        do {
            let deleted = try attempts.prune(endedBefore: cutoff)
            if deleted > 0 { logger.debug("pruned ended attempts", ["count": "\(deleted)"]) }
            if deleted == BrokerStore.pruneBatch { pause = Self.pruneBatchPauseMilliseconds }
        } catch {
            // Cannot write the state file now (full disk, read-only): try
            // again later; pruning is never urgent.
            logger.warning("cannot prune ended attempts", ["error": "\(error)"])
        }
        let next = Timestamp(millisecondsSince1970: now.millisecondsSince1970 + pause)
        nextPruneAt = next
        return next
    }

    /// Sets the hook called (from any thread) when the engine schedules work
    /// that may be due before the deadline `tick()` last answered.
    public nonisolated func setWakeUp(_ hook: @escaping @Sendable () -> Void) { timer.setHook(hook) }

    /// How long a timer sleeps before the next tick: until `deadline`, at
    /// least `minimumSleepMilliseconds` (a past deadline is work started, not
    /// yet recorded), at most `maximumSleepMilliseconds`: for a timer that sleeps on
    /// a monotonic clock (the daemon's does only where no timerfd can be made), the
    /// cap bounds how late a jump of the wall clock is noticed.
    public static func sleepMilliseconds(until deadline: Timestamp?, now: Timestamp) -> Int64 {
        guard let deadline else { return maximumSleepMilliseconds }
        let wait = deadline.millisecondsSince1970 - now.millisecondsSince1970
        return min(maximumSleepMilliseconds, max(minimumSleepMilliseconds, wait))
    }
    public static let minimumSleepMilliseconds: Int64 = 250
    public static let maximumSleepMilliseconds: Int64 = 5_000
}

/// The engine's last answered deadline and the hook that wakes its timer.
final class TimerSignal: Sendable {
    /// The hook is boxed: a bare closure in a lock's value grows by a thunk
    /// on every `withLock` (`Hook`).
    private let state = Mutex<(hook: Hook<Void>?, deadline: Timestamp?)>((nil, nil))

    func setHook(_ hook: @escaping @Sendable () -> Void) { state.withLock { $0.hook = Hook(hook) } }

    func answered(_ deadline: Timestamp?) { state.withLock { $0.deadline = deadline } }

    /// Work is due at `at`: the timer is woken when that is before the deadline it sleeps towards.
    func scheduled(_ at: Timestamp?) {
        guard let at else { return }
        let hook = state.withLock { state -> Hook<Void>? in
            guard state.deadline.map({ at < $0 }) ?? true else { return nil }
            state.deadline = at
            return state.hook
        }
        hook?()
    }
}

/// The broker's version.
public enum BrokerVersion {
    public static let string = "0.1.0"
}
