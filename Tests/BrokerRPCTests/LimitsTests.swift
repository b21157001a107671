import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Glibc
import Testing

@testable import BrokerRPC

/// The output budget's accounting and decisions.
@Suite struct OutputBudgetTests {
    @Test func oneMessageOfAnySizeIsQueuedOnAConnectionWithNothingPending() {
        let budget = OutputBudget(total: 64 << 20, perConnection: 4 << 20)
        #expect(budget.decide(connectionQueued: 0, adding: 11 << 20) == .queue)
        #expect(budget.decide(connectionQueued: 1, adding: 4 << 20) == .overConnectionCap)
        #expect(budget.decide(connectionQueued: 3 << 20, adding: 1 << 20) == .queue)
        #expect(budget.decide(connectionQueued: 3 << 20, adding: (1 << 20) + 1) == .overConnectionCap)
    }

    @Test func theTotalOfAllConnectionsIsBounded() {
        let budget = OutputBudget(total: 1000, perConnection: 600, perProcess: 10_000)
        budget.add(500)
        budget.add(400)
        #expect(budget.current == 900)
        #expect(budget.decide(connectionQueued: 0, adding: 100) == .queue)
        #expect(budget.decide(connectionQueued: 0, adding: 101) == .overBudget)
        // Its own cap is checked first: the connection is the slow reader either way.
        #expect(budget.decide(connectionQueued: 500, adding: 101) == .overConnectionCap)
        budget.remove(400)
        #expect(budget.decide(connectionQueued: 0, adding: 101) == .queue)
        budget.remove(500)
        #expect(budget.current == 0)
    }

    @Test func requestsAreRefusedFromThreeQuartersOfTheBudget() {
        let budget = OutputBudget(total: 1000, perConnection: 100)
        #expect(budget.busyThreshold == 750)
        budget.add(749)
        #expect(!budget.isBusy)
        budget.add(1)
        #expect(budget.isBusy)
        budget.remove(750)
        #expect(!budget.isBusy)
    }

    @Test func theBudgetFallsOnTheProcessThatDoesNotRead() {
        let budget = OutputBudget(total: 1000, perConnection: 600, perProcess: 400)
        budget.add(300, pid: 7)
        #expect(budget.unsent(of: 7) == 300 && budget.unsent(of: 8) == 0)
        // The spender's next message over its process's budget closes its connection.
        #expect(budget.decide(connectionQueued: 0, pid: 7, adding: 101) == .overProcessCap)
        #expect(budget.decide(connectionQueued: 0, pid: 7, adding: 100) == .queue)
        // Its requests are refused from half its budget; another process's are not.
        #expect(budget.refusal(for: 7) == .process(unsent: 300))
        #expect(budget.refusal(for: 8) == nil)
        // Past the total, a process with nothing unsent still has its reply queued; a spender does not.
        budget.add(400, pid: 9)
        budget.add(150, pid: 10)
        #expect(budget.decide(connectionQueued: 0, pid: 8, adding: 500) == .queue)
        #expect(budget.decide(connectionQueued: 0, pid: 10, adding: 151) == .overBudget)
        #expect(budget.refusal(for: 10) == .total)
        #expect(budget.refusal(for: 8) == nil)
        budget.remove(300, pid: 7)
        budget.remove(400, pid: 9)
        budget.remove(150, pid: 10)
        #expect(budget.current == 0 && budget.unsent(of: 7) == 0)
    }

    @Test func concurrentAccountingBalances() async {
        let budget = OutputBudget(total: 1 << 30, perConnection: 1 << 20)
        await withTaskGroup(of: Void.self) { group in
            for n in 0..<8 {
                group.addTask {
                    for i in 0..<10_000 {
                        budget.add(n + i % 7)
                        budget.remove(n + i % 7)
                    }
                }
            }
        }
        #expect(budget.current == 0)
    }
}

/// Which connection is admitted, closed to make room, or refused.
@Suite struct ConnectionPolicyTests {
    let policy = ConnectionPolicy(maxConnections: 3, reservedConnections: 2)
    typealias C = ConnectionPolicy.Candidate

    @Test func belowTheLimitEveryoneIsAdmitted() {
        #expect(policy.decide(open: 2, peerConnections: 2, candidates: [C]()) == .admit)
    }

    @Test func atTheLimitTheConnectionIdleLongestMakesRoom() {
        let candidates = [C(id: 1, idleSince: 300), C(id: 2, idleSince: nil), C(id: 3, idleSince: 100)]
        #expect(policy.decide(open: 3, peerConnections: 0, candidates: candidates, now: 1_000_000_000) == .admitEvicting(3))
    }

