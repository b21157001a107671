import BrowserLoginClient
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The Swift client library against the real daemon, reference server and
/// headless keyring, over the real socket.
@Suite("BrowserLoginClient", .dedicatedThread)
struct ClientTests {
    static let notes = "com.example.notes"

    /// A world whose "browser" is the scripted user agent: `start` with the
    /// browser signs in by itself (it delivers the callback with `browser-login finish`).
    static func world(selfSigningIn: Bool = true) throws -> Harness {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        h.writeClient(
            file: "bound.conf", id: "com.example.bound", returnURL: "com.example.bound:/callback",
            extra: "Peers=/usr/bin/true")
        if selfSigningIn {
            h.useScriptedUserAgent()
        }
        try h.startBroker()
        return h
    }

    /// The code of the error `body` throws (nil when it does not throw).
    func code(_ body: () async throws -> Void) async -> BrowserLoginError.Code? {
        do {
            try await body()
            return nil
        } catch let error as BrowserLoginError {
            #expect(!error.message.isEmpty)
            return error.code
        } catch {
            Issue.record("not a BrowserLoginError: \(error)")
            return nil
        }
    }

    struct Me: Decodable { var email: String }

    @Test func aFullSignInWaitRequestEventsAndSignOut() async throws {
        let h = try Self.world()
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        let info = try await broker.info()
        #expect(info.protocol == 1)
        #expect(try await broker.clients().map(\.id).contains(Self.notes))
        #expect(try await broker.session(Self.notes).status == .signedOut)

        let events = try await broker.events(clients: [Self.notes])
        let attempt = try await broker.start(Self.notes)
        #expect(attempt.client == Self.notes)
        let session = try await broker.wait(Self.notes, timeout: .seconds(60))
        #expect(session.status == .signedIn)
        #expect(session.account?.email == h.testEmail)

        // The events of that sign-in, typed, in order.
        var attemptStates: [AttemptState] = []
        for try await event in events {
            #expect(event.client == Self.notes)
            if case .loginChanged(let changed) = event { attemptStates.append(changed.state) }
            if case .sessionChanged(let changed) = event, changed.status == .signedIn { break }
        }
        #expect(attemptStates.contains(.waiting))
        #expect(try await broker.status(attempt.attemptId, reconcile: false).state == .completed)
        #expect(try await broker.attempts(client: Self.notes).map(\.attemptId).contains(attempt.attemptId))
        #expect(try await broker.attempts(states: [.waiting]).isEmpty)

        // The API with the session: JSON, a body sent, an error status as an answer.
        let me = try await broker.request(Self.notes, method: "GET", path: "/api/me")
        #expect(me.status == 200 && me.isSuccess)
        #expect(try me.decode(Me.self).email == h.testEmail)
        let created = try await broker.request(
            Self.notes, method: "POST", path: "/api/notes", headers: ["Content-Type": "application/json"],
            body: Array(#"{"text": "from Swift"}"#.utf8))
        #expect(created.status == 201)
        #expect(created.text?.contains("from Swift") == true)
        let listed = try await broker.request(Self.notes, method: "GET", path: "/api/notes", query: ["limit": "10"])
        #expect(listed.text?.contains("from Swift") == true)
        let missing = try await broker.request(Self.notes, method: "GET", path: "/api/nothing-here")
        #expect(missing.status == 404 && !missing.isSuccess)

        // Accounts: one here (a single client), current, named by its key.
        let key = try #require(session.accountKey)
        #expect(try await broker.accounts(Self.notes).map(\.accountKey) == [key])
        #expect(try await broker.use(Self.notes, account: key).current)
        #expect(try await broker.session(Self.notes, account: key).account?.email == h.testEmail)
        #expect(try await broker.wait(Self.notes, timeout: .seconds(5), account: key).accountKey == key)
        let mine = try await broker.request(Self.notes, method: "GET", path: "/api/me", account: key)
        #expect(try mine.decode(Me.self).email == h.testEmail)
        let unknown = "acct_" + String(repeating: "A", count: 22)
        #expect(await code { _ = try await broker.session(Self.notes, account: unknown) } == .accountUnknown)

        let out = try await broker.signOut(Self.notes, account: key)
        #expect(out.status == .signedOut)
        #expect(try await broker.session(Self.notes).status == .signedOut)
        #expect(await code { _ = try await broker.request(Self.notes, method: "GET", path: "/api/me") } == .notSignedIn)
    }

    @Test func aSignInFinishedByTheApp() async throws {
        let h = try Self.world(selfSigningIn: false)
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        let attempt = try await broker.start(Self.notes, openBrowser: false)
        #expect(attempt.state == .waiting)
        let url = try #require(attempt.authorizeUrl)
        let resumed = try await broker.resume(attempt.attemptId, openBrowser: false)
        #expect(resumed.attemptId == attempt.attemptId)
        let callback = try h.browser().signInAndAuthorize(authorizeURL: url, email: h.testEmail, code: "000000")
        let finished = try await broker.finish(url: callback)
        #expect(finished.state == .completed)
        #expect(finished.session?.status == .signedIn)
        #expect(await code { _ = try await broker.start(Self.notes, openBrowser: false) } == .alreadySignedIn)
        let switching = try await broker.start(Self.notes, openBrowser: false, switchAccount: true)
        #expect(try await broker.cancel(switching.attemptId).state == .cancelled)
        #expect(try await broker.acknowledge(switching.attemptId).state == .acknowledged)
    }

    @Test func everyErrorHasItsCode() async throws {
        let h = try Self.world(selfSigningIn: false)
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        #expect(await code { _ = try await broker.session("com.example.nope") } == .clientUnknown)
        #expect(await code { _ = try await broker.session("com.example.bound") } == .clientForbidden)
        #expect(await code { _ = try await broker.request(Self.notes, method: "GET", path: "/api/me") } == .notSignedIn)
        #expect(await code { _ = try await broker.wait(Self.notes, timeout: .milliseconds(300)) } == .waitTimeout)
        #expect(await code { _ = try await broker.status("at_nope") } == .attemptUnknown)
        #expect(
            await code { _ = try await broker.request(Self.notes, method: "GET", path: "/api/../x") } == .invalidParams)
        #expect(
            await code { _ = try await broker.request(Self.notes, method: "GET", path: "/", headers: ["Cookie": "a=b"]) }
                == .invalidParams)

        // No broker: a code of its own, and a message that says how to start one.
        let nowhere = BrowserLoginClient(socketPath: h.dir + "/run/none.sock")
        do {
            _ = try await nowhere.info()
            Issue.record("no error")
        } catch {
            #expect(error.code == .brokerNotRunning && error.isLocal)
            #expect(error.message.contains("not running"))
        }
        #expect(await code { _ = try await nowhere.events() } == .brokerNotRunning)

        // The broker goes away under a subscription: the stream ends with CONNECTION_LOST.
        let events = try await broker.events()
        h.broker?.stop()
        do {
            for try await _ in events {}
            Issue.record("the stream ended without an error")
        } catch let error as BrowserLoginError {
            #expect(error.code == .connectionLost)
        }
        // The pooled connections are stale now: a call says the broker is not running.
        #expect(await code { _ = try await broker.info() } == .brokerNotRunning)
        try h.startBroker()
        #expect(try await broker.info().protocol == 1)
    }

