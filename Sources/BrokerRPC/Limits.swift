import Synchronization
import SystemSupport

/// The memory budget for replies and notifications that peers have not read
/// yet, shared by every connection of one server and counted per peer
/// process (by pid), so that it falls on the process that spends it.
///
/// A reply is written to the socket at once as far as the socket takes it;
/// only the rest (its unsent bytes) is queued in memory and counted here.
/// A connection that does not read is dropped (a slow reader) when:
/// - it already has unsent bytes and this message would take it over
///   `perConnection` (one message of any size is always queued whole on a
///   connection with nothing pending, so an 8 MiB `http.request` answer still
///   reaches a client that reads), or
/// - its process already has unsent bytes and this message would take the
///   process over `perProcess`, or
/// - its process already has unsent bytes and the unsent bytes of all
///   connections together would go over `total`.
/// A process with nothing unsent always has its reply queued: the budget is
/// spent by those who do not read, and it is they who lose connections.
/// New requests are answered `BUSY` at once only from a process with unsent
/// bytes, while it holds half of `perProcess` or more, or while all
/// connections together hold `busyThreshold` (three quarters of `total`).
final class OutputBudget: Sendable {
    /// What to do with a message that could not be written at once.
    enum Decision: Sendable, Hashable {
        case queue
        /// The connection has more unsent than its own cap allows.
        case overConnectionCap
        /// The connection's process has more unsent than a process may have.
        case overProcessCap
        /// All connections together have spent the budget.
        case overBudget
    }

    /// Why a new request of a process is answered `BUSY`.
    enum Refusal: Sendable, Hashable {
        /// The process holds half its own budget or more in unread replies.
        case process(unsent: Int)
        /// All connections hold three quarters of the total, and this process some of it.
        case total
    }

    let total: Int
    let perConnection: Int
    let perProcess: Int
    let busyThreshold: Int
    /// Unsent bytes of all connections: read without the lock on every request.
    private let queued = Atomic<Int>(0)
    /// Unsent bytes by peer process (pid); a process with none has no entry.
    private let processes = Mutex<[Int32: Int]>([:])

    init(total: Int, perConnection: Int, perProcess: Int? = nil) {
        self.total = max(1, total)
        self.perConnection = max(1, perConnection)
        self.perProcess = max(1, perProcess ?? total)
        self.busyThreshold = max(1, self.total / 4 * 3)
    }

    /// Whether `adding` more unsent bytes may be queued on a connection of
    /// process `pid` that already has `connectionQueued` unsent. Does not
    /// count them: `add` does.
    func decide(connectionQueued: Int, pid: Int32 = 0, adding: Int) -> Decision {
        if connectionQueued > 0 && connectionQueued + adding > perConnection { return .overConnectionCap }
        guard adding > 0 else { return .queue }
        let processQueued = unsent(of: pid)
        guard processQueued > 0 else { return .queue }
        if processQueued + adding > perProcess { return .overProcessCap }
        if queued.load(ordering: .relaxed) + adding > total { return .overBudget }
        return .queue
    }

    func add(_ bytes: Int, pid: Int32 = 0) {
        guard bytes != 0 else { return }
        processes.withLock { $0[pid, default: 0] += bytes }
        queued.add(bytes, ordering: .relaxed)
    }

    func remove(_ bytes: Int, pid: Int32 = 0) {
        guard bytes != 0 else { return }
        processes.withLock { table in
            let left = table[pid, default: 0] - bytes
            table[pid] = left > 0 ? left : nil
        }
        queued.subtract(bytes, ordering: .relaxed)
    }

    /// Unsent bytes of the connections of process `pid` now (no lock taken while nothing is unsent).
    func unsent(of pid: Int32) -> Int {
        queued.load(ordering: .relaxed) == 0 ? 0 : processes.withLock { $0[pid] ?? 0 }
    }

    /// Unsent bytes of all connections now.
    var current: Int { queued.load(ordering: .relaxed) }

    /// Why a new request of process `pid` is refused (`BUSY`) now; nil when it is served.
    func refusal(for pid: Int32) -> Refusal? {
        let processQueued = unsent(of: pid)
        guard processQueued > 0 else { return nil }
        if processQueued >= perProcess / 2 { return .process(unsent: processQueued) }
        return current >= busyThreshold ? .total : nil
    }

    /// All connections together hold three quarters of the total or more.
    var isBusy: Bool { current >= busyThreshold }
}