    @Test func aProcessHoardingConnectionsClosesOnlyItsOwn() {
        let candidates = [
            C(id: 1, idleSince: 100, peerConnections: 2),
            C(id: 2, idleSince: 200, peerConnections: 9, sameProcess: true),
            C(id: 3, idleSince: 300, peerConnections: 9, sameProcess: true),
        ]
        // The hoarder (9 connections) may not take the app's (2): it loses its own, idle longest.
        #expect(policy.decide(open: 3, peerConnections: 9, candidates: candidates, now: 1_000_000_000) == .admitEvicting(2))
        #expect(
            policy.decide(open: 3, peerConnections: 9, candidates: candidates.prefix(1), now: 1_000_000_000)
                == .refuse)
        // Another process (1 connection) takes from the one holding most.
        let others = candidates.map { C(id: $0.id, idleSince: $0.idleSince, peerConnections: $0.peerConnections) }
        #expect(policy.decide(open: 3, peerConnections: 1, candidates: others, now: 1_000_000_000) == .admitEvicting(2))
    }

    @Test func aConnectionJustOpenedIsNotClosedToMakeRoom() {
        let candidates = [C(id: 1, idleSince: 900_000_000, sameProcess: true)]
        #expect(policy.decide(open: 3, peerConnections: 5, candidates: candidates, now: 1_000_000_000) == .refuse)
        #expect(policy.decide(open: 3, peerConnections: 5, candidates: candidates, now: 1_400_000_000) == .admitEvicting(1))
    }

    @Test func oneProcessHoldsAtMostItsCapAndMakesRoomOnlyAmongItsOwn() {
        let capped = ConnectionPolicy(maxConnections: 100, reservedConnections: 2, maxPerProcess: 3)
        let others = [C(id: 1, idleSince: 100, peerConnections: 1)]
        // Below the table's limit, yet at its own cap: another process's idle connection is not taken.
        #expect(capped.decide(open: 3, peerConnections: 3, candidates: others, now: 1_000_000_000) == .refuseProcessLimit)
        let own = others + [C(id: 2, idleSince: 200, peerConnections: 3, sameProcess: true)]
        #expect(capped.decide(open: 4, peerConnections: 3, candidates: own, now: 1_000_000_000) == .admitEvicting(2))
        #expect(capped.decide(open: 4, peerConnections: 2, candidates: own, now: 1_000_000_000) == .admit)
        #expect(RPCServerConfiguration.defaultMaxConnectionsPerProcess == 128)
    }

    @Test func neverMoreThanTheLimitAndTheReserveWhateverIsBeingClosed() {
        let candidates = [C(id: 1, idleSince: 1)]
        #expect(policy.decide(open: 3, total: 5 + 16, peerConnections: 0, candidates: candidates) == .refuse)
    }

    @Test func busyOrHeldConnectionsAreNeverClosed() {
        let candidates = [C(id: 1, idleSince: nil), C(id: 2, idleSince: nil), C(id: 3, idleSince: nil)]
        // Only a process with no connection yet gets a reserved slot; one that has any is refused.
        #expect(policy.decide(open: 3, peerConnections: 0, candidates: candidates) == .admitReserved)
        #expect(policy.decide(open: 3, peerConnections: 1, candidates: candidates) == .refuse)
        #expect(policy.decide(open: 3, peerConnections: 4, candidates: candidates) == .refuse)
        #expect(policy.decide(open: 4, peerConnections: 0, candidates: candidates) == .admitReserved)
        // The reserve is bounded too.
        #expect(policy.decide(open: 5, peerConnections: 0, candidates: candidates) == .refuse)
    }
}

/// A client used by one test, from one thread at a time (`onThread`, awaited).
///
/// `@unchecked Sendable`: the test awaits each `onThread` call before the
/// next, so the client is never used from two threads at once.
final class SerialClient: @unchecked Sendable {
    let client: RPCClient
    init(_ client: RPCClient) { self.client = client }

    func call(_ method: String, params: JSONValue? = nil) async throws -> JSONValue {
        try await onThread { try self.client.call(method, params: params) }
    }

    /// The `RPCError` the call answers (nil when it succeeds).
    func error(_ method: String, params: JSONValue? = nil) async throws -> RPCError? {
        try await onThread { () -> RPCError? in
            do {
                _ = try self.client.call(method, params: params)
                return nil
            } catch let error as RPCError {
                return error
            }
        }
    }
}

/// Many raw connections to a live server (closed by `closeAll`).
final class RawConnections: @unchecked Sendable {
    // Safe: used by one test from one task at a time.
    var fds: [Int32] = []

