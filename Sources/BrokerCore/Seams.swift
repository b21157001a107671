import BrowserLoginProtocol

// The outside effects of the broker, each behind a small protocol, so that
// the logic is unit-tested with in-memory doubles and run live against the
// real keyring, server and database.

// MARK: - Vault

/// Why the vault could not do what was asked. Each message says how to fix it.
public enum VaultError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No session bus, or no Secret Service on it.
    case unavailable(String)
    /// The collection is locked (and the user did not unlock it).
    case locked(String)
    /// Any other failure of the Secret Service.
    case failed(String)

    public var message: String {
        switch self {
        case .unavailable(let m), .locked(let m), .failed(let m): m
        }
    }
    public var description: String { message }
}

/// What the vault reports about itself.
public struct VaultHealth: Sendable, Equatable {
    public var available: Bool
    public var locked: Bool
    public var detail: String
    /// Which vault: `secret-service`, or `file` (`Vault=file` in broker.conf).
    public var vault: String
    /// The file vault: whether its key is in the kernel keyring now (nil for the Secret Service).
    public var keyPresent: Bool?
    /// The file vault: its directory, and whether its key is sealed with a passphrase (docs/vault.md).
    public var directory: String?
    public var sealed: Bool?
    public init(
        available: Bool, locked: Bool, detail: String, vault: String = "secret-service", keyPresent: Bool? = nil
    ) {
        self.available = available
        self.locked = locked
        self.detail = detail
        self.vault = vault
        self.keyPresent = keyPresent
    }
}

/// Secret storage keyed by attributes. The implementation adds its own
/// schema name, so attributes only need to be unique within the broker
/// (for example `client` + `attempt`, or `client` + `kind=session`).
/// Calls may block on a keyring prompt: implementations keep them off the
/// caller's queue.
public protocol SecretVault: Sendable {
    /// Stores (or replaces) the item with exactly these attributes.
    func store(_ secret: [UInt8], label: String, attributes: [String: String]) async throws(VaultError)
    /// The secret of the item with exactly these attributes, or nil.
    func lookup(attributes: [String: String]) async throws(VaultError) -> [UInt8]?
    /// Removes the items with these attributes; no error when there is none.
    func remove(attributes: [String: String]) async throws(VaultError)
    /// Whether the Secret Service is there and unlocked.
    func health() async -> VaultHealth
    /// Whether something delivers the vault's change signals to
    /// `healthMayHaveChanged` (a vault may then keep its `health` answer longer).
    func watchingChanges(_ watching: Bool)
    /// The vault's service announced a change: `health` must ask afresh.
    func healthMayHaveChanged()
    /// What `health` would answer without asking the service (a recent
    /// answer), or nil when it would have to ask.
    func knownHealth() -> VaultHealth?
}

extension SecretVault {
    /// A vault without change signals ignores them.
    public func watchingChanges(_ watching: Bool) {}
    public func healthMayHaveChanged() {}
    public func knownHealth() -> VaultHealth? { nil }
}

// MARK: - HTTP transport

/// One HTTP request the broker sends. `url` is absolute.
public struct HTTPRequest: Sendable, Equatable {
    public var method: String
    public var url: String
    public var headers: [HTTPHeader]
    public var body: [UInt8]?
    /// Total time allowed, connect included.
    public var timeoutMilliseconds: Int
    public var connectTimeoutMilliseconds: Int
    /// Answers larger than this fail with `responseTooLarge`.
    public var maximumResponseBytes: Int
    /// A PEM file of CAs to trust instead of the system's.
    public var caFile: String?
    /// True for requests that change state at the server (create, exchange,
    /// cancel, acknowledge, revoke, app POSTs): they are sent on a fresh
    /// connection and never repeated, by the transport or anyone else.
    public var changesState: Bool

    public init(
        method: String, url: String, headers: [HTTPHeader] = [], body: [UInt8]? = nil,
        timeoutMilliseconds: Int = 30_000, connectTimeoutMilliseconds: Int = 10_000,
        maximumResponseBytes: Int = 1 << 20, caFile: String? = nil, changesState: Bool
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMilliseconds = timeoutMilliseconds
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.maximumResponseBytes = maximumResponseBytes
        self.caFile = caFile
        self.changesState = changesState
    }
}

public struct HTTPHeader: Sendable, Equatable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    /// Headers in the order received; names as sent by the server.
    public var headers: [HTTPHeader]
    public var body: [UInt8]
    public init(status: Int, headers: [HTTPHeader], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }
}

/// Why a request got no HTTP answer. The distinction that matters is
/// whether the request may have reached the server: `notSent` means it
/// certainly did not (DNS, connect or TLS handshake failed); every other
/// case may have been processed.
public enum HTTPTransportError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request never left: name resolution, connection or TLS failed.
    case notSent(String)
    /// Sent (or possibly sent), then the connection failed or timed out.
    case noAnswer(String)
    /// The answer was larger than `maximumResponseBytes`.
    case responseTooLarge
    /// The URL or request could not be built.
    case invalidRequest(String)

    public var description: String {
        switch self {
        case .notSent(let m): "not sent: \(m)"
        case .noAnswer(let m): "no answer: \(m)"
        case .responseTooLarge: "the answer is too large"
        case .invalidRequest(let m): "invalid request: \(m)"
        }
    }
}

/// Sends one request, follows no redirect, keeps no cookies, never retries.
public protocol HTTPTransport: Sendable {
    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse
}

// MARK: - Clock

/// Wall-clock time, replaceable in tests.
public protocol Clock: Sendable {
    func now() -> Timestamp
}

public struct SystemClock: Clock {
    public init() {}
    public func now() -> Timestamp { Timestamp.now() }
}
