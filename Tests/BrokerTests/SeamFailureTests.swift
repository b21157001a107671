import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerTestDoubles
import BrokerVault
import BrowserLoginAPI
import BrowserLoginProtocol
import Foundation
import Synchronization
import Testing

@testable import Broker
@testable import Engine

/// The seam's own failures (`SignInFailure`): the engine decides on the
/// neutral cases only, whatever the protocol's wire said.
@Suite struct SeamFailureTests {
    let server = FakeServer()
    let vault = InMemoryVault()
    let engine: BrokerEngine
    let scratch: ScratchDirectory
    let running: RunningWork
    let lines = LogLines()
    let clock = MovableClock()

    init() throws {
        scratch = try ScratchDirectory("blseam")
        let client = ClientConfig(
            id: "com.example.notes", appName: "Example Notes", server: try Origin("https://login.example.com"),
            returnURL: try ReturnURL("com.example.notes:/callback"))
        let server = self.server
        let lines = self.lines
        engine = try BrokerEngine(
            storePath: scratch.url.appendingPathComponent("state.sqlite").path, clients: [client], vault: vault,
            makeServer: { _ in server }, callbackReaders: [BrowserLoginCallbacks()], launcher: NoBrowser(),
            transport: NoTransport(), clock: clock,
            logger: Logger(label: "test", minimum: .debug, sink: { line in lines.lines.withLock { $0.append(line) } }),
            socketPath: "/nonexistent")
        running = RunningWork(engine.work)
    }

    func signedIn() async throws {
        let view = try await engine.start(
            client: "com.example.notes", ephemeral: false, openBrowser: false, switchAccount: false)
        _ = view
        let serverId = try #require(server.state.withLock { $0.created.last })
        server.state.withLock { $0.exchange = [.success(server.issued(for: serverId))] }
        _ = try await engine.finish(
            url: Callback.url(
                returnURL: "com.example.notes:/callback", outcome: .code("c1"), attempt: serverId,
                issuer: "https://login.example.com"))
    }

    static let keyUnavailable = SignInFailure.notSent(
        BrokerError(
            .dpopKeyUnavailable,
            "the session's DPoP key is missing or unreadable in the vault, so its tokens cannot be used; sign in again"),
        detail: "the session's DPoP key is unreadable in the vault")

    /// Issue 31: a session whose key cannot be used now is neither ended
    /// nor lost. Its refresh answers `DPOP_KEY_UNAVAILABLE` and the session
    /// stays signed in with its item; its sign-out's revoke stays owed (not
    /// dropped as "may have reached the server") and goes once the key is
    /// usable again; the log names the code and no secret.
    @Test func aKeyThatCannotBeUsedNowEndsNothingAndKeepsTheRevokeOwed() async throws {
        try await signedIn()
        server.state.withLock { $0.cannotSend = Self.keyUnavailable }
        let current = try await engine.currentSession("com.example.notes")
        let error = await #expect(throws: BrokerError.self) {
            try await engine.refreshSession("com.example.notes", current: current)
        }
        #expect(error?.code == .dpopKeyUnavailable)
        #expect(try await engine.session(client: "com.example.notes").status == .signedIn)
        #expect(try await vault.lookup(attributes: ["kind": "session", "client": "com.example.notes"]) != nil)

        let view = try await engine.signOut(client: "com.example.notes")
        #expect(view.status == .signedOut)
        for _ in 0..<2 { await engine.tick() }
        #expect(server.count("revokeByToken") == 0)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) != nil, "owed")

