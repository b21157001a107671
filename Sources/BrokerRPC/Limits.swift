import Dispatch
import Synchronization

/// The memory budget for replies and notifications that peers have not read
/// yet, shared by every connection of one server.
///
/// A reply is written to the socket at once as far as the socket takes it;
/// only the rest (its unsent bytes) is queued in memory and counted here.
/// A connection that does not read is dropped (a slow reader) when:
/// - it already has unsent bytes and this message would take it over
///   `perConnection` (one message of any size is always queued whole on a
///   connection with nothing pending, so an 8 MiB `http.request` answer still
///   reaches a client that reads), or
/// - the unsent bytes of all connections together would go over `total`.
/// While the unsent bytes of all connections are at or above `busyThreshold`
/// (three quarters of `total`), new requests are answered `BUSY` at once.
final class OutputBudget: Sendable {
    /// What to do with a message that could not be written at once.
    enum Decision: Sendable, Hashable {
        case queue
        /// The connection has more unsent than its own cap allows.
        case overConnectionCap
        /// All connections together have spent the budget.
        case overBudget
    }

    let total: Int
    let perConnection: Int
    let busyThreshold: Int
    private let queued = Atomic<Int>(0)

    init(total: Int, perConnection: Int) {
        self.total = max(1, total)
        self.perConnection = max(1, perConnection)
        self.busyThreshold = max(1, self.total / 4 * 3)
    }

    /// Whether `adding` more unsent bytes may be queued on a connection that
    /// already has `connectionQueued` unsent. Does not count them: `add` does.
    func decide(connectionQueued: Int, adding: Int) -> Decision {
        if connectionQueued > 0 && connectionQueued + adding > perConnection { return .overConnectionCap }
        if adding > 0 && queued.load(ordering: .relaxed) + adding > total { return .overBudget }
        return .queue
    }

    func add(_ bytes: Int) {
        if bytes != 0 { queued.add(bytes, ordering: .relaxed) }
    }

    func remove(_ bytes: Int) {
        if bytes != 0 { queued.subtract(bytes, ordering: .relaxed) }
    }

    /// Unsent bytes of all connections now.
    var current: Int { queued.load(ordering: .relaxed) }

    /// New requests are refused (`BUSY`) while this holds.
    var isBusy: Bool { current >= busyThreshold }
}

/// How many connections a server keeps, and which it closes to make room.
///
/// - Up to `maxConnections` connections are served.
/// - At that limit a new connection first makes room by closing an idle
///   connection (idle for at least 0.5 s: no request in flight, nothing
///   unsent, nothing held for it — an event subscription, `hold()`) of a
///   process holding more connections than its own — of the one holding
///   most, the connection idle longest. A process hoarding connections can
///   so never take another's place.
/// - Else a process holding fewer than 4 connections (the CLI, an app)
///   gets one of `reservedConnections` slots beyond the limit.
/// - Else it makes room by closing one of its own idle connections.
/// - Else it gets one `BUSY` error (`"id": null`, NDJSON) and is closed.
/// A connection closed to make room is sent one `BUSY` error first.
struct ConnectionPolicy: Sendable, Hashable {
    var maxConnections: Int
    var reservedConnections: Int
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
        if open < maxConnections { return .admit }
        // Never more than the limit, the reserve and a few being closed to make room.
        if (total ?? open) >= maxConnections + reservedConnections + Self.closingSlack { return .refuse }
        // A process may close idle connections of a process holding more than
        // it does (of the one holding most, the one idle longest): a process
        // hoarding connections can never close another's to make room.
        if let victim = best(candidates, now: now, where: { !$0.sameProcess && $0.peerConnections > peerConnections }) {
            return .admitEvicting(victim.id)
        }
        if open < maxConnections + reservedConnections && peerConnections < Self.fewConnections {
            return .admitReserved
        }
        // Else it makes room among its own.
        if let victim = best(candidates, now: now, where: \.sameProcess) { return .admitEvicting(victim.id) }
        return .refuse
    }

    /// Connections being closed to make room that may be open on top of the
    /// limit and the reserve (one that turned busy is not closed after all).
    static let closingSlack = 16

    /// A process holding fewer connections than this may use the reserve.
    static let fewConnections = 4

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

/// Monotonic nanoseconds (never 0).
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    max(1, DispatchTime.now().uptimeNanoseconds)
}
