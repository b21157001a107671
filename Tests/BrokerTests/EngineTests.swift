import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerRPC
import BrokerTestDoubles
import BrokerVault
import BrowserLoginProtocol
import Foundation
import Synchronization
import Testing

@testable import Broker
@testable import Engine

/// A scripted login server: answers each route from a queue the test fills,
/// and counts the calls. The logic of the engine, without I/O.
final class FakeServer: BrowserLoginRoutes {
    struct State {
        var calls: [String: Int] = [:]
        var exchange: [Result<ExchangeResponse, LoginServerError>] = []
        var refresh: [Result<RefreshResponse, LoginServerError>] = []
        var status: [Result<StatusResponse, LoginServerError>] = []
        var created: [String] = []
        var exchangeGate: (@Sendable () async -> Void)?
        var revokeByToken: [Result<RevokeResponse, LoginServerError>] = []
        var revokeGate: (@Sendable () async -> Void)?
        var refreshGate: (@Sendable () async -> Void)?
        var cannotRevoke = false
        /// The access tokens of the sessions revoked by token, in order.
        var revokedTokens: [String] = []
        var acknowledge: [Result<Void, LoginServerError>] = []
        /// What refresh and revoke throw before sending anything (a session
        /// the protocol cannot use now, as a DPoP key it cannot read).
        var cannotSend: SignInFailure?
    }
    let state = Mutex(State())
    let origin = try! Origin("https://login.example.com")

    func count(_ route: String) -> Int { state.withLock { $0.calls[route] ?? 0 } }
    private func called(_ route: String) { state.withLock { $0.calls[route, default: 0] += 1 } }

