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

/// One email message. Holds a sign-in code: never log its body.
public struct MailMessage: Sendable, Equatable {
    public var to: String
    public var subject: String
    public var body: String
    public init(to: String, subject: String, body: String) {
        self.to = to
        self.subject = subject
        self.body = body
    }
}

/// Sends the sign-in emails. Pluggable: a real deployment plugs in its mail service.
public protocol MailSender: Sendable {
    func send(_ message: MailMessage) throws
}

/// The default sender: writes each message to `directory`, one file per
/// message (`<millis>-<random>.eml`, mode 0600, written atomically), so a
/// developer or a test can read it.
public struct OutboxMailSender: MailSender {
    public let directory: String
    public init(directory: String) { self.directory = directory }

    public func send(_ message: MailMessage) throws {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let name = "\(Timestamp.now().millisecondsSince1970)-\(try Crypto.randomToken(bytes: 6)).eml"
        let text = """
            To: \(message.to)\r
            From: browser-login-server\r
            Subject: \(message.subject)\r
            Date: \(Timestamp.now().rfc3339)\r
            Content-Type: text/plain; charset=utf-8\r
            \r
            \(message.body)
            """
        let temporary = directory + "/." + name + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        else { throw CocoaError(.fileWriteUnknown) }
        try FileManager.default.moveItem(atPath: temporary, toPath: directory + "/" + name)
    }

    /// The messages in `directory` addressed to `email`, oldest first.
    public static func messages(in directory: String, to email: String) -> [MailMessage] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            $0.hasSuffix(".eml") && !$0.hasPrefix(".")
        }.sorted()
        return names.compactMap { name -> MailMessage? in
            guard let data = FileManager.default.contents(atPath: directory + "/" + name) else { return nil }
            let text = String(decoding: data, as: UTF8.self)
            guard let split = text.range(of: "\r\n\r\n") else { return nil }
            var to = ""
            var subject = ""
            for line in text[..<split.lowerBound].components(separatedBy: "\r\n") {
                if line.hasPrefix("To: ") { to = String(line.dropFirst(4)) }
                if line.hasPrefix("Subject: ") { subject = String(line.dropFirst(9)) }
            }
            guard to.lowercased() == email.lowercased() else { return nil }
            return MailMessage(to: to, subject: subject, body: String(text[split.upperBound...]))
        }
    }

    /// The 6-digit code of the newest message to `email`, if any.
    public static func latestCode(in directory: String, to email: String) -> String? {
        guard let body = messages(in: directory, to: email).last?.body else { return nil }
        guard let range = body.range(of: "code is ") else { return nil }
        let code = body[range.upperBound...].prefix(6)
        return code.count == 6 && code.allSatisfy(\.isNumber) ? String(code) : nil
    }
}

extension Row {
    func text(_ name: String) -> String { string(name) ?? "" }
    func millis(_ name: String) -> Int64 { int(name) ?? 0 }
}
