import CMalloc

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

    /// This process's resident size in KiB (`VmRSS`), for the debug log.
    public static func residentKiB() -> Int? {
        guard let file = fopen("/proc/self/status", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = String(decoding: line.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix("VmRSS:") {
                return Int(text.dropFirst(6).trimmingPrefix(while: { $0 == " " || $0 == "\t" }).prefix(while: \.isNumber))
            }
        }
        return nil
    }

    /// At most `count` malloc arenas (glibc's default is 8 per core). The
    /// broker's work runs on a few dispatch and cooperative-pool threads; each
    /// further arena keeps its own freed pages, which `malloc_trim` can only
    /// return when whole pages are free.
    public static func limitArenas(_ count: Int32 = 2) {
        _ = mallopt(M_ARENA_MAX, count)
    }

    /// Returns free heap pages to the system (glibc's `malloc_trim`).
    public static func trimHeap() {
        _ = malloc_trim(0)
    }
}
