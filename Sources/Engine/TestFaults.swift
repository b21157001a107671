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
/// - `answer:ROUTE` — after a request to the login server was sent and
///   answered, before the answer is used (a crash between send and answer):
///   `create`, `exchange`, `cancel`, `acknowledge`, `revoke-proof`,
///   `revoke-token`, `refresh`;
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
        armed ? FaultingLoginServer(base: server) : server
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

/// A login server whose answers pass the `answer:ROUTE` fault points.
struct FaultingLoginServer: SignInProtocol, ServerAttemptControl {
    let base: any SignInProtocol

    private func after<T>(_ route: String, _ body: @autoclosure () async throws(LoginServerError) -> T)
        async throws(LoginServerError) -> T
    {
        let result: Result<T, LoginServerError>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        TestFaults.hit("answer:" + route)
        return try result.get()
    }

    private func after<T>(session route: String, _ body: @autoclosure () async throws(SignInFailure) -> T)
        async throws(SignInFailure) -> T
    {
        let result: Result<T, SignInFailure>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        TestFaults.hit("answer:" + route)
        return try result.get()
    }

    var attemptControl: (any ServerAttemptControl)? { base.attemptControl == nil ? nil : self }
    var localAttempts: (any LocalAttemptSignIn)? { base.localAttempts }
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
    private var control: any ServerAttemptControl { base.attemptControl! }

    func create(_ request: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse {
        try await after("create", await control.create(request))
    }
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(LoginServerError) -> ExchangeResponse {
        try await after("exchange", await control.exchange(attemptId: attemptId, request))
    }
    func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse {
        try await after("status", await control.status(attemptId: attemptId, recoveryKey: recoveryKey))
    }
    func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState {
        try await after("cancel", await control.cancel(attemptId: attemptId, recoveryKey: recoveryKey))
    }
    func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError) {
        try await after("acknowledge", await control.acknowledge(attemptId: attemptId, recoveryKey: recoveryKey))
    }
    func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> RevokeResponse {
        try await after("revoke-proof", await control.revokeByProof(attemptId: attemptId, recoveryKey: recoveryKey))
    }
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        try await after(session: "revoke-token", await base.revoke(session))
    }
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        try await after(session: "session", await base.verify(session))
    }
    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        try await after(session: "refresh", await base.refresh(session))
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