/// How many connections a server keeps, and which it closes to make room.
///
/// - One process (one pid) holds at most `maxPerProcess` connections: past
///   it, a new connection of that process makes room by closing one of its
///   own idle connections, else it is refused (`BUSY`). One process can so
///   never fill the table.
/// - Up to `maxConnections` connections are served.
/// - At that limit a new connection first makes room by closing an idle
///   connection (idle for at least 0.5 s: no request in flight, nothing
///   unsent, nothing held for it — an event subscription, `hold()`) of a
///   process holding more connections than its own — of the one holding
///   most, the connection idle longest. A process hoarding connections can
///   so never take another's place.
/// - Else a process holding no connection yet (the CLI, an app starting)
///   gets one of `reservedConnections` slots beyond the limit.
/// - Else it makes room by closing one of its own idle connections.
/// - Else it gets one `BUSY` error (`"id": null`, NDJSON) and is closed.
/// A connection closed to make room is sent one `BUSY` error first.
struct ConnectionPolicy: Sendable, Hashable {
    var maxConnections: Int
    var reservedConnections: Int
    /// Connections one process (pid) may hold.
    var maxPerProcess: Int = RPCServerConfiguration.defaultMaxConnectionsPerProcess
    /// Only connections idle at least this long (ns) are closed to make
    /// room: one just opened has had no time to send its first request.
    var minimumIdleNanoseconds: UInt64 = 500_000_000

    enum Decision: Sendable, Hashable {
        case admit
        /// Admit, after closing this idle connection.
        case admitEvicting(UInt64)
        /// Admit into the reserve (the peer process had no connection).
        case admitReserved
        case refuse
        /// The process holds `maxPerProcess` connections, none of them idle.
        case refuseProcessLimit
    }

    /// One connection the policy may choose to close.
    struct Candidate: Sendable, Hashable {
        var id: UInt64
        /// When it became idle (monotonic ns); nil while it is busy or held.
        var idleSince: UInt64?
        /// Connections its peer process holds.
        var peerConnections: Int = 1
        /// Its peer is the process asking for a new connection.
        var sameProcess = false
    }

    /// The decision for a new connection of a process holding `peerConnections`
    /// connections, with `open` counted (connections being closed to make room
    /// excluded), `total` open (those included) and the current candidates.
    func decide(
        open: Int, total: Int? = nil, peerConnections: Int, candidates: some Sequence<Candidate>,
        now: UInt64 = monotonicNanoseconds()
    ) -> Decision {
        if peerConnections >= maxPerProcess {
            // At its own cap a process makes room only among its own connections.
            if let victim = best(candidates, now: now, where: \.sameProcess) { return .admitEvicting(victim.id) }
            return .refuseProcessLimit
        }
        if open < maxConnections { return .admit }
        // Never more than the limit, the reserve and a few being closed to make room.
        if (total ?? open) >= maxConnections + reservedConnections + Self.closingSlack { return .refuse }
        // A process may close idle connections of a process holding more than
        // it does (of the one holding most, the one idle longest): a process
        // hoarding connections can never close another's to make room.
        if let victim = best(candidates, now: now, where: { !$0.sameProcess && $0.peerConnections > peerConnections }) {
            return .admitEvicting(victim.id)
        }
        if open < maxConnections + reservedConnections && peerConnections == 0 {
            return .admitReserved
        }
        // Else it makes room among its own.
        if let victim = best(candidates, now: now, where: \.sameProcess) { return .admitEvicting(victim.id) }
        return .refuse
    }

    /// Connections being closed to make room that may be open on top of the
    /// limit and the reserve (one that turned busy is not closed after all).
    static let closingSlack = 16

    /// Of the candidates idle long enough that `eligible` accepts, the one
    /// whose process holds most connections, idle longest.
    private func best(
        _ candidates: some Sequence<Candidate>, now: UInt64, where eligible: (Candidate) -> Bool
    ) -> Candidate? {
        var victim: Candidate?
        for candidate in candidates {
            guard let since = candidate.idleSince, since + minimumIdleNanoseconds <= now, eligible(candidate) else {
                continue
            }
            if let chosen = victim, let chosenSince = chosen.idleSince {
                if chosen.peerConnections > candidate.peerConnections { continue }
                if chosen.peerConnections == candidate.peerConnections && chosenSince <= since { continue }
            }
            victim = candidate
        }
        return victim
    }
}
