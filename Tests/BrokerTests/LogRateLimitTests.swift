import Testing

@testable import Broker
@testable import Engine

@Suite struct LogRateLimitTests {
    @Test func oneLinePerKindAndIntervalWithTheNumberNotLogged() {
        var limit = LogRateLimit(interval: 10)
        #expect(limit.admit("evicted", now: 100) == 0)
        #expect(limit.admit("evicted", now: 105) == nil)
        #expect(limit.admit("slow", now: 105) == 0)
        #expect(limit.admit("evicted", now: 109) == nil)
        #expect(limit.admit("evicted", now: 110) == 2)
        #expect(limit.admit("evicted", now: 111) == nil)
    }

    /// Two I/O queues log the same kind at once: the one that read the clock
    /// first may get the lock second. Its time is before the last line's; it
    /// counts as within the interval (it was a trap, a subtraction below zero).
    @Test func aClockReadBeforeTheLastLineCountsAsWithinTheInterval() {
        var limit = LogRateLimit(interval: 10_000_000_000)
        #expect(limit.admit("evicted", now: 50_000_000_000) == 0)
        #expect(limit.admit("evicted", now: 49_999_999_999) == nil)
        #expect(limit.admit("evicted", now: 0) == nil)
        #expect(limit.admit("evicted", now: 60_000_000_000) == 2)
    }
}