    func create(_ request: CreateAttemptRequest) async throws(LoginServerError) -> CreateAttemptResponse {
        called("create")
        let id = "srv" + String(repeating: "a", count: 20) + "\(count("create"))"
        state.withLock { $0.created.append(id) }
        return CreateAttemptResponse(
            attemptId: id, authorizeUrl: issuer + "/browser-login/browser/login?attempt=" + id,
            expiresAt: Timestamp.now().adding(milliseconds: 120_000), issuer: issuer)
    }
    func exchange(attemptId: String, _ request: ExchangeRequest) async throws(LoginServerError) -> ExchangeResponse {
        called("exchange")
        if let gate = state.withLock({ $0.exchangeGate }) { await gate() }
        let next = state.withLock { $0.exchange.isEmpty ? nil : $0.exchange.removeFirst() }
        switch next ?? .failure(.noAnswer("unscripted")) {
        case .success(let r): return r
        case .failure(let f): throw f
        }
    }
    func status(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> StatusResponse {
        called("status")
        let next = state.withLock { $0.status.isEmpty ? nil : $0.status.removeFirst() }
        switch next ?? .failure(.notSent("unscripted")) {
        case .success(let r): return r
        case .failure(let f): throw f
        }
    }
    var canRevoke: Bool { get async { !state.withLock { $0.cannotRevoke } } }
    func cancel(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> ServerAttemptState {
        called("cancel")
        return .cancelled
    }
    func acknowledge(attemptId: String, recoveryKey: String) async throws(LoginServerError) {
        called("acknowledge")
        let next = state.withLock { $0.acknowledge.isEmpty ? nil : $0.acknowledge.removeFirst() }
        if case .failure(let f) = next { throw f }
    }
    func revokeByProof(attemptId: String, recoveryKey: String) async throws(LoginServerError) -> RevokeResponse {
        called("revokeByProof")
        return RevokeResponse(revoked: true)
    }
    func revoke(_ session: IssuedSession) async throws(SignInFailure) -> RevokeResponse {
        if let failure = state.withLock({ $0.cannotSend }) { throw failure }
        called("revokeByToken")
        state.withLock { $0.revokedTokens.append(session.accessToken) }
        if let gate = state.withLock({ $0.revokeGate }) { await gate() }
        let next = state.withLock { $0.revokeByToken.isEmpty ? nil : $0.revokeByToken.removeFirst() }
        switch next ?? .success(RevokeResponse(revoked: true)) {
        case .success(let r): return r
        case .failure(let f): throw f.signInFailure(.revoke)
        }
    }
    func verify(_ session: IssuedSession) async throws(SignInFailure) -> SessionCheck {
        called("session")
        return try await LoginServerError.verification(of: session) { () async throws(LoginServerError) in
            SessionInfoResponse(
                sessionId: "sess", expiresAt: Timestamp.now().adding(milliseconds: 3_600_000),
                account: Account(userId: "u1", email: "ada@example.com", displayName: "Ada"))
        }
    }
    func refresh(_ session: IssuedSession) async throws(SignInFailure) -> IssuedSession {
        if let failure = state.withLock({ $0.cannotSend }) { throw failure }
        called("refresh")
        if let gate = state.withLock({ $0.refreshGate }) { await gate() }
        let next = state.withLock { $0.refresh.isEmpty ? nil : $0.refresh.removeFirst() }
        switch next ?? .failure(.noAnswer("unscripted")) {
        case .success(let r): return Self.refreshed(session, by: r)
        case .failure(let f): throw f.signInFailure(.refresh)
        }
    }

    func issued(for attemptId: String, accessToken: String = "access-1") -> ExchangeResponse {
        let now = Timestamp.now()
        let session = IssuedSession(
            sessionId: "sess", accessToken: accessToken, accessTokenExpiresAt: now.adding(milliseconds: 600_000),
            refreshToken: "refresh-1", expiresAt: now.adding(milliseconds: 3_600_000), authenticatedAt: now,
            authMethod: "test", account: Account(userId: "u1", email: "ada@example.com", displayName: "Ada"))
        return ExchangeResponse(
            session: session,
            receipt: Receipt(
                attemptId: attemptId, sessionId: "sess", issuedAt: now, tokenDigest: Crypto.digest(accessToken)))
    }
}

struct NoBrowser: BrowserLauncher {
    func open(_ url: String, command: String?) async throws(BrokerError) {}
}

struct NoTransport: HTTPTransport {
    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        throw .notSent("no network in unit tests")
    }
}

/// Runs an engine's work items for one test, as the daemon's `ServiceGroup`
/// does; stopped (what runs cancelled and awaited) with its last reference.
final class RunningWork: Sendable {
    let work: WorkService
    init(_ work: WorkService) {
        self.work = work
        Task { await work.run() }
    }
    deinit { work.shutdown() }
}

/// A directory in `$TMPDIR`, removed with its last reference (after each
/// test: a suite's instance lives for one test), whether the test passed or not.
final class ScratchDirectory: Sendable {
    let url: URL
    init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }
}

@Suite struct EngineTests {
    let server = FakeServer()
    let vault = InMemoryVault()
    let engine: BrokerEngine
    let scratch: ScratchDirectory
    let running: RunningWork

    init() throws {
        scratch = try ScratchDirectory("blengine")
        let dir = scratch.url
        let client = ClientConfig(
            id: "com.example.notes", appName: "Example Notes", server: try Origin("https://login.example.com"),
            returnURL: try ReturnURL("com.example.notes:/callback"))
        let server = self.server
        engine = try BrokerEngine(
            storePath: dir.appendingPathComponent("state.sqlite").path, clients: [client], vault: vault,
            makeServer: { _ in server }, callbackReaders: [BrowserLoginCallbacks()], launcher: NoBrowser(),
            transport: NoTransport(),
            logger: Logger(label: "test", sink: { _ in }), socketPath: "/nonexistent")
        running = RunningWork(engine.work)
    }

    func callback(_ code: String, attempt: String) -> String {
        Callback.url(
            returnURL: "com.example.notes:/callback", outcome: .code(code), attempt: attempt,
            issuer: "https://login.example.com")
    }

