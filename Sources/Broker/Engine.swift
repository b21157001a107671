import BrokerCore
import BrokerRPC
import BrokerStore
import BrowserLoginProtocol
import Foundation

/// The broker's single owner of attempts and sessions. It persists each
/// change before it acts on it (docs/protocol.md §7 durability order), publishes
/// each committed change to subscribers in commit order, and keeps secrets in
/// the vault only.
///
/// An actor: its awaits on the vault and the server let other calls run, so
/// every step that decides on a state re-reads the record after an await.
public actor BrokerEngine {
    let store: BrokerStore
    let clients: [String: ClientConfig]
    let vault: any SecretVault
    let servers: [String: any SignInProtocol]
    let launcher: any BrowserLauncher
    /// The transport for `http.request` (the app's own API).
    let transport: any HTTPTransport
    let clock: any BrokerCore.Clock
    let logger: Logger
    public let socketPath: String
    /// The directory of the state database (named in `STORAGE_UNAVAILABLE` errors).
    public nonisolated let stateDirectory: String

    var hub = EventHub()
    /// The latest callback that arrived while its attempt was exchanging (memory only: it holds a code).
    var keptCallbacks: [String: KeptCallback] = [:]
    var keptCounter: UInt64 = 0
    /// Attempts whose exchange request is in flight now.
    var exchangesInFlight: Set<String> = []
    /// `login.finish` calls waiting for an attempt's exchange to settle.
    var exchangeWaiters: [String: [UInt64: CheckedContinuation<Void, Never>]] = [:]
    /// Attempts whose reconciliation or follow-up is running now.
    var busy: Set<String> = []
    /// `login.start` calls in flight per client (one live attempt per client).
    var starting: [String: Task<AttemptView, any Error>] = [:]
    /// `session.wait` callers per client.
    var waiters: [String: [UInt64: CheckedContinuation<SessionView?, Never>]] = [:]
    var waiterCounter: UInt64 = 0
    /// Every client's public session view, kept current on each store write:
    /// `session.get` reads it without a query, also off the actor (the RPC fast path).
    public nonisolated let sessionBoard = SessionBoard()
    /// The last session view published per client, to publish changes only.
    var publishedSessions: [String: SessionView] = [:]
    /// Each signed-in client's session secrets, read once from the vault.
    var sessionCache: [String: SessionSecrets] = [:]
    /// Refreshes in flight per client: concurrent callers share one.
    var refreshing: [String: Task<SessionSecrets, any Error>] = [:]
    /// Clients whose sign-out revoke is being sent now: at most one request per session in flight.
    var revokesInFlight: Set<String> = []
    /// When each session is next refreshed and verified.
    var nextRefresh: [String: Timestamp] = [:]
    var nextVerify: [String: Timestamp] = [:]
    /// How often sessions are checked with `GET session`.
    let verifyIntervalMilliseconds: Int64
    public init(
        storePath: String, clients: [ClientConfig], vault: any SecretVault,
        makeServer: (ClientConfig) -> any SignInProtocol, launcher: any BrowserLauncher, transport: any HTTPTransport,
        clock: any BrokerCore.Clock = SystemClock(), logger: Logger, socketPath: String,
        verifyIntervalMilliseconds: Int64 = 300_000
    ) throws {
        self.store = try BrokerStore(path: storePath)
        self.stateDirectory = (storePath as NSString).deletingLastPathComponent
        var byId: [String: ClientConfig] = [:]
        var servers: [String: any SignInProtocol] = [:]
        for client in clients {
            byId[client.id] = client
            servers[client.id] = makeServer(client)
        }
        self.clients = byId
        self.servers = servers
        self.vault = vault
        self.launcher = launcher
        self.transport = transport
        self.verifyIntervalMilliseconds = verifyIntervalMilliseconds
        self.clock = clock
        self.logger = logger
        self.socketPath = socketPath
        let board = sessionBoard
        let store = self.store
        for id in byId.keys { board.set(try Self.computeSessionView(store, id)) }
        // Runs inside each write, so the board never lags a committed change.
        store.didWrite = { [unowned store] client in
            if let view = try? Self.computeSessionView(store, client) { board.set(view) } else { board.remove(client) }
        }
    }

    // MARK: - Helpers

    func client(_ id: String) throws(BrokerError) -> ClientConfig {
        guard let c = clients[id] else { throw .clientUnknown(id) }
        return c
    }

    func server(_ id: String) -> any SignInProtocol { servers[id]! }

    /// The server's attempt routes; a protocol without them has no attempt there to settle.
    func attemptControl(_ id: String) -> any ServerAttemptControl { servers[id]!.attemptControl ?? NoServerAttempts() }

    func now() -> Timestamp { clock.now() }

    func attempt(_ id: String) throws -> AttemptRecord {
        guard let record = try store.attempt(id: id) else { throw BrokerError.attemptUnknown() }
        return record
    }

    /// Applies `event` to `record` through the state machine, commits it,
    /// and publishes the change. Throws when the machine refuses.
    @discardableResult
    func commit(
        _ record: inout AttemptRecord, _ event: AttemptEvent, error: AttemptError? = nil,
        change: ((inout AttemptRecord) -> Void)? = nil
    ) throws -> AttemptRecord {
        let previous = record.state
        switch AttemptMachine.next(record.state, resolution: record.resolution, on: event) {
        case .success(let next): record.state = next
        case .failure(.notReconciled):
            throw BrokerError(
                .ackNotReconciled,
                "the attempt is uncertain and not reconciled yet: its session may exist at the server; run 'browser-login status' (it reconciles), then acknowledge",
                attemptId: record.id)
        case .failure(.notAllowed(let state)):
            throw BrokerError(
                .attemptNotWaiting, "the attempt is \(state.rawValue); this is not possible now",
                attemptId: record.id)
        }
        if let error { record.error = error }
        change?(&record)
        record.updatedAt = now()
        try store.update(record, previous: previous)
        faultPoint("commit:" + record.state.rawValue)
        logger.info(
            "attempt changed",
            ["attempt.id": record.id, "client": record.client, "from": previous.rawValue, "to": record.state.rawValue]
                .merging(error.map { ["error.code": $0.code] } ?? [:]) { a, _ in a })
        publishAttempt(record)
        return record
    }

    /// Commits a change that is not a state transition (follow-ups, resolution).
    func save(_ record: inout AttemptRecord, publish: Bool = false) throws {
        record.updatedAt = now()
        try store.update(record, previous: record.state)
        if publish { publishAttempt(record) }
    }

    func publishAttempt(_ record: AttemptRecord) {
        if let params = try? JSONValue(encoding: ["attempt": AttemptView(record)]) {
            hub.publish(client: record.client, method: "login.changed", params: params)
        }
        publishSessionIfChanged(record.client)
    }

    func publishSessionIfChanged(_ client: String) {
        guard let view = try? sessionView(client), publishedSessions[client] != view else { return }
        publishedSessions[client] = view
        if let params = try? JSONValue(encoding: ["session": view]) {
            hub.publish(client: client, method: "session.changed", params: params)
        }
        if view.status == .signedIn, let list = waiters.removeValue(forKey: client) {
            for continuation in list.values { continuation.resume(returning: view) }
        }
    }

    /// The public session of a client: its stored session when signed in,
    /// `signingIn` while an attempt is live, else what the store says.
    func sessionView(_ client: String) throws -> SessionView {
        if let view = sessionBoard.view(client) { return view }
        return try Self.computeSessionView(store, client)
    }

    /// `sessionView` from the store (what the board holds).
    static func computeSessionView(_ store: BrokerStore, _ client: String) throws -> SessionView {
        let record = try store.session(client: client)
        if let record, record.status == .signedIn { return record.view }
        let live = try store.list(client: client, states: [.starting, .waiting, .exchanging], limit: 1)
        if !live.isEmpty { return SessionView(client: client, status: .signingIn) }
        return record?.view ?? .signedOut(client)
    }

    /// A fault point of the crash tests (`TestFaults`; a no-op in release builds).
    func faultPoint(_ point: String) { TestFaults.hit(point) }

    func newLocalId() throws -> String {
        "at_" + (try Crypto.randomToken(bytes: 12))
    }

    func view(_ record: AttemptRecord) -> AttemptView { AttemptView(record) }

    // MARK: - Info

    public struct Info: Codable, Sendable {
        var version: String
        var `protocol`: Int
        var socket: String
        var vault: String
        var vaultAvailable: Bool
        var vaultLocked: Bool
        var vaultDetail: String
    }

    /// Nonisolated: apps poll it; it needs nothing of the engine's state.
    public nonisolated func info() async -> Info {
        let health = await vault.health()
        return Info(
            version: BrokerVersion.string, protocol: 1, socket: socketPath, vault: "secret-service",
            vaultAvailable: health.available && !health.locked, vaultLocked: health.locked, vaultDetail: health.detail)
    }

    public struct ClientView: Codable, Sendable {
        var id: String
        var appName: String
        var server: String
        var returnUrl: String
        var policy: String
    }

    public func clientList(mayUse: (ClientConfig) -> Bool) -> [ClientView] {
        clients.values.sorted { $0.id < $1.id }.filter(mayUse).map {
            ClientView(
                id: $0.id, appName: $0.appName, server: $0.server.serialized, returnUrl: $0.returnURL.text,
                policy: $0.policy.rawValue)
        }
    }

    /// Nonisolated: `clients` never changes, so the method table asks without an actor hop.
    public nonisolated func config(for client: String) -> ClientConfig? { clients[client] }

    // MARK: - Lists

    public func list(client: String?, states: [AttemptState]?, mayUse: (String) -> Bool) throws -> [AttemptView] {
        if let client { _ = try self.client(client) }
        return try store.list(client: client, states: states).filter { mayUse($0.client) }.map(view)
    }

    public func attemptClient(_ attemptId: String) throws -> String { try attempt(attemptId).client }

    // MARK: - Subscriptions

    public func subscribe(
        connection: UInt64, clients: [String]?, mayUse: @escaping @Sendable (String) -> Bool,
        send: @escaping @Sendable (String, JSONValue) -> Void
    ) throws -> String {
        if let clients { for c in clients { _ = try client(c) } }
        return hub.subscribe(connection: connection, clients: clients.map(Set.init), mayUse: mayUse, send: send)
    }

    public func unsubscribe(_ id: String, connection: UInt64) -> Bool { hub.unsubscribe(id, connection: connection) }

    public func connectionClosed(_ connection: UInt64) { hub.dropConnection(connection) }
}

/// A callback kept while its attempt was exchanging, with the token of the `finish` call that delivered it.
struct KeptCallback: Sendable {
    var callback: Callback
    var token: UInt64
}

/// The broker's version.
public enum BrokerVersion {
    public static let string = "0.1.0"
}

extension BrokerEngine {
    public func clientConfigs() -> [String: ClientConfig] { clients }
}
