import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerStore
import BrokerTestDoubles
import BrokerVault
import BrowserLoginProtocol
import Foundation
import Synchronization
import Testing

@testable import Broker
@testable import Engine

let notesClient = ClientConfig(
    id: "com.example.notes", appName: "Example Notes", server: try! Origin("https://login.example.com"),
    returnURL: try! ReturnURL("com.example.notes:/callback"))

func quietLogger() -> Logger { Logger(label: "test", sink: { _ in }) }

final class EventLog: Sendable {
    private let list = Mutex<[BrokerEvent]>([])
    func append(_ event: BrokerEvent) { list.withLock { $0.append(event) } }
    var all: [BrokerEvent] { list.withLock { $0 } }
}

/// The engine's owners built by hand over one store, as the engine builds them.
final class Owners {
    let scratch: ScratchDirectory
    let store: BrokerStore
    let hub = EventHub()
    let timer = TimerSignal()
    let board = SessionBoard()
    let server = FakeServer()
    let vault = InMemoryVault()
    let events = EventLog()
    let sessions: SessionKeeper
    let attempts: AttemptLedger

    init(verifyIntervalMilliseconds: Int64 = 36_000_000) throws {
        scratch = try ScratchDirectory("blowners")
        store = try BrokerStore(path: scratch.url.appendingPathComponent("state.sqlite").path)
        sessions = try SessionKeeper(
            store: store, clients: [notesClient.id: notesClient], vault: vault, servers: [notesClient.id: server],
            clock: SystemClock(), logger: quietLogger(), board: board, hub: hub, timer: timer,
            verifyIntervalMilliseconds: verifyIntervalMilliseconds)
        attempts = AttemptLedger(
            store: store, clock: SystemClock(), logger: quietLogger(), hub: hub, sessions: sessions, timer: timer)
        let events = self.events
        _ = hub.subscribe(connection: 1, clients: nil, mayUse: { _ in true }, send: { events.append($0.event) })
    }

    func waitingRecord(expiresIn: Int64 = 120_000) throws -> AttemptRecord {
        let now = Timestamp.now()
        var record = AttemptRecord(
            id: "at_1", client: notesClient.id, state: .starting, returnURL: notesClient.redirectText,
            issuer: notesClient.server.serialized, createdAt: now)
        // As the engine starts one: the row, published, then opened.
        try attempts.insert(record)
        attempts.publish(record)
        try attempts.commit(&record, .created) {
            $0.serverAttemptId = "srv" + String(repeating: "a", count: 20)
            $0.expiresAt = now.adding(milliseconds: expiresIn)
        }
        return record
    }
}

@Suite struct AttemptLedgerTests {
    @Test func aCommitGoesThroughTheMachineAndIsPublishedThenItsSessionView() throws {
        let owners = try Owners()
        var record = try owners.waitingRecord()
        #expect(record.state == .waiting)
        #expect(try owners.store.attempt(id: "at_1")?.state == .waiting)
        #expect(owners.board.view(notesClient.id)?.status == .signingIn)
        let before = owners.events.all.count
        try owners.attempts.commit(&record, .cancel)
        #expect(try owners.store.attempt(id: "at_1")?.state == .cancelled)
        let events = owners.events.all.dropFirst(before)
        #expect(events.count == 2)
        #expect(events.first == .attemptChanged(AttemptView(record)))
        #expect(events.last == .sessionChanged(.signedOut(notesClient.id)))
        #expect(owners.board.view(notesClient.id)?.status == .signedOut)
    }

    @Test func aCommitThatStaysSigningInPublishesOnlyTheAttempt() throws {
        let owners = try Owners()
        let record = try owners.waitingRecord()
        // Its start: the attempt (starting), the client's view (signing in); its open: the attempt alone.
        let events = owners.events.all
        #expect(events.count == 3)
        #expect(events[1] == .sessionChanged(SessionView(client: notesClient.id, status: .signingIn)))
        #expect(events.last == .attemptChanged(AttemptView(record)))
        #expect(owners.board.view(notesClient.id)?.status == .signingIn)
    }

