import BrokerCore
import BrokerStore
import BrowserLoginProtocol

/// The attempts and their commits: the only code that inserts, changes or
/// deletes attempt rows. Every change of an attempt goes through the state
/// machine (`AttemptMachine`) here, is committed to the store, and is
/// published to subscribers in commit order. Also holds the attempt work in
/// flight (exchanges, the callbacks kept meanwhile, reconciliations), each
/// behind a method that says what it does.
///
/// Owned by the engine actor and used only from it, synchronously: a commit
/// never suspends, so a step that decided on a state commits it before any
/// other call runs (docs/protocol.md §7 durability order).
final class AttemptLedger {
    private let store: BrokerStore
    private let clock: any BrokerCore.Clock
    private let logger: Logger
    private let hub: EventHub
    private let sessions: SessionKeeper
    private let timer: TimerSignal

    /// The latest callback that arrived while its attempt was exchanging (memory only: it holds a code).
    /// The token of the `finish` call whose callback is kept, by attempt.
    private var keptCallbacks: [String: UInt64] = [:]
    private var keptCounter: UInt64 = 0
    /// Attempts whose exchange request is in flight now.
    private var exchangesInFlight: Set<String> = []
    /// `login.finish` calls waiting for an attempt's exchange to settle.
    private var exchangeWaiters: [String: [UInt64: CheckedContinuation<Void, Never>]] = [:]
    private var waiterCounter: UInt64 = 0
    /// Attempts whose reconciliation or follow-up is running now.
    private var busy: Set<String> = []

    init(
        store: BrokerStore, clock: any BrokerCore.Clock, logger: Logger, hub: EventHub, sessions: SessionKeeper,
        timer: TimerSignal
    ) {
        self.store = store
        self.clock = clock
        self.logger = logger
        self.hub = hub
        self.sessions = sessions
        self.timer = timer
    }

    func attempt(_ id: String) throws -> AttemptRecord {
        guard let record = try store.attempt(id: id) else { throw BrokerError.attemptUnknown() }
        return record
    }

    /// A new attempt's `starting` row, before anything is sent (§7).
    func insert(_ record: AttemptRecord) throws {
        try store.insert(record)
        sessions.refreshBoard(record.client)
    }

    /// An attempt nothing was sent for yet: it never existed for anyone.
    func discard(_ record: AttemptRecord) throws {
        try store.delete(attemptId: record.id)
        sessions.refreshBoard(record.client)
    }

    /// Deletes one batch of attempts that ended before `cutoff`; answers how many.
    func prune(endedBefore cutoff: Timestamp) throws -> Int {
        let deleted = try store.prune(endedBefore: cutoff, limit: BrokerStore.pruneBatch)
        if deleted > 0 { try store.compact(pages: 4 * BrokerStore.pruneBatch) }
        return deleted
    }

    /// Applies `event` to `record` through the state machine, commits it,
    /// and publishes the change. Throws when the machine refuses.
    @discardableResult
    func commit(
        _ record: inout AttemptRecord, _ event: AttemptEvent, error: AttemptError? = nil,
        change: ((inout AttemptRecord) -> Void)? = nil
    ) throws -> AttemptRecord {
        let previous = record.state
        switch AttemptMachine.next(record.state, resolution: record.resolution, on: event) {
        case .success(let next): record.state = next
        case .failure(.notReconciled):
            throw BrokerError(
                .ackNotReconciled,
                "the attempt is uncertain and not reconciled yet: its session may exist at the server; run 'browser-login status' (it reconciles), then acknowledge",
                attemptId: record.id)
        case .failure(.notAllowed(let state)):
            throw BrokerError(
                .attemptNotWaiting, "the attempt is \(state.rawValue); this is not possible now",
                attemptId: record.id)
        }
        if let error { record.error = error }
        change?(&record)
        record.updatedAt = clock.now()
        try store.update(record, previous: previous)
        TestFaults.hit("commit:" + record.state.rawValue)
        logger.info(
            "attempt changed",
            ["attempt.id": record.id, "client": record.client, "from": previous.rawValue, "to": record.state.rawValue]
                .merging(error.map { ["error.code": $0.code] } ?? [:]) { a, _ in a }
                .merging(
                    record.state == .uncertain && previous != .uncertain
                        ? [Logger.messageIDKey: LogEvent.exchangeUncertain] : [:]
                ) { a, _ in a })
        // An attempt that stays signing in (starting → waiting → exchanging, or
        // back to waiting) leaves its client's views as they are: only the
        // attempt's change is published. A session an exchange adopted is
        // published with the commit that ends the attempt (SessionKeeper.adopt).
        let staysSigningIn = [previous, record.state].allSatisfy(SessionKeeper.signingInStates.contains)
        publish(record, views: !staysSigningIn)
        return record
    }