        // Not at the timer's 250 ms pace: a minute later (a log line a minute, not four a second).
        server.state.withLock { $0.cannotSend = nil }
        await engine.tick()
        #expect(server.count("revokeByToken") == 0)
        clock.advance(milliseconds: 61_000)
        await engine.tick()
        #expect(server.count("revokeByToken") == 1)
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)

        let log = lines.lines.withLock { $0 }.joined(separator: "\n")
        #expect(log.contains("session refresh not sent: DPOP_KEY_UNAVAILABLE"), "\(log)")
        #expect(log.contains("sign-out revoke owed: DPOP_KEY_UNAVAILABLE"), "\(log)")
        #expect(!log.contains("may not have reached"), "\(log)")
        #expect(!log.contains("access-1") && !log.contains("refresh-1"), "no token in the log")
    }

    /// An owed revoke whose server stays unreachable: the next timer round
    /// tries again at once, then 250 ms later, doubling up to 5 s — not four
    /// times a second for the whole outage — and the log says so once
    /// (debug after that). Once the server answers, nothing is owed.
    @Test func anUnreachableServerIsTriedLessAndLessOften() async throws {
        try await signedIn()
        server.state.withLock { $0.revokeByToken = Array(repeating: .failure(.notSent("refused")), count: 8) }
        _ = try await engine.signOut(client: "com.example.notes")
        #expect(server.count("revokeByToken") == 1)
        await engine.tick()
        #expect(server.count("revokeByToken") == 2, "the next round tries again at once")
        var sent = 2
        for wait: Int64 in [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000] {
            if wait >= 2_000 {
                // A second short of the wait (a margin for a slow machine): not yet.
                clock.advance(milliseconds: wait - 1_000)
                await engine.tick()
                #expect(server.count("revokeByToken") == sent, "not before \(wait) ms")
                clock.advance(milliseconds: 1_000)
            } else {
                clock.advance(milliseconds: wait)
            }
            await engine.tick()
            sent += 1
            #expect(server.count("revokeByToken") == sent, "tried again after \(wait) ms")
        }
        #expect(try await vault.lookup(attributes: ["kind": "revoke", "client": "com.example.notes"]) == nil)
        let said = lines.lines.withLock { $0 }.filter { $0.contains("sign-out revoke owed: the server could not be reached") }
        #expect(said.count == 8, "\(said)")
        #expect(said.filter { $0.hasPrefix("<5>") }.count == 1, "once at notice: \(said)")
    }

    /// A refusal that ends the grant ends the session as the protocol says;
    /// any other refusal leaves it signed in.
    @Test func onlyARefusalThatEndsTheGrantEndsTheSession() async throws {
        try await signedIn()
        var current = try await engine.currentSession("com.example.notes")
        server.state.withLock {
            $0.refresh = [
                .failure(.refused(status: 429, code: .rateLimited, message: "slow down", retryAfterSeconds: 3))
            ]
        }
        let limited = await #expect(throws: BrokerError.self) {
            try await engine.refreshSession("com.example.notes", current: current)
        }
        #expect(limited?.code == .serverError && limited?.retryAfterSeconds == 3)
        #expect(try await engine.session(client: "com.example.notes").status == .signedIn)

        current = try await engine.currentSession("com.example.notes")
        server.state.withLock {
            $0.refresh = [.failure(.refused(status: 401, code: .sessionExpired, message: "over", retryAfterSeconds: nil))]
        }
        let ended = await #expect(throws: BrokerError.self) {
            try await engine.refreshSession("com.example.notes", current: current)
        }
        #expect(ended?.code == .notSignedIn && ended?.serverCode == "SESSION_EXPIRED")
        let view = try await engine.session(client: "com.example.notes")
        #expect(view.status == .expired && view.reason == "SESSION_EXPIRED")
    }

    /// Browser Login's wire onto the seam, per call (docs/protocol.md §5.6–§5.8).
    @Test func browserLoginsFailuresMapOntoTheNeutralCases() {
        func refused(_ code: ServerErrorCode) -> LoginServerError {
            .refused(status: 401, code: code, message: "m", retryAfterSeconds: nil)
        }
        #expect(
            LoginServerError.notSent("x").signInFailure(.refresh)
                == .notSent(LoginServerError.notSent("x").brokerError(), detail: "the server could not be reached (x)"))
        guard case .unanswered = LoginServerError.noAnswer("x").signInFailure(.refresh) else {
            Issue.record("noAnswer")
            return
        }
        guard case .indefinite = LoginServerError.serverFailure(status: 502).signInFailure(.revoke) else {
            Issue.record("5xx")
            return
        }
        for (code, status) in [
            (ServerErrorCode.sessionRevoked, SessionStatus.revoked), (.sessionExpired, .expired), (.authUserDisabled, .revoked),
        ] {
            guard case .ended(let ending, let error, _) = refused(code).signInFailure(.refresh) else {
                Issue.record("\(code)")
                continue
            }
            #expect(ending == SessionEnding(status: status, reason: code.rawValue))
            #expect(error.code == .notSignedIn && error.serverCode == code.rawValue)
        }
        guard case .refused = refused(.unauthenticated).signInFailure(.refresh) else {
            Issue.record("a refresh's UNAUTHENTICATED does not end the session")
            return
        }
        guard case .ended(let ending, _, _) = refused(.unauthenticated).signInFailure(.verify) else {
            Issue.record("a check's UNAUTHENTICATED ends the session")
            return
        }
        #expect(ending.status == .revoked)
        guard case .refused = refused(.sessionRevoked).signInFailure(.revoke) else {
            Issue.record("a revoke's refusal is only a refusal")
            return
        }
    }
}

/// The engine's log lines, kept for a test.
final class LogLines: Sendable {
    let lines = Mutex<[String]>([])
}

/// The engine's clock, moved by the test.
final class MovableClock: BrokerCore.Clock {
    private let offset = Mutex<Int64>(0)
    func now() -> Timestamp { Timestamp.now().adding(milliseconds: offset.withLock { $0 }) }
    func advance(milliseconds: Int64) { offset.withLock { $0 += milliseconds } }
}
