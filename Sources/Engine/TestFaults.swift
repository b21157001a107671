import BrokerCore
import BrowserLoginProtocol
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Fault injection for the crash and fault tests (`docs/reliability.md`),
/// compiled into debug (test) builds only; release builds ignore the
/// variables and every point is a no-op.
///
/// `BROWSER_LOGIN_TEST_FAULT=POINT[@N]` kills the daemon with SIGKILL (as
/// `kill -9` would) the Nth time (default: the first) it passes `POINT`;
/// `pause:POINT[@N]` instead writes `POINT.paused` into
/// `$BROWSER_LOGIN_TEST_FAULT_DIR` and blocks there until a test removes that
/// file. Points (each a durability point of docs/protocol.md §7):
/// - `commit:STATE` — right after an attempt's move to STATE is committed;
/// - `vault:store`, `vault:remove` — right after a vault write;
/// - `answer:STEP` — after a request of the sign-in protocol was sent and
///   answered, before the answer is used (a crash between send and answer):
///   `create` (opening the attempt), `exchange`, `status`, `cancel`,
///   `acknowledge`, `revoke-proof`, `revoke-token`, `refresh`, `session`;
/// - named points in the engine (`after-session-in-vault`,
///   `after-reconcile-settled`, `before-signout-revoke`, …).
public enum TestFaults {
    struct Plan: Sendable {
        var point: String
        var occurrence: Int
        var pause: Bool
        var directory: String
    }

    /// Parsed once from the environment.
    static let plan: Plan? = {
        #if DEBUG
            guard var spec = ProcessEnvironment.get("BROWSER_LOGIN_TEST_FAULT"), !spec.isEmpty else {
                return nil
            }
            var pause = false
            if spec.hasPrefix("pause:") {
                pause = true
                spec.removeFirst("pause:".count)
            }
            var occurrence = 1
            if let at = spec.lastIndex(of: "@"), let n = Int(spec[spec.index(after: at)...]), n > 0 {
                occurrence = n
                spec = String(spec[..<at])
            }
            let directory = ProcessEnvironment.get("BROWSER_LOGIN_TEST_FAULT_DIR") ?? "/tmp"
            return Plan(point: spec, occurrence: occurrence, pause: pause, directory: directory)
        #else
            return nil
        #endif
    }()

    static let hits = Mutex<[String: Int]>([:])

    /// Whether any fault is armed (the decorators are only put in place then).
    public static var armed: Bool { plan != nil }

    /// The daemon's vault, with the armed faults in place (itself when none is armed).
    public static func wrapping(_ vault: any SecretVault) -> any SecretVault { armed ? FaultingVault(base: vault) : vault }

    /// A client's sign-in protocol, with the armed faults in place (itself when none is armed).
    public static func wrapping(_ server: any SignInProtocol) -> any SignInProtocol {
        armed ? FaultingSignIn(base: server) : server
    }

    /// Passes the point `name`: kills or pauses the daemon when it is the armed one.
    public static func hit(_ name: String) {
        guard let plan, plan.point == name else { return }
        let count = hits.withLock { hits in
            hits[name, default: 0] += 1
            return hits[name]!
        }
        guard count == plan.occurrence else { return }
        if plan.pause {
            let marker = plan.directory + "/" + name.replacing("/", with: "_") + ".paused"
            close(open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644))
            // Blocks this thread on purpose: the point holds still until the test releases it.
            while FileSystem.exists(marker) { usleep(10_000) }
        } else {
            StandardError.write("<4>browser-login-broker: test fault: killing the daemon fault=\(name)\n")
            kill(getpid(), SIGKILL)
        }
    }
}

/// Runs one request of a sign-in protocol, then passes the `answer:ROUTE`
/// fault point (answered, the answer not used yet), whatever the answer.
private func after<T, E: Error>(_ route: String, _ body: () async throws(E) -> T) async throws(E) -> T {
    let result: Result<T, E>
    do { result = .success(try await body()) } catch { result = .failure(error) }
    TestFaults.hit("answer:" + route)
    return try result.get()
}

/// A sign-in protocol whose answers pass the `answer:STEP` fault points.
struct FaultingSignIn: SignInProtocol {
    let base: any SignInProtocol