    func open(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let error = Errno(rawValue: errno)
            close(fd)
            throw error
        }
        fds.append(fd)
        return fd
    }

    func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func closeAll() {
        for fd in fds { close(fd) }
        fds = []
    }

    deinit { closeAll() }
}

/// The limits over a real socket: hang-ups, the connection limit, slow readers.
/// Alone: what one read of the server takes in (all of a burst, or part of
/// it) depends on how soon its queue runs, which other tests' load changes.
@Suite(.alone) struct LimitsLiveTests {
    /// A handler that counts cancelled sleeps.
    static func sleeper(_ cancelled: Counter) -> RPCHandler {
        { context, method, params throws(RPCError) in
            switch method {
            case "sleep":
                let ms = params?["ms"]?.intValue ?? 100
                do {
                    try await Task.sleep(for: .milliseconds(ms))
                } catch {
                    cancelled.increment()
                }
                return "slept"
            default:
                return try await LiveServer.standardHandler(context, method, params)
            }
        }
    }

    @Test func aHangUpWithARequestInFlightCancelsItAtOnce() async throws {
        let cancelled = Counter()
        let live = try LiveServer(handler: Self.sleeper(cancelled))
        let raw = RawConnections()
        let fd = try raw.open(live.path)
        raw.send(fd, #"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":60000}}"# + "\n")
        #expect(await live.log.wait { _ in live.server.statistics.inFlight == 1 })
        raw.closeAll()
        #expect(
            await live.log.wait(timeout: .seconds(10)) {
                $0.contains { if case .connectionClosed(_, .peerHungUp) = $0 { true } else { false } }
            })
        #expect(await live.log.wait { _ in cancelled.count == 1 && live.server.statistics.inFlight == 0 })
        #expect(live.server.statistics.open == 0)
        #expect(live.server.statistics.hungUp == 1)
        try await live.stop()
    }

    @Test func aRequestSentJustBeforeClosingIsCancelled() async throws {
        let cancelled = Counter()
        let live = try LiveServer(handler: Self.sleeper(cancelled))
        let raw = RawConnections()
        for _ in 0..<50 {
            let fd = try raw.open(live.path)
            raw.send(fd, #"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":60000}}"# + "\n")
            raw.closeAll()
        }
        #expect(
            await live.log.wait(timeout: .seconds(10)) { _ in
                let statistics = live.server.statistics
                return statistics.accepted == 50 && statistics.open == 0 && statistics.inFlight == 0
            })
        #expect(cancelled.count == 50)
        try await live.stop()
    }

