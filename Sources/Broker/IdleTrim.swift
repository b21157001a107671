import BrokerRPC
import CMalloc
import Engine
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Gives memory back to the system once the broker has gone quiet.
///
/// A burst of work (sign-ins, long `login.list` answers, many connections)
/// leaves freed memory inside glibc's malloc arenas, which glibc keeps for
/// reuse: without this, the broker's resident size after a busy minute stays
/// at that minute's peak for the rest of the day. When no message has arrived
/// for `quietTicks` checks in a row and none is in flight, and there was
/// activity since the last trim, `malloc_trim(0)` returns the free pages of
/// every arena. Trimming costs about a millisecond and happens at most once
/// per quiet period; a busy broker never trims.
public struct IdleTrim: Sendable {
    public let quietTicks: Int
    private var lastMessages = 0
    private var quietFor = 0
    /// The message count at the last trim; -1 so that the quiet period after start-up trims too.
    private var trimmedAt = -1

    public init(quietTicks: Int = 2) { self.quietTicks = quietTicks }

    /// One check: the server's message count so far and the messages in
    /// flight. True when the caller should trim now.
    public mutating func check(messages: Int, inFlight: Int) -> Bool {
        defer { lastMessages = messages }
        guard messages == lastMessages, inFlight == 0 else {
            quietFor = 0
            return false
        }
        quietFor += 1
        guard quietFor >= quietTicks, messages != trimmedAt else { return false }
        trimmedAt = messages
        return true
    }

    /// Trimmed, and no message since: nothing to check until there is activity.
    public var isSettled: Bool { quietFor >= quietTicks && lastMessages == trimmedAt }

    /// At most `count` malloc arenas (glibc's default is 8 per core). The
    /// broker's work runs on a few dispatch and cooperative-pool threads; each
    /// further arena keeps its own freed pages, which `malloc_trim` can only
    /// return when whole pages are free.
    public static func limitArenas(_ count: Int32 = 2) { _ = mallopt(M_ARENA_MAX, count) }

    /// GLib's slice allocator (GLib before 2.76) off: every `GVariant` of a
    /// D-Bus message would otherwise come from slabs that GLib keeps once
    /// freed — 50 MB for one message of 100,000 dictionary entries, which
    /// `malloc_trim` cannot give back. With `G_SLICE=always-malloc` they are
    /// plain `malloc` blocks that it can. GLib reads the variable while the
    /// program loads (before `main`), so when it is not set the broker sets
    /// it and executes itself again, once (same pid, same arguments and
    /// descriptors); a `G_SLICE` already set is kept. Returns when it did not
    /// re-execute (set already, or `execv` failed: the broker goes on as it is).
    public static func reexecuteWithGLibSlicesOff() {
        guard getenv("G_SLICE") == nil else { return }
        _ = setenv("G_SLICE", "always-malloc", 1)
        _ = execv("/proc/self/exe", CommandLine.unsafeArgv)
    }

    /// Blocks of 256 KiB and more always mapped on their own, and unmapped
    /// (given back) as soon as they are freed. glibc's default raises this
    /// threshold up to 32 MiB each time such a block is freed, after which an
    /// 8 MiB D-Bus message or a 1 MiB RPC request lands in the heap, where
    /// what is freed around live blocks stays resident until a trim, if any
    /// can reach it. Setting it fixes the threshold.
    public static func mapLargeBlocks() { _ = mallopt(M_MMAP_THRESHOLD, 262_144) }

    /// Returns free heap pages to the system (glibc's `malloc_trim`).
    public static func trimHeap() { _ = malloc_trim(0) }
}

/// Checks `IdleTrim` every second while there is something to trim, and
/// sleeps until the next RPC request (`activity`) once the quiet period's
/// trim is done: an idle broker takes no wake-ups for it.
final class TrimService: Service {
    let server: RPCServer
    let activity: Wakeup
    let logger: Logger
    private let stop = Wakeup()
    private let stopping = Atomic<Bool>(false)

    /// Messages that reach the broker other than over the socket (D-Bus calls), counted as activity too.
    let otherMessages: @Sendable () -> Int
    /// Caches that the broker's parts give back before the heap is trimmed (the state store's pages).
    let releaseCaches: @Sendable () async -> Void

    init(
        server: RPCServer, activity: Wakeup, logger: Logger, otherMessages: @escaping @Sendable () -> Int = { 0 },
        releaseCaches: @escaping @Sendable () async -> Void = {}
    ) {
        self.server = server
        self.activity = activity
        self.logger = logger
        self.otherMessages = otherMessages
        self.releaseCaches = releaseCaches
    }

    func run() async {
        var idle = IdleTrim()
        while !stopping.load(ordering: .acquiring) {
            if idle.isSettled { await activity.wait() }
            await stop.wait(timeout: .seconds(1))
            guard !stopping.load(ordering: .acquiring) else { return }
            let statistics = server.statistics
            guard idle.check(messages: statistics.messages + otherMessages(), inFlight: statistics.inFlight) else {
                continue
            }
            // The resident size is read only when it is logged.
            let before = logger.minimum >= .debug ? ProcFS.residentKiB() ?? -1 : nil
            await releaseCaches()
            IdleTrim.trimHeap()
            if let before {
                logger.debug(
                    "idle: heap trimmed", ["rss.kib.before": "\(before)", "rss.kib.after": "\(ProcFS.residentKiB() ?? -1)"])
            }
        }
    }

    func shutdown() {
        stopping.store(true, ordering: .releasing)
        stop.signal()
        activity.signal()
    }
}