    var repeatsLostRefresh: Bool { base.repeatsLostRefresh }
    func reservesAppPath(_ path: String, client: ClientConfig) -> Bool { base.reservesAppPath(path, client: client) }
    var checksSessions: Bool { base.checksSessions }
    var canRevoke: Bool { get async { await base.canRevoke } }
    func rejectsAccessToken(_ response: HTTPResponse) -> Bool { base.rejectsAccessToken(response) }
    func endsSession(_ response: HTTPResponse) -> SessionEnding? { base.endsSession(response) }
    func authorizationHeaders(_ session: IssuedSession, method: String, url: String) throws(BrokerError)
        -> [HTTPHeader]
    { try base.authorizationHeaders(session, method: method, url: url) }
    func wantsFreshNonce(_ response: HTTPResponse, url: String) -> Bool { base.wantsFreshNonce(response, url: url) }
    var defaultFlow: SignInFlow { base.defaultFlow }
    var issuer: String { base.issuer }
    var attemptMilliseconds: Int64 { base.attemptMilliseconds }
    var serverAttempts: (any ServerAttempts)? { base.serverAttempts.map { FaultingServerAttempts(base: $0) } }

    func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    {
        var authorization = try await base.authorize(
            client: client, redirectURI: redirectURI, accounts: accounts, ephemeral: ephemeral)
        if let open = authorization.open {
            authorization.open = { () async throws(BrokerError) -> OpenedAttempt in
                try await after("create") { () async throws(BrokerError) in try await open() }
            }
        }
        return authorization
    }
    func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError) {
        try await base.check(callback, client: client)
    }
    func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        try await after("exchange") { () async throws(LocalRedeemFailure) in
            try await base.redeem(code: code, key: key, proofs: proofs)
        }
    }
    func deviceAvailable(client: ClientConfig) async throws(BrokerError) { try await base.deviceAvailable(client: client) }
    func authorizeDevice() async throws(BrokerError) -> DeviceGrant { try await base.authorizeDevice() }
    func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome {
        await base.poll(deviceCode: deviceCode, dpopKey: dpopKey)
    }
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        try await after("revoke-token") { () async throws(SignInFailure) in try await base.revoke(session) }
    }
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        try await after("session") { () async throws(SignInFailure) in try await base.verify(session) }
    }
    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        try await after("refresh") { () async throws(SignInFailure) in try await base.refresh(session) }
    }
}

/// A server's attempts whose answers pass the `answer:STEP` fault points.
struct FaultingServerAttempts: ServerAttempts {
    let base: any ServerAttempts

    func status(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) -> ServerAttemptReport {
        try await after("status") { () async throws(ServerAttemptFailure) in try await base.status(attempt) }
    }
    func cancel(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        try await after("cancel") { () async throws(ServerAttemptFailure) in try await base.cancel(attempt) }
    }
    func acknowledge(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        try await after("acknowledge") { () async throws(ServerAttemptFailure) in try await base.acknowledge(attempt) }
    }
    func revokeSession(_ attempt: ServerAttemptRef) async throws(ServerAttemptFailure) {
        try await after("revoke-proof") { () async throws(ServerAttemptFailure) in
            try await base.revokeSession(attempt)
        }
    }
}

struct FaultingVault: SecretVault {
    let base: any SecretVault

    func watchingChanges(_ watching: Bool) { base.watchingChanges(watching) }
    func healthMayHaveChanged() { base.healthMayHaveChanged() }
    func knownHealth() -> VaultHealth? { base.knownHealth() }

    func store(_ secret: [UInt8], label: String, attributes: [String: String]) async throws(VaultError) {
        try await base.store(secret, label: label, attributes: attributes)
        TestFaults.hit("vault:store")
    }
    func lookup(attributes: [String: String]) async throws(VaultError) -> [UInt8]? {
        try await base.lookup(attributes: attributes)
    }
    func remove(attributes: [String: String]) async throws(VaultError) {
        try await base.remove(attributes: attributes)
        TestFaults.hit("vault:remove")
    }
    func health() async -> VaultHealth { await base.health() }
}