    func started() async throws -> (AttemptView, String) {
        let view = try await engine.start(
            client: "com.example.notes", ephemeral: false, openBrowser: false, switchAccount: false)
        let serverId = try #require(server.state.withLock { $0.created.last })
        return (view, serverId)
    }

    @Test func aStartKeepsItsProofsInOneKeyringWriteAfterTheServerOpenedIt() async throws {
        let (view, _) = try await started()
        // One write, and it holds what the server answered (login.resume opens it).
        #expect(await vault.operationCount == 1)
        let item = try #require(await vault.allItems.first)
        let secrets = try JSONDecoder().decode(AttemptSecrets.self, from: Data(item.secret))
        #expect(secrets.authorizeUrl == view.authorizeUrl)
        #expect(secrets.authorizeUrl?.isEmpty == false)
        #expect(try await engine.resume(attemptId: view.attemptId, openBrowser: false).authorizeUrl == view.authorizeUrl)
    }

    @Test func aStartWhoseProofsCannotBeKeptEndsAndTellsTheServer() async throws {
        await vault.setMode(.failing)
        let error = await #expect(throws: BrokerError.self) {
            try await engine.start(client: "com.example.notes", ephemeral: false, openBrowser: false, switchAccount: false)
        }
        #expect(error?.code == .vaultUnavailable)
        let attemptId = try #require(error?.attemptId)
        #expect(server.count("create") == 1)
        // The server's attempt is cancelled at once (not left until its expiry), and nothing is kept.
        #expect(server.count("cancel") == 1)
        #expect(try await engine.status(attemptId: attemptId, reconcile: false).state == .failed)
        #expect(await vault.allItems.isEmpty)
    }

    @Test func anExchangeWithoutAnswerIsUncertainAndNeverRepeated() async throws {
        let (view, serverId) = try await started()
        server.state.withLock { $0.exchange = [.failure(.noAnswer("lost"))] }
        await #expect(throws: BrokerError.self) { try await engine.finish(url: callback("c1", attempt: serverId)) }
        #expect(try await engine.status(attemptId: view.attemptId, reconcile: false).state == .uncertain)
        // A second delivery of the same callback sends nothing.
        await #expect(throws: BrokerError.self) { try await engine.finish(url: callback("c1", attempt: serverId)) }
        #expect(server.count("exchange") == 1)
    }

    @Test func aCallbackKeptWhileExchangingIsTriedAfterInvalidGrant() async throws {
        let (view, serverId) = try await started()
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let entered = Mutex(false)
        server.state.withLock {
            $0.exchange = [
                .failure(.refused(status: 400, code: .invalidGrant, message: "forged", retryAfterSeconds: nil)),
                .success(server.issued(for: serverId)),
            ]
            $0.exchangeGate = {
                if entered.withLock({
                    let first = !$0; $0 = true; return first
                }) {
                    await withCheckedContinuation { c in release.withLock { $0 = c } }
                }
            }
        }
        let engine = self.engine
        let forged = Task { try await engine.finish(url: callback("forged", attempt: serverId)) }
        try await waitFor { release.withLock { $0 != nil } }
        // The genuine callback arrives while the forged one is being exchanged:
        // kept, and its finish call answers once that exchange is settled.
        let genuine = Task { try await engine.finish(url: callback("genuine", attempt: serverId)) }
        try await Task.sleep(nanoseconds: 50_000_000)
        #expect(server.count("exchange") == 1)
        release.withLock { $0?.resume() }
        // The forged exchange answers its own refusal…
        await #expect(throws: BrokerError.self) { try await forged.value }
        // …and the kept one is exchanged by the call that delivered it.
        let result = try await genuine.value
        #expect(result.state == .completed)
        #expect(result.session?.status == .signedIn)
        #expect(server.count("exchange") == 2)
        #expect(try await engine.session(client: "com.example.notes").status == .signedIn)
        _ = view
    }

    @Test func aCallbackKeptWhileAnExchangeSucceedsAnswersTheCompletedAttempt() async throws {
        let (_, serverId) = try await started()
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let entered = Mutex(false)
        server.state.withLock {
            $0.exchange = [.success(server.issued(for: serverId))]
            $0.exchangeGate = {
                if entered.withLock({
                    let first = !$0; $0 = true; return first
                }) {
                    await withCheckedContinuation { c in release.withLock { $0 = c } }
                }
            }
        }
        let engine = self.engine
        let first = Task { try await engine.finish(url: callback("good", attempt: serverId)) }
        try await waitFor { release.withLock { $0 != nil } }
        let second = Task { try await engine.finish(url: callback("other", attempt: serverId)) }
        try await Task.sleep(nanoseconds: 50_000_000)
        release.withLock { $0?.resume() }
        #expect(try await first.value.state == .completed)
        let kept = try await second.value
        #expect(kept.state == .completed)
        #expect(kept.session?.status == .signedIn)
        // The kept callback is never exchanged once the attempt completed.
        #expect(server.count("exchange") == 1)
    }

    func signedIn() async throws {
        let (_, serverId) = try await started()
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(url: callback("c1", attempt: serverId))
    }

    @Test func signOutSendsItsRevokeOnceEvenWhenTheTimerRuns() async throws {
        try await signedIn()
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        server.state.withLock {
            $0.revokeGate = { await withCheckedContinuation { c in release.withLock { $0 = c } } }
        }
        let engine = self.engine
        let signOut = Task { try await engine.signOut(client: "com.example.notes") }
        try await waitFor { release.withLock { $0 != nil } }
        // The owed-revoke timer runs while the sign-out's own revoke is in flight.
        for _ in 0..<5 { await engine.tick() }
        server.state.withLock { $0.revokeGate = nil }
        release.withLock { $0?.resume() }
        #expect(try await signOut.value.status == .signedOut)
        for _ in 0..<5 { await engine.tick() }
        #expect(server.count("revokeByToken") == 1)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)
    }

    @Test func signOutAnswersOnlyOnceTheTimersRevokeInFlightIsSettled() async throws {
        try await signedIn()
        // A revoke owed from an earlier sign-out, retried by the timer while the next session signs out.
        server.state.withLock { $0.revokeByToken = [.failure(.notSent("refused"))] }
        _ = try await engine.signOut(client: "com.example.notes")
        let (_, serverId) = try await started()
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(url: callback("c2", attempt: serverId))
        let release = Mutex<CheckedContinuation<Void, Never>?>(nil)
        server.state.withLock {
            $0.revokeGate = { await withCheckedContinuation { c in release.withLock { $0 = c } } }
        }
        let engine = self.engine
        let timer = Task { await engine.tick() }
        try await waitFor { release.withLock { $0 != nil } }
        let answered = Mutex(false)
        let signOut = Task {
            let view = try await engine.signOut(client: "com.example.notes")
            answered.withLock { $0 = true }
            return view
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(answered.withLock { $0 } == false)
        server.state.withLock { $0.revokeGate = nil }
        release.withLock { $0?.resume() }
        #expect(try await signOut.value.status == .signedOut)
        _ = await timer.value
        #expect(server.count("revokeByToken") == 2)
    }

    @Test func aSignOutRevokeIsOwedOnlyWhenItNeverReachedTheServer() async throws {
        try await signedIn()
        // Not sent: owed, and sent once later.
        server.state.withLock { $0.revokeByToken = [.failure(.notSent("refused"))] }
        _ = try await engine.signOut(client: "com.example.notes")
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) != nil)
        await engine.tick()
        #expect(server.count("revokeByToken") == 2)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)
        for _ in 0..<3 { await engine.tick() }
        #expect(server.count("revokeByToken") == 2)

        // Sent with no answer: may have reached the server, never sent again.
        let (_, serverId) = try await started()
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(url: callback("c2", attempt: serverId))
        server.state.withLock { $0.revokeByToken = [.failure(.noAnswer("lost"))] }
        _ = try await engine.signOut(client: "com.example.notes")
        for _ in 0..<3 { await engine.tick() }
        #expect(server.count("revokeByToken") == 3)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)
    }

    @Test func aLostRefreshAnswerIsRepeatedOnceOnly() async throws {
        let (_, serverId) = try await started()
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(url: callback("c1", attempt: serverId))
        let current = try await engine.currentSession("com.example.notes")
        let successor = RefreshResponse(
            accessToken: "access-2", accessTokenExpiresAt: Timestamp.now().adding(milliseconds: 600_000),
            refreshToken: "refresh-2", expiresAt: current.session.expiresAt!)
        server.state.withLock { $0.refresh = [.failure(.noAnswer("lost")), .success(successor)] }
        let next = try await engine.refreshSession("com.example.notes", current: current)
        #expect(next.session.accessToken == "access-2")
        #expect(server.count("refresh") == 2)
        // The new pair is in the vault.
        let stored = try #require(
            try await vault.lookup(attributes: ["kind": "session", "client": "com.example.notes"]))
        #expect(String(decoding: stored, as: UTF8.self).contains("access-2"))
        // Two lost answers: not repeated a third time.
        server.state.withLock { $0.refresh = [.failure(.noAnswer("lost")), .failure(.noAnswer("lost"))] }
        await #expect(throws: BrokerError.self) {
            try await engine.refreshSession("com.example.notes", current: next)
        }
        #expect(server.count("refresh") == 4)
    }

    /// The seam says whether its server can be told of a sign-out; the
    /// `session.signOut` reply says so when it cannot (docs/providers.md).
    @Test func aSignOutAtAServerThatCannotRevokeSaysSo() async throws {
        try await signedIn()
        #expect(try await engine.signOut(client: "com.example.notes").revokedAtServer == nil)
        try await signedIn()
        server.state.withLock { $0.cannotRevoke = true }
        #expect(try await engine.signOut(client: "com.example.notes").revokedAtServer == false)
    }

    /// A signed-in session whose refresh is sent and its answer (`access-2`)
    /// held back until `release` is called.
    func refreshHeldBack() async throws -> (refresh: Task<SessionSecrets, any Error>, release: @Sendable () -> Void) {
        try await signedIn()
        let current = try await engine.currentSession("com.example.notes")
        let successor = RefreshResponse(
            accessToken: "access-2", accessTokenExpiresAt: Timestamp.now().adding(milliseconds: 600_000),
            refreshToken: "refresh-2", expiresAt: current.session.expiresAt!)
        let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        server.state.withLock {
            $0.refresh = [.success(successor)]
            $0.refreshGate = { await withCheckedContinuation { c in gate.withLock { $0 = c } } }
        }
        let engine = self.engine
        let refresh = Task { try await engine.refreshSession("com.example.notes", current: current) }
        try await waitFor { gate.withLock { $0 != nil } }
        let server = self.server
        return (
            refresh,
            {
                server.state.withLock { $0.refreshGate = nil }
                gate.withLock { $0?.resume() }
            }
        )
    }

    /// Issue 29: a sign-out while a refresh's answer is on its way signs out at
    /// once; the answer, when it comes, is revoked and none of it is kept.
    @Test func aRefreshAnsweredAfterASignOutIsRevokedAndNothingOfItKept() async throws {
        let (refresh, release) = try await refreshHeldBack()
        #expect(try await engine.signOut(client: "com.example.notes").status == .signedOut)
        #expect(server.state.withLock { $0.revokedTokens } == ["access-1"])
        release()
        await #expect(throws: BrokerError.self) { try await refresh.value }
        for _ in 0..<3 { await engine.tick() }
        #expect(server.state.withLock { $0.revokedTokens } == ["access-1", "access-2"])
        #expect(try await vault.lookup(attributes: ["kind": "session", "client": "com.example.notes"]) == nil)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)
        #expect(try await engine.session(client: "com.example.notes").status == .signedOut)
    }

    /// … and one answered after the user signed in again leaves the new session alone.
    @Test func aRefreshAnsweredAfterANewSignInLeavesTheNewSessionAlone() async throws {
        let (refresh, release) = try await refreshHeldBack()
        _ = try await engine.signOut(client: "com.example.notes")
        let (_, serverId) = try await started()
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId, accessToken: "access-3"))] }
        _ = try await engine.finish(url: callback("c2", attempt: serverId))
        release()
        await #expect(throws: BrokerError.self) { try await refresh.value }
        for _ in 0..<3 { await engine.tick() }
        #expect(server.state.withLock { $0.revokedTokens } == ["access-1", "access-2"])
        #expect(try await engine.session(client: "com.example.notes").status == .signedIn)
        #expect(try await engine.currentSession("com.example.notes").session.accessToken == "access-3")
        let stored = try #require(
            try await vault.lookup(attributes: ["kind": "session", "client": "com.example.notes"]))
        #expect(String(decoding: stored, as: UTF8.self).contains("access-3"))
    }

    @Test func reconciliationAdoptsOnlyTheSessionWhoseDigestMatches() async throws {
        let (view, serverId) = try await started()
        // The server will say completed with a receipt whose digest is not of a
        // session the vault holds: reconciliation must revoke, never adopt.
        let receipt = Receipt(attemptId: serverId, sessionId: "sess", issuedAt: .now(), tokenDigest: Crypto.digest("other"))
        server.state.withLock {
            $0.exchange = [.failure(.serverFailure(status: 502))]
            $0.status = [
                .success(
                    StatusResponse(
                        state: .completed, expiresAt: .now(), receipt: receipt,
                        sessionExpiresAt: Timestamp.now().adding(milliseconds: 60_000), sessionRevoked: false))
            ]
        }
        let engine = self.engine
        let url = callback("c1", attempt: serverId)
        await #expect(throws: BrokerError.self) { try await engine.finish(url: url) }
        var settled = try await engine.status(attemptId: view.attemptId, reconcile: false)
        for _ in 0..<200 where !settled.reconciled {
            try await Task.sleep(nanoseconds: 10_000_000)
            settled = try await engine.status(attemptId: view.attemptId, reconcile: true)
        }
        // Reconciled, the broker retires it on its own (§7): nothing is left for anyone to acknowledge.
        #expect(settled.state == .acknowledged)
        #expect(settled.reconciled)
        // The same callback again is refused: it never completed the attempt.
        await #expect {
            try await engine.finish(url: url)
        } throws: {
            ($0 as? BrokerError)?.code == .attemptNotWaiting
        }
        #expect(server.count("exchange") == 1)
        #expect(server.count("revokeByProof") == 1)
        #expect(server.count("session") == 0)
        #expect(try await engine.session(client: "com.example.notes").status == .signedOut)
        try await waitFor { server.count("acknowledge") == 1 }
        #expect(try await engine.acknowledge(attemptId: view.attemptId).state == .acknowledged)
        #expect(
            try await vault.lookup(attributes: VaultKeys.attempt(client: "com.example.notes", attemptId: view.attemptId)) == nil)
    }

    @Test func aFollowUpWhoseAnswerWasLostIsNotSentAgainBlind() async throws {
        let (view, serverId) = try await started()
        server.state.withLock {
            $0.exchange = [.success(server.issued(for: serverId))]
            $0.acknowledge = [.failure(.noAnswer("lost"))]
            // The server says the attempt is gone: the lost acknowledge took effect.
            $0.status = [.failure(.refused(status: 404, code: .attemptUnknown, message: "gone", retryAfterSeconds: nil))]
        }
        _ = try await engine.finish(url: callback("c1", attempt: serverId))
        try await waitFor { server.count("acknowledge") == 1 }
        try await waitFor { server.state.withLock { $0.acknowledge.isEmpty } }
        // Once due (the back-off's 2 s), the timer asks status first and sends nothing else.
        try await Task.sleep(nanoseconds: 2_100_000_000)
        await engine.tick()
        try await waitFor { server.count("status") == 1 }
        try await Task.sleep(nanoseconds: 50_000_000)
        #expect(server.count("acknowledge") == 1)
        #expect(try await engine.attempt(view.attemptId).followUp == .none)
    }
}