    /// Commits a change that is not a state transition (follow-ups, resolution).
    func save(_ record: inout AttemptRecord, publish: Bool = false) throws {
        record.updatedAt = clock.now()
        try store.update(record, previous: record.state)
        if publish { self.publish(record) } else { timer.scheduled(Self.due(record, now: record.updatedAt)) }
    }

    /// Publishes the attempt's change, then (`views`) its client's session views that changed.
    func publish(_ record: AttemptRecord, views: Bool = true) {
        hub.publish(.attemptChanged(AttemptView(record)))
        if views { sessions.project(record.client) }
        timer.scheduled(Self.due(record, now: record.updatedAt))
    }

    /// When the timer next has work for this attempt: its local expiry while
    /// waiting, its reconciliation or follow-up when one is owed; nil for none.
    static func due(_ record: AttemptRecord, now: Timestamp) -> Timestamp? {
        let expiry = record.state == .waiting ? record.expiresAt : nil
        guard record.state == .uncertain || record.followUp != .none else { return expiry }
        let work = record.nextReconcileAt ?? now
        return expiry.map { min($0, work) } ?? work
    }

    // MARK: - Work in flight

    /// Claims the attempt's reconciliation or follow-up; false while one runs.
    func claim(_ attemptId: String) -> Bool { busy.insert(attemptId).inserted }

    func unclaim(_ attemptId: String) { busy.remove(attemptId) }

    func isClaimed(_ attemptId: String) -> Bool { busy.contains(attemptId) }

    /// The exchange of an attempt just committed `exchanging` is in flight until `exchangeSettled`.
    func exchangeStarted(_ attemptId: String) { exchangesInFlight.insert(attemptId) }

    func isExchanging(_ attemptId: String) -> Bool { exchangesInFlight.contains(attemptId) }

    /// Keeps the latest callback for an attempt that is exchanging (its
    /// `finish` call holds it); answers its token.
    func keepCallback(for attemptId: String) -> UInt64 {
        keptCounter += 1
        keptCallbacks[attemptId] = keptCounter
        return keptCounter
    }

    /// Takes the kept callback back when it is still the one kept with `token`.
    func takeKept(_ attemptId: String, token: UInt64) -> Bool {
        guard keptCallbacks[attemptId] == token else { return false }
        keptCallbacks[attemptId] = nil
        return true
    }

    /// Forgets the attempt's kept callback: its exchange settled it.
    func dropKept(_ attemptId: String) { keptCallbacks[attemptId] = nil }

    /// Suspends until the attempt's exchange in flight settles (or the caller is cancelled).
    nonisolated(nonsending) func waitForExchange(_ attemptId: String, release: @escaping @Sendable (UInt64) -> Void)
        async
    {
        guard exchangesInFlight.contains(attemptId) else { return }
        waiterCounter += 1
        let id = waiterCounter
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                exchangeWaiters[attemptId, default: [:]][id] = continuation
            }
        } onCancel: {
            release(id)
        }
    }

    func releaseExchangeWaiter(_ attemptId: String, _ id: UInt64) {
        exchangeWaiters[attemptId]?.removeValue(forKey: id)?.resume()
        if exchangeWaiters[attemptId]?.isEmpty == true { exchangeWaiters[attemptId] = nil }
    }

    /// The exchange of `attemptId` is settled: its `finish` waiters answer.
    func exchangeSettled(_ attemptId: String) {
        exchangesInFlight.remove(attemptId)
        let state = try? store.attempt(id: attemptId)?.state
        if let state, state != .waiting { keptCallbacks[attemptId] = nil }
        // Left exchanging (its answer could not be committed): the timer marks it uncertain.
        if state == .exchanging { timer.scheduled(clock.now()) }
        for continuation in (exchangeWaiters.removeValue(forKey: attemptId) ?? [:]).values { continuation.resume() }
    }
}
