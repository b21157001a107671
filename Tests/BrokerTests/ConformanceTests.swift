import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerOAuth
import BrokerTestDoubles
import BrowserLoginAPI
import BrowserLoginProtocol
import Foundation
import Synchronization
import Testing

@testable import Broker
@testable import Engine

/// The protocols the conformance suite runs against: Browser Login (scripted
/// by `FakeServer`), OAuth 2.0 / OpenID Connect (the real `OAuthSignIn` and
/// `OAuthProvider` over HTTP to a scripted provider, ScriptedProvider.swift)
/// and the test-only ticket protocol (TicketProtocol.swift).
enum ConformanceSubject: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case browserLogin
    case oauth
    case ticket
    var testDescription: String { rawValue }

    /// Whether the protocol's server keeps the attempt, so that an exchange
    /// whose answer was lost is left `uncertain` and settled by asking the
    /// server (docs/protocol.md §7). Without one (a standard provider,
    /// docs/providers.md), nothing can be asked: the attempt ends `failed`.
    var reconcilesLostExchange: Bool { self == .browserLogin }
}

/// One protocol behind the engine, and the few things the suite asks of it
/// in protocol-neutral words: grant, lose or hold the next exchange, hold the
/// next refresh, build the callback of the last attempt, count exchanges and
/// revoked tokens.
final class ConformanceHarness: Sendable {
    let subject: ConformanceSubject
    let fake = FakeServer()
    let ticket = TicketServer()
    let provider: ScriptedProvider
    /// Holds the next exchange, processed by the server, before its answer.
    let hold = ExchangeHold()
    /// Holds the next refresh, processed by the server, before its answer.
    let refreshHold = ExchangeHold()
    let vault = InMemoryVault()
    let scratch: ScratchDirectory
    let client: ClientConfig
    /// The authorize URLs of the attempts begun, in order: what the browser opens.
    let authorizeURLs = Mutex<[String]>([])
    static let clientId = "com.example.notes"
    /// The OAuth client's provider keys (docs/providers.md): `Protocol=oidc`,
    /// `Issuer=`, `ClientId=` (a public client), `Scopes=openid email profile`.
    static let providerSettings = ProviderSettings(
        kind: .oidc, issuer: ScriptedProvider.issuer, clientId: ScriptedProvider.clientId,
        scopes: ["openid", "email", "profile"])

    init(_ subject: ConformanceSubject) throws {
        self.subject = subject
        scratch = try ScratchDirectory("blconformance")
        provider = ScriptedProvider(hold: hold, refreshHold: refreshHold)
        let (hold, refreshHold) = (self.hold, self.refreshHold)
        fake.state.withLock {
            $0.exchangeGate = { await hold.arrive() }
            $0.refreshGate = { await refreshHold.arrive() }
        }
        let returnURL = try ReturnURL("com.example.notes:/callback")
        switch subject {
        case .oauth:
            client = ClientConfig(
                id: Self.clientId, appName: "Example Notes", server: try Origin("https://id.example.test"),
                returnURL: returnURL, provider: Self.providerSettings)
        case .browserLogin, .ticket:
            client = ClientConfig(
                id: Self.clientId, appName: "Example Notes", server: try Origin("https://login.example.com"),
                returnURL: returnURL)
        }
    }

    /// The client's protocol as the daemon's `makeServer` builds it: a new
    /// one for each engine (an OAuth client's `OAuthProvider` starts with no
    /// metadata after a restart); the servers' state outlives engines.
    func makeServer(_ client: ClientConfig) -> any SignInProtocol {
        switch subject {
        case .browserLogin: return fake
        case .ticket: return HeldRedeem(base: ticket, hold: hold, refreshHold: refreshHold)
        case .oauth:
            let oauth = OAuthProvider(
                settings: client.provider ?? Self.providerSettings, transport: provider, caFile: nil,
                clock: SystemClock(), cache: nil)
            return OAuthSignIn(provider: oauth, clock: SystemClock())
        }
    }

    /// An engine on this harness's store and vault (a second one is the same
    /// broker after a restart); its work runs as long as the answer lives.
    /// Every protocol's callback reader is registered, as in the daemon.
    func engine() throws -> (BrokerEngine, RunningWork) {
        let engine = try BrokerEngine(
            storePath: scratch.url.appendingPathComponent("state.sqlite").path, clients: [client], vault: vault,
            makeServer: makeServer, callbackReaders: [OAuthCallbacks(), TicketCallbacks(), BrowserLoginCallbacks()],
            launcher: NoBrowser(),
            transport: NoTransport(), logger: Logger(label: "test", sink: { _ in }), socketPath: "/nonexistent")
        return (engine, RunningWork(engine.work))
    }

    func start(_ engine: BrokerEngine) async throws -> AttemptView {
        let view = try await engine.start(
            client: Self.clientId, ephemeral: false, openBrowser: false, switchAccount: false)
        if let url = view.authorizeUrl { authorizeURLs.withLock { $0.append(url) } }
        return view
    }