func waitFor(_ condition: @Sendable () -> Bool) async throws {
    for _ in 0..<500 {
        if condition() { return }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    Issue.record("timed out")
}

/// A transport that answers from a script and records what it was sent.
final class ScriptedTransport: HTTPTransport {
    let state = Mutex<(answers: [HTTPResponse], sent: [HTTPRequest])>(([], []))
    func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        try state.withLock { s throws(HTTPTransportError) in
            s.sent.append(request)
            guard !s.answers.isEmpty else { throw .noAnswer("unscripted") }
            return s.answers.removeFirst()
        }
    }
}

@Suite struct AppRequestTests {
    @Test func tokenExpiredIsRefreshedAndSentOnceMoreAndNothingElseRepeats() async throws {
        let server = FakeServer()
        let transport = ScriptedTransport()
        let scratch = try ScratchDirectory("blapp")
        defer { withExtendedLifetime(scratch) {} }
        let dir = scratch.url
        let client = ClientConfig(
            id: "com.example.notes", appName: "Example Notes", server: try Origin("https://login.example.com"),
            returnURL: try ReturnURL("com.example.notes:/callback"))
        let engine = try BrokerEngine(
            storePath: dir.appendingPathComponent("state.sqlite").path, clients: [client], vault: InMemoryVault(),
            makeServer: { _ in server }, callbackReaders: [BrowserLoginCallbacks()], launcher: NoBrowser(), transport: transport,
            logger: Logger(label: "test", sink: { _ in }), socketPath: "/nonexistent")
        let running = RunningWork(engine.work)
        defer { withExtendedLifetime(running) {} }
        _ = try await engine.start(client: "com.example.notes", ephemeral: false, openBrowser: false, switchAccount: false)
        let serverId = try #require(server.state.withLock { $0.created.last })
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(
            url: Callback.url(
                returnURL: "com.example.notes:/callback", outcome: .code("c"), attempt: serverId,
                issuer: "https://login.example.com"))
        let expired = HTTPResponse(
            status: 401, headers: [HTTPHeader("Content-Type", "application/json")],
            body: Array(#"{"error":{"code":"TOKEN_EXPIRED","message":"expired"}}"#.utf8))
        let ok = HTTPResponse(status: 200, headers: [HTTPHeader("Set-Cookie", "a=b")], body: Array("{}".utf8))
        transport.state.withLock { $0.answers = [expired, ok] }
        server.state.withLock {
            $0.refresh = [
                .success(
                    RefreshResponse(
                        accessToken: "access-2", accessTokenExpiresAt: Timestamp.now().adding(milliseconds: 600_000),
                        refreshToken: "refresh-2", expiresAt: Timestamp.now().adding(milliseconds: 3_600_000)))
            ]
        }
        let request = AppRequest(
            client: "com.example.notes", method: "POST", path: "/api/notes", query: [], headers: [], body: Array("{}".utf8),
            timeoutMilliseconds: 1000)
        let answer = try await engine.appRequest(request)
        #expect(answer.status == 200)
        #expect(answer.headers.isEmpty)
        let sent = transport.state.withLock { $0.sent }
        #expect(sent.count == 2)
        #expect(sent.map { $0.headers.first { $0.name == "Authorization" }?.value } == ["Bearer access-1", "Bearer access-2"])
        #expect(server.count("refresh") == 1)
        // A 500 is never repeated.
        transport.state.withLock { $0.answers = [HTTPResponse(status: 500, headers: [], body: [])] }
        #expect(try await engine.appRequest(request).status == 500)
        #expect(transport.state.withLock { $0.sent.count } == 3)
    }
}
