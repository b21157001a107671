import BrowserLoginProtocol
import Foundation

/// A registered native client (docs/protocol.md §1).
public struct ClientRegistration: Sendable, Equatable {
    public var clientId: String
    public var appName: String
    public var returnUrls: [ReturnURL]
    public var policy: ClientPolicy

    public init(clientId: String, appName: String, returnUrls: [ReturnURL], policy: ClientPolicy) {
        self.clientId = clientId
        self.appName = appName
        self.returnUrls = returnUrls
        self.policy = policy
    }

    /// The registered return URL that `text` names (docs/protocol.md §1: exactly as
    /// written, scheme and host case-insensitively), or nil. The one place the
    /// server compares return URLs; it uses the protocol library's matcher.
    public func registeredReturnURL(matching text: String) -> ReturnURL? {
        guard let parts = URLParts(splitting: text) else { return nil }
        return returnUrls.first { $0.matches(parts) }
    }
}

/// A token bucket: `burst` requests at once, refilled at `perMinute`.
public struct RateLimit: Sendable, Equatable {
    public var burst: Int
    public var perMinute: Int
    public init(burst: Int, perMinute: Int) {
        self.burst = burst
        self.perMinute = perMinute
    }
}

/// The rate limits; each applies one bucket per client and one per remote address.
public struct RateLimits: Sendable, Equatable {
    /// `POST native/attempts`.
    public var create = RateLimit(burst: 60, perMinute: 60)
    /// `POST native/attempts/{id}/exchange`.
    public var exchange = RateLimit(burst: 60, perMinute: 60)
    /// Sign-in code entry and code requests on the hosted page (per address and per email).
    public var codeEntry = RateLimit(burst: 30, perMinute: 30)
    public init() {}
}

/// A configuration error: the field, the rule it broke and what to do.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var rule: String
    public var message: String
    public var description: String { "\(field): \(rule): \(message)" }
}

/// Everything the reference server needs. Build it in code (tests), or with
/// `ServerConfiguration.load(json:)` plus command-line flags (the executable).
/// `validated()` checks every rule; `LoginServer` refuses an invalid one.
public struct ServerConfiguration: Sendable {
    /// The IPv4 or IPv6 literal to listen on.
    public var listenAddress = "127.0.0.1"
    /// The TCP port; 0 picks any free port.
    public var port = 8080
    /// `^(/[A-Za-z0-9._~-]+)+$`, default `/browser-login`.
    public var basePath = "/browser-login"
    /// The issuer, `https://host[:port]` (or `http://` on loopback). Nil: `http://<listen>:<port>`,
    /// allowed only on a loopback listen address.
    public var publicOrigin: String?
    public var clients: [ClientRegistration] = []
    /// An attempt's lifetime, 1000–300000 ms.
    public var lifetimeMillis: Int64 = 120_000
    /// A browser session's (and so a native session's) absolute lifetime.
    public var sessionLifetimeMillis: Int64 = 30 * 24 * 3_600_000
    /// An access token's lifetime (capped by the session's expiry).
    public var accessTokenLifetimeMillis: Int64 = 600_000
    /// How long the predecessor of the current refresh token may be repeated.
    public var refreshGraceMillis: Int64 = 60_000
    /// A sign-in code's lifetime (10 minutes).
    public var signInCodeLifetimeMillis: Int64 = 600_000
    /// The SQLite database file.
    public var databasePath = ""
    /// The server secret (32 random bytes, mode 0600); nil: `<databasePath>.key`.
    public var secretKeyPath: String?
    /// Where the default mail sender writes messages; nil: `outbox` next to the database.
    public var outboxPath: String?
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// Base addresses of test accounts (see docs/server.md).
    public var testAccounts: [String] = []
    /// Take the client address from the last `X-Forwarded-For` entry (only behind a trusted proxy).
    public var trustForwardedFor = false
    public var rateLimits = RateLimits()
    /// At most this many connections at once (one thread each).
    public var connectionLimit = 256
    /// FOR TESTS ONLY: the exchange route sleeps this long after committing
    /// the exchange and before answering, so a test can kill the client in between.
    public var testExchangeDelayMillis: Int64 = 0
    /// Who may sign up: `open`, `invite` or `domain` (docs/server.md "Sign-up modes").
    public var signupMode: SignupMode = .open
    /// With `invite`: a new address without an invitation joins the waitlist (`WAITLISTED`).
    public var waitlist = false
    /// With `domain`: the domains whose addresses may sign up.
    public var allowedDomains: [String] = []
    /// How long an invitation is valid (7 days).
    public var invitationLifetimeMillis: Int64 = 7 * 24 * 3_600_000
    /// Where a sign-in email may carry a sign-in link (docs/server.md, "Email"):
    /// http(s) origins and custom `scheme://authority` entries. Empty: code-only email.
    public var emailRedirectUris: [String] = []
    /// The sign-in email's sender and templates.
    public var email = EmailSettings()
    /// Deliver mail over SMTP; nil: write it to the outbox directory.
    public var smtp: SMTPConfiguration?
    /// Upstream OpenID providers offered on the hosted page (docs/server.md).
    public var upstreamProviders: [UpstreamProviderConfiguration] = []
    /// Passkeys' relying parties (docs/server.md, "Passkeys"): hostnames such as
    /// `login.example.com` or `localhost`, never IP literals. Empty: no passkeys.
    public var passkeyRpIds: [String] = []

    public init() {}

    public var resolvedSecretKeyPath: String { secretKeyPath ?? databasePath + ".key" }
    public var resolvedOutboxPath: String {
        outboxPath ?? (URL(fileURLWithPath: databasePath).deletingLastPathComponent().appendingPathComponent("outbox").path)
    }