    @Test func aRefusedEventCommitsNothing() throws {
        let owners = try Owners()
        var record = try owners.waitingRecord()
        let before = owners.events.all.count
        #expect(throws: BrokerError.self) { try owners.attempts.commit(&record, .adopted) }
        #expect(try owners.store.attempt(id: "at_1")?.state == .waiting)
        #expect(owners.events.all.count == before)
    }

    @Test func anAttemptIsDueAtItsExpiryOrItsOwedWork() throws {
        let owners = try Owners()
        var record = try owners.waitingRecord()
        let now = Timestamp.now()
        #expect(AttemptLedger.due(record, now: now) == record.expiresAt)
        record.state = .uncertain
        #expect(AttemptLedger.due(record, now: now) == now)
        record.nextReconcileAt = now.adding(milliseconds: 4_000)
        #expect(AttemptLedger.due(record, now: now) == now.adding(milliseconds: 4_000))
        record.state = .acknowledged
        record.followUp = .none
        #expect(AttemptLedger.due(record, now: now) == nil)
    }
}

@Suite struct SessionKeeperTests {
    @Test func aSignInIsOnTheBoardAtOnceAndPublishedOnce() async throws {
        let owners = try Owners()
        let session = owners.server.issued(for: "srv").session
        try await owners.sessions.adopt(client: notesClient.id, session: session, attemptId: "at_1")
        let view = try #require(owners.board.view(notesClient.id))
        #expect(view.status == .signedIn)
        // Published with the attempt's commit that follows, once.
        #expect(owners.events.all.isEmpty)
        owners.sessions.project(notesClient.id)
        owners.sessions.project(notesClient.id)
        #expect(owners.events.all == [.sessionChanged(view)])
    }

    @Test func aWaiterIsAnsweredByTheSignIn() async throws {
        let owners = try Owners()
        let session = owners.server.issued(for: "srv").session
        // Kept, not yet published: the publication answers the waiter.
        try await owners.sessions.adopt(client: notesClient.id, session: session, attemptId: "at_1")
        let answered: SessionView? = await withCheckedContinuation { continuation in
            owners.sessions.addWaiter(client: notesClient.id, id: owners.sessions.newWaiterId(), continuation)
            owners.sessions.project(notesClient.id)
        }
        #expect(answered?.status == .signedIn)
        #expect(owners.sessions.waiters.isEmpty)
    }

    @Test func theNextDeadlineAfterASignInIsItsRefreshTime() async throws {
        let owners = try Owners()
        let session = owners.server.issued(for: "srv").session
        try await owners.sessions.adopt(client: notesClient.id, session: session, attemptId: "at_1")
        let work = await owners.sessions.maintain()
        #expect(work.refresh.isEmpty && work.verify.isEmpty)
        let due = try #require(work.due)
        let record = try #require(try owners.store.session(client: notesClient.id))
        let life = session.accessTokenExpiresAt!.millisecondsSince1970 - record.updatedAt.millisecondsSince1970
        let offset = due.millisecondsSince1970 - record.updatedAt.millisecondsSince1970
        #expect(offset >= life * 3 / 4 - 1 && offset <= life * 9 / 10 + 1)
        #expect(owners.sessions.nextRefresh.values.first == due)
        // Asked again, the same time (the jitter is drawn once).
        #expect(await owners.sessions.maintain().due == due)
    }