    @Test func aHangUpIsNoticedWhileReadingIsPaused() async throws {
        let cancelled = Counter()
        let live = try LiveServer(configure: { $0.maxInFlightPerConnection = 4 }, handler: Self.sleeper(cancelled))
        let raw = RawConnections()
        let fd = try raw.open(live.path)
        // One write, so that a preempted sender cannot split the burst.
        raw.send(
            fd, (1...10).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"sleep","params":{"ms":60000}}"# + "\n" }.joined())
        // All ten arrive in one read: four are taken, the bound, and the other six wait framed while
        // reading is paused.
        #expect(await live.log.wait { _ in live.server.statistics.inFlight == 4 })
        raw.closeAll()
        #expect(
            await live.log.wait(timeout: .seconds(10)) { _ in
                live.server.statistics.open == 0 && live.server.statistics.inFlight == 0
            })
        #expect(cancelled.count == 4)
        try await live.stop()
    }

    @Test func pastTheLimitWithNoIdleConnectionANewOneGetsBusy() async throws {
        let live = try LiveServer(configure: {
            $0.maxConnections = 4
            $0.reservedConnections = 2
        })
        let raw = RawConnections()
        for _ in 0..<4 {
            let fd = try raw.open(live.path)
            raw.send(fd, #"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":30000}}"# + "\n")
        }
        #expect(await live.log.wait { _ in live.server.statistics.inFlight == 4 })
        // This process holds 4 connections already: no reserved slot for it.
        let error = try await onThread { () -> RPCError? in
            let client = try live.client()
            do {
                _ = try client.call("echo", params: ["x": 1])
                return nil
            } catch let error as RPCError {
                return error
            }
        }
        #expect(error?.code == .applicationError)
        #expect(error?.applicationCode == "BUSY")
        #expect(error?.message.contains("connection limit") == true)
        #expect(live.server.statistics.refusedBusy == 1)
        #expect(live.log.all.contains { if case .connectionRefusedBusy = $0 { true } else { false } })
        // Once one closes, a new connection is served again.
        raw.closeAll()
        #expect(await live.log.wait(timeout: .seconds(10)) { _ in live.server.statistics.open == 0 })
        let echoed = try await onThread { try live.client().call("echo", params: ["x": 2]) }
        #expect(echoed == ["x": 2])
        try await live.stop()
    }

    @Test func atTheLimitTheConnectionIdleLongestIsClosedToMakeRoom() async throws {
        let live = try LiveServer(configure: {
            $0.maxConnections = 2
            $0.reservedConnections = 0
            $0.minimumIdleBeforeEviction = .zero
        })
        let first = SerialClient(try live.client())
        #expect(try await first.call("echo", params: ["x": 1]) == ["x": 1])
        try await Task.sleep(for: .milliseconds(20))
        let second = SerialClient(try live.client())
        #expect(try await second.call("echo", params: ["x": 2]) == ["x": 2])
        // A third: the first (idle longest) makes room.
        let third = SerialClient(try live.client())
        #expect(try await third.call("echo", params: ["x": 3]) == ["x": 3])
        #expect(
            await live.log.wait {
                $0.contains { if case .connectionClosed(_, .evictedIdle) = $0 { true } else { false } }
            })
        let error = try await first.error("echo", params: ["x": 4])
        #expect(error?.applicationCode == "BUSY")
        #expect(try await second.call("echo", params: ["x": 5]) == ["x": 5])
        #expect(live.server.statistics.evictedIdle == 1)
        try await live.stop()
    }

    @Test func aHeldConnectionIsNeverClosedToMakeRoom() async throws {
        let held = Counter()
        let live = try LiveServer(
            configure: {
                $0.maxConnections = 1
                $0.reservedConnections = 0
                $0.minimumIdleBeforeEviction = .zero
            },
            handler: { context, method, params throws(RPCError) in
                if method == "hold" {
                    context.connection.hold()
                    held.increment()
                    return "held"
                }
                return try await LiveServer.standardHandler(context, method, params)
            })
        let first = SerialClient(try live.client())
        #expect(try await first.call("hold") == "held")
        let error = try await onThread { () -> RPCError? in
            do {
                _ = try live.client().call("echo", params: ["x": 1])
                return nil
            } catch let error as RPCError {
                return error
            }
        }
        #expect(error?.applicationCode == "BUSY")
        #expect(try await first.call("echo", params: ["x": 2]) == ["x": 2])
        try await live.stop()
    }

    @Test func slowReadersAreDroppedWithinTheOverallBudget() async throws {
        let live = try LiveServer(configure: {
            $0.maxQueuedOutput = 8 << 20
            $0.outputBudget = 2 << 20
        })
        // Three connections that never read, each asking for 1 MiB replies.
        let raw = RawConnections()
        let request = #"{"jsonrpc":"2.0","id":1,"method":"big","params":{"size":1048576}}"# + "\n"
        for _ in 0..<3 {
            let fd = try raw.open(live.path)
            for _ in 0..<4 { raw.send(fd, request) }
        }
        #expect(
            await live.log.wait(timeout: .seconds(10)) {
                $0.contains {
                    if case .slowReaderDropped(_, _, _, _, .outputBudgetSpent) = $0 { true } else { false }
                }
            })
        #expect(live.server.statistics.slowReadersDropped >= 1)
        #expect(live.server.statistics.unsentBytes <= 2 << 20)
        raw.closeAll()
        #expect(await live.log.wait(timeout: .seconds(10)) { _ in live.server.statistics.open == 0 })
        #expect(live.server.statistics.unsentBytes == 0)
        try await live.stop()
    }

    @Test func overThreeQuartersOfTheBudgetNewRequestsGetBusy() async throws {
        let live = try LiveServer(configure: {
            $0.maxQueuedOutput = 8 << 20
            $0.outputBudget = 4 << 20
        })
        let raw = RawConnections()
        let fd = try raw.open(live.path)
        // One reply of 3.5 MiB, never read: over three quarters of the budget.
        raw.send(fd, #"{"jsonrpc":"2.0","id":1,"method":"big","params":{"size":3670016}}"# + "\n")
        #expect(await live.log.wait { _ in live.server.statistics.unsentBytes > 3 << 20 })
        let error = try await onThread { () -> RPCError? in
            do {
                _ = try live.client().call("echo", params: ["x": 1])
                return nil
            } catch let error as RPCError {
                return error
            }
        }
        #expect(error?.applicationCode == "BUSY")
        #expect(live.server.statistics.requestsRefusedBusy == 1)
        raw.closeAll()
        #expect(await live.log.wait(timeout: .seconds(10)) { _ in live.server.statistics.unsentBytes == 0 })
        #expect(try await onThread { try live.client().call("echo", params: ["x": 2]) } == ["x": 2])
        try await live.stop()
    }
}