    /// Checks every rule; throws the first broken one, naming the field.
    public func validate() throws(ConfigurationError) {
        func fail(_ field: String, _ rule: String, _ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: rule, message: message)
        }
        if !isIPLiteral(listenAddress) {
            throw fail("listen", "ip-literal", "listen on an IPv4 or IPv6 literal such as 127.0.0.1 or ::1")
        }
        guard (0...65535).contains(port) else { throw fail("port", "range", "the port is 0 (any free port) to 65535") }
        if !Registration.isValidBasePath(basePath) {
            throw fail("basePath", "pattern", "the base path matches ^(/[A-Za-z0-9._~-]+)+$, e.g. /browser-login")
        }
        if let publicOrigin {
            do { _ = try Origin(publicOrigin) } catch {
                throw fail("publicOrigin", "origin", error.message)
            }
        } else if port != 0 && !Origin.isLoopbackHost(listenAddress.contains(":") ? "[\(listenAddress)]" : listenAddress) {
            throw fail("publicOrigin", "required", "set the public origin (the issuer) when not listening on loopback")
        }
        guard (1000...300_000).contains(lifetimeMillis) else {
            throw fail("lifetimeMillis", "range", "an attempt's lifetime is 1000 to 300000 milliseconds")
        }
        guard sessionLifetimeMillis >= 1000 else {
            throw fail("sessionLifetimeMillis", "range", "a session lives at least 1000 milliseconds")
        }
        guard accessTokenLifetimeMillis >= 1000 else {
            throw fail("accessTokenLifetimeMillis", "range", "an access token lives at least 1000 milliseconds")
        }
        guard (0...3_600_000).contains(refreshGraceMillis) else {
            throw fail("refreshGraceMillis", "range", "the refresh grace window is 0 to 3600000 milliseconds")
        }
        guard signInCodeLifetimeMillis >= 1000 else {
            throw fail("signInCodeLifetimeMillis", "range", "a sign-in code lives at least 1000 milliseconds")
        }
        guard !databasePath.isEmpty else {
            throw fail("database", "required", "set the SQLite database path (--database or \"database\")")
        }
        if (tlsCertificatePath == nil) != (tlsKeyPath == nil) {
            throw fail(
                tlsCertificatePath == nil ? "tls.certificate" : "tls.key", "pair", "TLS needs both a certificate and a key")
        }
        if tlsCertificatePath != nil, let publicOrigin, publicOrigin.hasPrefix("http://") {
            throw fail("publicOrigin", "scheme", "with TLS on, the public origin is https")
        }
        guard !clients.isEmpty else { throw fail("clients", "at-least-one", "register at least one client") }
        var ids: Set<String> = []
        for (i, client) in clients.enumerated() {
            let field = "clients[\(i)]"
            if !Registration.isValidClientId(client.clientId) {
                throw fail(field + ".clientId", "pattern", "a client id matches [A-Za-z0-9._-]{1,64}")
            }
            if !ids.insert(client.clientId).inserted {
                throw fail(field + ".clientId", "unique", "the client id '\(client.clientId)' is registered twice")
            }
            if !(1...80).contains(client.appName.count) {
                throw fail(field + ".appName", "length", "an app name is 1 to 80 characters")
            }
            if client.returnUrls.isEmpty {
                throw fail(field + ".returnUrls", "at-least-one", "register at least one return URL")
            }
            // Listed twice as the matcher sees them (scheme and host case aside).
            if Set(client.returnUrls.map(\.parts.matchKey)).count != client.returnUrls.count {
                throw fail(field + ".returnUrls", "unique", "a return URL is listed twice (scheme and host case aside)")
            }
        }
        try validateTestAccounts()
        for (name, limit) in [
            ("create", rateLimits.create), ("exchange", rateLimits.exchange), ("codeEntry", rateLimits.codeEntry),
        ] {
            if limit.burst < 1 { throw fail("rateLimits.\(name).burst", "range", "a burst is at least 1") }
            if limit.perMinute < 1 { throw fail("rateLimits.\(name).perMinute", "range", "a rate is at least 1 per minute") }
        }
        guard (1...10_000).contains(connectionLimit) else {
            throw fail("connectionLimit", "range", "the connection limit is 1 to 10000")
        }
        guard (0...600_000).contains(testExchangeDelayMillis) else {
            throw fail("testExchangeDelayMillis", "range", "the test exchange delay is 0 to 600000 milliseconds")
        }
        try validateSignup()
        try validateMail()
        try validateUpstreamProviders()
        try validatePasskeyRpIds()
    }

}

func isIPLiteral(_ text: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
}

/// A syntactically plausible email address: one `@`, a non-empty local part
/// and a domain with a dot, printable ASCII, at most 254 bytes. Lower-cased.
struct EmailAddress: Sendable, Equatable {
    let local: String
    let domain: String
    var text: String { local + "@" + domain }

    init?(_ raw: String) {
        let text = raw.lowercased()
        guard text.utf8.count <= 254, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64 else { return nil }
        let domain = parts[1]
        guard domain.contains("."), !domain.hasPrefix("."), !domain.hasSuffix("."), !domain.contains(".."),
            domain.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "." })
        else { return nil }
        guard !parts[0].contains("\""), !parts[0].contains(","), !parts[0].contains(";"), !parts[0].contains("<"),
            !parts[0].contains(">")
        else { return nil }
        local = String(parts[0])
        self.domain = String(domain)
    }
}