    @Test func anOwedRevokeIsDueOnTheNextTimerRound() async throws {
        let owners = try Owners()
        let session = owners.server.issued(for: "srv").session
        try await owners.sessions.adopt(client: notesClient.id, session: session, attemptId: "at_1")
        owners.server.state.withLock { $0.revokeByToken = [.failure(.notSent("down")), .failure(.notSent("down"))] }
        #expect(try await owners.sessions.signOut(client: notesClient.id).status == .signedOut)
        #expect(owners.server.count("revokeByToken") == 1)
        let before = Timestamp.now()
        let work = await owners.sessions.maintain()
        #expect(owners.server.count("revokeByToken") == 2)
        let due = try #require(work.due)
        #expect(due >= before.adding(milliseconds: SessionKeeper.revokeRetryMilliseconds))
        #expect(due <= Timestamp.now().adding(milliseconds: SessionKeeper.revokeRetryMilliseconds))
        // After a second failure the next try waits for its due time (the back-off; SeamFailureTests),
        // then it is sent at last: nothing is owed, nothing is due.
        try await Task.sleep(for: .milliseconds(SessionKeeper.revokeRetryMilliseconds + 50))
        #expect(await owners.sessions.maintain().due == nil)
        #expect(owners.server.count("revokeByToken") == 3)
    }
}

@Suite struct DeadlineTests {
    let server = FakeServer()
    let scratch: ScratchDirectory
    let engine: BrokerEngine
    let running: RunningWork

    init() throws {
        scratch = try ScratchDirectory("bldeadline")
        let server = self.server
        engine = try BrokerEngine(
            storePath: scratch.url.appendingPathComponent("state.sqlite").path, clients: [notesClient],
            vault: InMemoryVault(), makeServer: { _ in server }, callbackReaders: [BrowserLoginCallbacks()],
            launcher: NoBrowser(), transport: NoTransport(),
            logger: quietLogger(), socketPath: "/nonexistent", verifyIntervalMilliseconds: 36_000_000)
        running = RunningWork(engine.work)
    }

    @Test func anIdleEngineHasNothingScheduled() async {
        #expect(await engine.tick() == nil)
        #expect(await engine.tick() == nil)
    }

    @Test func aNewAttemptWakesTheTimerAndIsDueAtItsExpiry() async throws {
        let wakes = Mutex(0)
        engine.setWakeUp { wakes.withLock { $0 += 1 } }
        #expect(await engine.tick() == nil)
        let view = try await engine.start(
            client: notesClient.id, ephemeral: false, openBrowser: false, switchAccount: false)
        #expect(wakes.withLock { $0 } >= 1)
        let expiresAt = try await engine.attempt(view.attemptId).expiresAt
        #expect(await engine.tick() == expiresAt)
    }