    /// The browser's return for the last attempt begun.
    func callback(_ code: String) throws -> String {
        switch subject {
        case .browserLogin:
            let id = try #require(fake.state.withLock { $0.created.last })
            return Callback.url(
                returnURL: "com.example.notes:/callback", outcome: .code(code), attempt: id, issuer: fake.issuer)
        case .ticket:
            let id = try #require(ticket.state.withLock { $0.tickets.last })
            return "com.example.notes:/callback?ticket=\(id)&code=\(code)"
        case .oauth:
            return try provider.authorize(try #require(authorizeURLs.withLock { $0.last }), code: code)
        }
    }

    func grantNextExchange() throws {
        switch subject {
        case .browserLogin:
            let id = try #require(fake.state.withLock { $0.created.last })
            fake.state.withLock { $0.exchange = [.success(fake.issued(for: id))] }
        case .ticket: ticket.state.withLock { $0.redeem = [.granted] }
        case .oauth: provider.state.withLock { $0.exchange = [.answer] }
        }
    }

    func loseNextExchange() {
        switch subject {
        case .browserLogin: fake.state.withLock { $0.exchange = [.failure(.noAnswer("lost"))] }
        case .ticket: ticket.state.withLock { $0.redeem = [.lost] }
        case .oauth: provider.state.withLock { $0.exchange = [.lose] }
        }
    }

    func scriptRefresh() {
        guard subject == .browserLogin else { return }  // The others rotate by themselves.
        let now = Timestamp.now()
        fake.state.withLock {
            $0.refresh = [
                .success(
                    RefreshResponse(
                        accessToken: "access-2", accessTokenExpiresAt: now.adding(milliseconds: 600_000),
                        refreshToken: "refresh-2", expiresAt: now.adding(milliseconds: 3_600_000)))
            ]
        }
    }

    /// The exchanges (of a code for a session) the server received.
    var exchanges: Int {
        switch subject {
        case .browserLogin: fake.count("exchange")
        case .ticket: ticket.count("redeem")
        case .oauth: provider.count("authorization_code")
        }
    }
    /// The access token the server issued last.
    var latestAccessToken: String {
        switch subject {
        case .browserLogin: "access-2"  // scriptRefresh's
        case .ticket: "ticket-access-\(ticket.state.withLock { $0.refreshed } + 1)"
        case .oauth: provider.latestAccessToken
        }
    }
    /// The access tokens of the sessions the server revoked, in order.
    var revokedTokens: [String] {
        switch subject {
        case .browserLogin: fake.state.withLock { $0.revokedTokens }
        case .ticket: ticket.state.withLock { $0.revokedTokens }
        case .oauth: provider.state.withLock { $0.revokedTokens }
        }
    }
    func storedSession() async throws -> String? {
        try await vault.lookup(attributes: ["kind": "session", "client": Self.clientId]).map {
            String(decoding: $0, as: UTF8.self)
        }
    }
}

/// The conformance suite (issue 29 item 2): the same story through the
/// engine for every protocol behind `SignInProtocol` — Browser Login, OAuth
/// 2.0 / OpenID Connect and the ticket protocol — begin, callback, exchange,
/// refresh, revoke; a sign-out during a refresh; a lost exchange answer; a
/// repeated callback; a restart while waiting, while exchanging, after a
/// lost exchange answer and while signed in. Where protocols legitimately
/// differ, the difference is a property of the subject
/// (`reconcilesLostExchange`) that the test asserts. A new protocol adds a
/// case.
@Suite struct ConformanceTests {
    @Test(arguments: ConformanceSubject.allCases)
    func beginCallbackExchangeRefreshRevoke(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        let view = try await h.start(engine)
        #expect(view.state == .waiting)
        try h.grantNextExchange()
        let done = try await engine.finish(url: try h.callback("c1"))
        #expect(done.state == .completed)
        #expect(done.session?.status == .signedIn)
        #expect(done.session?.account == Account(userId: "u1", email: "ada@example.com", displayName: "Ada"))
        let current = try await engine.currentSession(ConformanceHarness.clientId)
        h.scriptRefresh()
        let next = try await engine.refreshSession(ConformanceHarness.clientId, current: current)
        #expect(next.session.accessToken != current.session.accessToken)
        #expect(try await h.storedSession()?.contains(next.session.accessToken) == true)
        #expect(try await engine.signOut(client: ConformanceHarness.clientId).status == .signedOut)
        #expect(h.revokedTokens == [next.session.accessToken])
        #expect(try await h.storedSession() == nil)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aSignOutDuringARefreshLeavesNothingLive(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        _ = try await h.start(engine)
        try h.grantNextExchange()
        _ = try await engine.finish(url: try h.callback("c1"))
        let current = try await engine.currentSession(ConformanceHarness.clientId)
        h.scriptRefresh()
        h.refreshHold.arm()
        defer { h.refreshHold.release() }
        let refreshing = Task { try await engine.refreshSession(ConformanceHarness.clientId, current: current) }
        try await waitFor { h.refreshHold.isHolding }
        // The server has rotated the tokens; the sign-out comes before its answer.
        let signingOut = Task { try await engine.signOut(client: ConformanceHarness.clientId) }
        for _ in 0..<500 {
            if try await engine.session(client: ConformanceHarness.clientId).status == .signedOut { break }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        h.refreshHold.release()
        _ = try? await refreshing.value
        #expect(try await signingOut.value.status == .signedOut)
        // What the refresh got is revoked too: nothing is left live at the
        // server, nothing kept. When it came back while the sign-out's own
        // revoke was in flight, its revoke is owed and sent by the timer
        // (ticked here as the daemon's timer would, SessionKeeper.revokePending).
        let latest = h.latestAccessToken
        for _ in 0..<500 where !h.revokedTokens.contains(latest) {
            await engine.tick()
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        #expect(h.revokedTokens.contains(latest))
        #expect(try await engine.session(client: ConformanceHarness.clientId).status == .signedOut)
        #expect(try await h.storedSession() == nil)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aLostExchangeAnswerIsNeverSentAgain(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        let view = try await h.start(engine)
        h.loseNextExchange()
        await #expect(throws: BrokerError.self) { try await engine.finish(url: try h.callback("c1")) }
        let state = try await engine.status(attemptId: view.attemptId, reconcile: false).state
        #expect(state == (subject.reconcilesLostExchange ? .uncertain : .failed))
        await #expect(throws: BrokerError.self) { try await engine.finish(url: try h.callback("c1")) }
        #expect(h.exchanges == 1)
        #expect(try await engine.session(client: ConformanceHarness.clientId).status != .signedIn)
        #expect(try await h.storedSession() == nil)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aRepeatedCallbackIsExchangedOnce(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        _ = try await h.start(engine)
        try h.grantNextExchange()
        let url = try h.callback("c1")
        #expect(try await engine.finish(url: url).state == .completed)
        // The second delivery answers as the attempt is, or refuses; it sends nothing.
        if let again = try? await engine.finish(url: url) { #expect(again.state == .completed) }
        #expect(h.exchanges == 1)
        #expect(try await engine.session(client: ConformanceHarness.clientId).status == .signedIn)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aRestartWhileWaitingStillTakesTheCallback(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (first, firstWork) = try h.engine()
        defer { withExtendedLifetime(firstWork) {} }
        let view = try await h.start(first)
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        try await engine.recover()
        #expect(try await engine.status(attemptId: view.attemptId, reconcile: false).state == .waiting)
        try h.grantNextExchange()
        #expect(try await engine.finish(url: try h.callback("c1")).state == .completed)
        #expect(h.exchanges == 1)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aRestartAfterALostExchangeAnswerSendsItNoMore(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (first, firstWork) = try h.engine()
        defer { withExtendedLifetime(firstWork) {} }
        let view = try await h.start(first)
        h.loseNextExchange()
        await #expect(throws: BrokerError.self) { try await first.finish(url: try h.callback("c1")) }
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        try await engine.recover()
        let state = try await engine.status(attemptId: view.attemptId, reconcile: false).state
        #expect(state == (subject.reconcilesLostExchange ? .uncertain : .failed))
        await #expect(throws: BrokerError.self) { try await engine.finish(url: try h.callback("c1")) }
        #expect(h.exchanges == 1)
        #expect(try await engine.session(client: ConformanceHarness.clientId).status != .signedIn)
        #expect(try await h.storedSession() == nil)
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aRestartWhileExchangingNeverSendsTheCodeAgain(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (first, firstWork) = try h.engine()
        defer { withExtendedLifetime(firstWork) {} }
        let view = try await h.start(first)
        // The server processes the exchange; its answer never reaches the broker, which stops.
        h.loseNextExchange()
        h.hold.arm()
        defer { h.hold.release() }
        let url = try h.callback("c1")
        let inFlight = Task { try await first.finish(url: url) }
        try await waitFor { h.hold.isHolding }
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        try await engine.recover()
        let state = try await engine.status(attemptId: view.attemptId, reconcile: false).state
        #expect(state == (subject.reconcilesLostExchange ? .uncertain : .failed))
        await #expect(throws: BrokerError.self) { try await engine.finish(url: url) }
        #expect(h.exchanges == 1)
        #expect(try await engine.session(client: ConformanceHarness.clientId).status != .signedIn)
        #expect(try await h.storedSession() == nil)
        h.hold.release()
        _ = try? await inFlight.value
    }

    @Test(arguments: ConformanceSubject.allCases)
    func aRestartWhileSignedInKeepsTheSessionAndSignsOutOnce(_ subject: ConformanceSubject) async throws {
        let h = try ConformanceHarness(subject)
        let (first, firstWork) = try h.engine()
        defer { withExtendedLifetime(firstWork) {} }
        _ = try await h.start(first)
        try h.grantNextExchange()
        _ = try await first.finish(url: try h.callback("c1"))
        let (engine, running) = try h.engine()
        defer { withExtendedLifetime(running) {} }
        try await engine.recover()
        #expect(try await engine.session(client: ConformanceHarness.clientId).status == .signedIn)
        #expect(try await engine.signOut(client: ConformanceHarness.clientId).status == .signedOut)
        #expect(h.revokedTokens.count == 1)
        #expect(try await h.storedSession() == nil)
    }
}
