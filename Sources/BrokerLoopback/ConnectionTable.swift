/// The loopback listener's connections and what it owes each (a plain state machine: no I/O, tested as a
/// table). A connection is *waiting* from its start, and again after each answered request (keep-alive),
/// until a whole request head (request line and headers) has been read; it has `headDeadline` for that. A
/// connection whose head was read is being answered and is never evicted (its delivery may take seconds).
///
/// At most `capacity` connections are kept. When one more opens, the waiting connections past their
/// deadline are evicted, then, while the table is over capacity, the one waiting longest (the new one too,
/// when every other is being answered). An evicted connection stays in the table, no longer counted, until
/// libmicrohttpd reports it closed: its socket is open as long as it is here, so it can be shut down
/// safely from any thread that holds the table.
///
/// So a slow sender (slowloris) keeps a slot for at most `headDeadline`, and a browser that sends its
/// request head at once is served however many of them dribble.
struct ConnectionTable {
    typealias Instant = ContinuousClock.Instant

    struct Entry: Equatable {
        var socket: Int32
        /// Since when the connection waits for a request head; nil while a request is answered.
        var waitingSince: Instant?
        var evicted = false
    }

    let capacity: Int
    let headDeadline: Duration
    private(set) var entries: [Int: Entry] = [:]
    /// Connections evicted, over the table's life (for the listener's statistics and the tests).
    private(set) var evictions = 0

    init(capacity: Int, headDeadline: Duration) {
        precondition(capacity > 0)
        self.capacity = capacity
        self.headDeadline = headDeadline
    }

    /// The connections counted against the capacity.
    var live: Int { entries.values.count { !$0.evicted } }

    /// A connection opened: answers the sockets to shut down (past their deadline, or making room).
    mutating func opened(_ id: Int, socket: Int32, at now: Instant) -> [Int32] {
        entries[id] = Entry(socket: socket, waitingSince: now)
        var shut = expired(at: now)
        while live > capacity, let oldest = longestWaiting() {
            shut.append(evict(oldest))
        }
        return shut
    }

    /// A request head was read whole (the access handler runs for it): the connection is answered.
    mutating func headRead(_ id: Int) {
        entries[id]?.waitingSince = nil
    }

    /// A request was answered (or abandoned): the connection waits for the next head, from now.
    mutating func requestCompleted(_ id: Int, at now: Instant) {
        guard entries[id]?.waitingSince == nil else { return }
        entries[id]?.waitingSince = now
    }

    /// libmicrohttpd closed the connection: its socket is no longer ours to touch.
    mutating func closed(_ id: Int) {
        entries[id] = nil
    }

    /// Evicts the waiting connections past their deadline; answers their sockets.
    mutating func expired(at now: Instant) -> [Int32] {
        let overdue = entries.filter { _, entry in
            !entry.evicted && entry.waitingSince.map { now >= $0 + headDeadline } == true
        }
        return overdue.keys.sorted().map { evict($0) }
    }

    /// When the next waiting connection reaches its deadline (nil: none waits).
    var nextDeadline: Instant? {
        entries.values.compactMap { $0.evicted ? nil : $0.waitingSince }.min().map { $0 + headDeadline }
    }

    private func longestWaiting() -> Int? {
        var oldest: (since: Instant, id: Int)?
        for (id, entry) in entries where !entry.evicted {
            guard let since = entry.waitingSince else { continue }
            if oldest.map({ (since, id) < ($0.since, $0.id) }) ?? true { oldest = (since, id) }
        }
        return oldest?.id
    }

    private mutating func evict(_ id: Int) -> Int32 {
        entries[id]?.evicted = true
        evictions += 1
        return entries[id]?.socket ?? -1
    }
}
