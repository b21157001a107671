import BrowserLoginProtocol
import Foundation
import SQLiteSupport
import Synchronization

/// A protocol error answered to a client: its code (and so its status), a
/// message that never repeats a secret, and for 429 the `Retry-After` seconds.
struct APIError: Error, Sendable {
    var code: ServerErrorCode
    var message: String
    var retryAfterSeconds: Int?
    var extraHeaders: [(name: String, value: String)] = []

    init(_ code: ServerErrorCode, _ message: String, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }
}

/// The server's notion of now, in milliseconds since 1970. Tests pass a
/// manual clock to cross expiries without sleeping.
public typealias ServerClock = @Sendable () -> Int64

public enum Clocks {
    public static let system: ServerClock = { Timestamp.now().millisecondsSince1970 }
}

/// In-memory token buckets keyed by "kind:key" (per client, per address).
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Int64
    }
    private let buckets = Mutex<[String: Bucket]>([:])

    /// Takes one token; answers nil when allowed, else the seconds until one is available.
    func take(_ key: String, limit: RateLimit, now: Int64) -> Int? {
        let perMilli = Double(limit.perMinute) / 60_000
        return buckets.withLock { all -> Int? in
            if all.count > 50_000 {
                all = all.filter { Double($0.value.tokens) + Double(now - $0.value.updated) * perMilli < Double(limit.burst) }
            }
            var bucket = all[key] ?? Bucket(tokens: Double(limit.burst), updated: now)
            bucket.tokens = min(Double(limit.burst), bucket.tokens + Double(max(0, now - bucket.updated)) * perMilli)
            bucket.updated = now
            let allowed = bucket.tokens >= 1
            if allowed { bucket.tokens -= 1 }
            all[key] = bucket
            guard !allowed else { return nil }
            let wait = (1 - bucket.tokens) / perMilli
            return max(1, Int((wait / 1000).rounded(.up)))
        }
    }
}

extension Row {
    func text(_ name: String) -> String { string(name) ?? "" }
    func millis(_ name: String) -> Int64 { int(name) ?? 0 }
}