    /// The broker's open sockets (its listener, its clients, its D-Bus and HTTP connections).
    static func brokerSockets(_ h: Harness) -> Int {
        guard let pid = h.broker?.pid,
            let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")
        else { return -1 }
        return fds.filter {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)"))?.hasPrefix("socket:")
                == true
        }.count
    }

    @Test func aDroppedEventStreamClosesItsConnection() async throws {
        let h = try Self.world(selfSigningIn: false)
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        _ = try await broker.start(Self.notes, openBrowser: false)
        let before = Self.brokerSockets(h)
        var events: AsyncThrowingStream<BrokerEvent, any Error>? = try await broker.events()
        #expect(Self.brokerSockets(h) == before + 1, "the subscription has a connection of its own")
        // Consumed: a change arrives.
        _ = try await broker.cancel(try await broker.attempts(states: [.waiting])[0].attemptId)
        var iterator = events?.makeAsyncIterator()
        #expect(try await iterator?.next()?.client == Self.notes)
        iterator = nil
        events = nil
        try waitUntil(5, "the dropped stream's connection to close") { Self.brokerSockets(h) <= before }
    }

    @Test func aLongWaitDoesNotHoldUpOtherCalls() async throws {
        let h = try Self.world(selfSigningIn: false)
        let broker = BrowserLoginClient(socketPath: h.socketPath)
        let waiting = Task { try await broker.wait(Self.notes, timeout: .seconds(60)) }
        try await Task.sleep(for: .milliseconds(300))
        let clock = ContinuousClock()
        let elapsed = try await clock.measure {
            for _ in 0..<20 { #expect(try await broker.session(Self.notes).status == .signedOut) }
            async let a = broker.info()
            async let b = broker.clients()
            _ = try await (a, b)
        }
        #expect(elapsed < .seconds(10), "\(elapsed)")
        // Cancelling the waiting task ends the wait at once.
        let cancelled = try await clock.measure {
            waiting.cancel()
            do {
                _ = try await waiting.value
                Issue.record("the wait returned")
            } catch let error as BrowserLoginError {
                #expect(error.code == .cancelled)
            }
        }
        #expect(cancelled < .seconds(5), "\(cancelled)")
    }
}