    @Test func afterASignInTheNextDeadlineIsTheRefreshTime() async throws {
        let view = try await engine.start(
            client: notesClient.id, ephemeral: false, openBrowser: false, switchAccount: false)
        let serverId = try #require(server.state.withLock { $0.created.last })
        let issued = server.issued(for: serverId)
        server.state.withLock { $0.exchange = [.success(issued)] }
        _ = try await engine.finish(
            url: Callback.url(
                returnURL: notesClient.redirectText, outcome: .code("c"), attempt: serverId,
                issuer: notesClient.server.serialized))
        let engine = self.engine
        let attemptId = view.attemptId
        for _ in 0..<200 {
            if try await engine.attempt(attemptId).followUp == .none { break }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        let due = try #require(await engine.tick())
        #expect(due < issued.session.accessTokenExpiresAt!)
        #expect(due > Timestamp.now().adding(milliseconds: 400_000))
    }

    @Test func aTimerSleepsBetweenTheFloorAndTheCap() {
        let now = Timestamp.now()
        #expect(BrokerEngine.sleepMilliseconds(until: nil, now: now) == 5_000)
        #expect(BrokerEngine.sleepMilliseconds(until: now.adding(milliseconds: -5), now: now) == 250)
        #expect(BrokerEngine.sleepMilliseconds(until: now.adding(milliseconds: 1_500), now: now) == 1_500)
        #expect(BrokerEngine.sleepMilliseconds(until: now.adding(milliseconds: 600_000), now: now) == 5_000)
    }

    @Test func theWakeUpHookFiresOnlyForEarlierWork() {
        let signal = TimerSignal()
        let wakes = Mutex(0)
        signal.setHook { wakes.withLock { $0 += 1 } }
        let now = Timestamp.now()
        signal.answered(now.adding(milliseconds: 10_000))
        signal.scheduled(now.adding(milliseconds: 20_000))
        #expect(wakes.withLock { $0 } == 0)
        signal.scheduled(now.adding(milliseconds: 5_000))
        signal.scheduled(now.adding(milliseconds: 6_000))
        #expect(wakes.withLock { $0 } == 1)
        signal.answered(nil)
        signal.scheduled(now.adding(milliseconds: 600_000))
        #expect(wakes.withLock { $0 } == 2)
    }

    /// The hook was kept as a bare closure in the signal's lock, where every
    /// `withLock` wrapped it in more thunks (`Hook`): after 2,000 rounds
    /// it ran about 6,000 frames deeper than at first, and the broker leaked
    /// about 100 bytes a sign-in until its stack overflowed.
    @Test func theHookRunsAtTheSameDepthHoweverOftenTheSignalIsUsed() {
        let signal = TimerSignal()
        let depths = Mutex<[Int]>([])
        signal.setHook {
            var marker = 0
            let address = withUnsafeMutablePointer(to: &marker) { Int(bitPattern: $0) }
            depths.withLock { $0.append(address) }
        }
        let now = Timestamp.now()
        for _ in 0..<2_000 {
            signal.answered(now.adding(milliseconds: 10_000))
            signal.scheduled(now.adding(milliseconds: 5_000))
        }
        let seen = depths.withLock { $0 }
        #expect(seen.count == 2_000)
        #expect(abs((seen.first ?? 0) - (seen.last ?? 0)) < 4_096, "the hook ran deeper with every use")
    }
}

@Suite struct AppRequestProxyTests {
    @Test func requestsOffTheAPIOriginOrUnderTheBasePathAreInvalidParams() async throws {
        let scratch = try ScratchDirectory("blproxy")
        let transport = ScriptedTransport()
        let engine = try BrokerEngine(
            storePath: scratch.url.appendingPathComponent("state.sqlite").path, clients: [notesClient],
            vault: InMemoryVault(), makeServer: { _ in FakeServer() }, callbackReaders: [BrowserLoginCallbacks()],
            launcher: NoBrowser(), transport: transport,
            logger: quietLogger(), socketPath: "/nonexistent")
        func request(_ path: String) -> AppRequest {
            AppRequest(
                client: notesClient.id, method: "GET", path: path, query: [], headers: [], body: nil,
                timeoutMilliseconds: 1000)
        }
        let underBase = await #expect(throws: InvalidAppRequest.self) {
            try await engine.appRequest(request("/browser-login/native/session"))
        }
        #expect(underBase?.message.contains("belong to the broker") == true)
        await #expect(throws: InvalidAppRequest.self) { try await engine.appRequest(request("@evil.example/x")) }
        // Not signed in: nothing is sent.
        let error = await #expect(throws: BrokerError.self) { try await engine.appRequest(request("/api/notes")) }
        #expect(error?.code == .notSignedIn)
        #expect(transport.state.withLock { $0.sent.isEmpty })
    }
}

@Suite struct EventHubTests {
    @Test func aChangeIsEncodedOnceForAllItsSubscribers() {
        let hub = EventHub()
        let encodings = Mutex(0)
        let received = Mutex<[String?]>([])
        for connection in UInt64(1)...3 {
            _ = hub.subscribe(
                connection: connection, clients: nil, mayUse: { _ in true },
                send: { change in
                    let encoded = change.encoded { event -> String? in
                        encodings.withLock { $0 += 1 }
                        return event.client
                    }
                    received.withLock { $0.append(encoded) }
                })
        }
        hub.publish(.sessionChanged(.signedOut("com.example.notes")))
        #expect(encodings.withLock { $0 } == 1)
        #expect(received.withLock { $0 } == ["com.example.notes", "com.example.notes", "com.example.notes"])
        // A nil encoding (not encodable) is remembered too, not mistaken for "not encoded yet".
        let change = PublishedChange(.sessionChanged(.signedOut("a")))
        #expect(change.encoded { _ -> String? in nil } == nil)
        #expect(change.encoded { _ -> String? in "again" } == nil)
    }
}
