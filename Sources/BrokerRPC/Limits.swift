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
/// - At that limit a new connection first makes room by closing the
///   connection that has been idle longest — idle: no request in flight,
///   nothing unsent, and nothing held for it (an event subscription,
///   `RPCConnection.hold()`). The closed connection is sent one `BUSY` error
///   (`"id": null`) first.
/// - When none is idle, a process that has no connection open yet (the CLI,
///   a newly started app) still gets one of `reservedConnections` slots
///   beyond the limit.
/// - Anyone else gets one `BUSY` error (`"id": null`, NDJSON) and is closed.
struct ConnectionPolicy: Sendable, Hashable {
    var maxConnections: Int
    var reservedConnections: Int

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
    }

    /// The decision for a new connection of a process holding `peerConnections`
    /// connections, with `open` counted (connections being closed to make room
    /// excluded) and the current candidates.
    func decide(open: Int, peerConnections: Int, candidates: some Sequence<Candidate>) -> Decision {
        if open < maxConnections { return .admit }
        var victim: Candidate?
        for candidate in candidates {
            guard let since = candidate.idleSince else { continue }
            if let chosen = victim, let chosenSince = chosen.idleSince, chosenSince <= since { continue }
            victim = candidate
        }
        if let victim { return .admitEvicting(victim.id) }
        if open < maxConnections + reservedConnections && peerConnections == 0 { return .admitReserved }
        return .refuse
    }
}

/// Monotonic nanoseconds (never 0).
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    max(1, DispatchTime.now().uptimeNanoseconds)
}
