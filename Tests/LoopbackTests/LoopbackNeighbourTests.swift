import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

@testable import BrokerLoopback

#if canImport(Glibc)
    import Glibc
#endif

/// What another local process can do to the loopback listener over real sockets: dribble request heads
/// (slowloris), or reach it from a page whose host name points at 127.0.0.1 (DNS rebinding).
@Suite(.dedicatedThread)
struct LoopbackNeighbourTests {
    /// Connections each sending one header line every 300 ms and never ending the head, opened again as
    /// soon as the listener closes them: the browser's callback is still answered, each time. (6: as many
    /// as a browser opens, closed by the head deadline; 50: far more than the listener keeps, evicted.)
    @Test(arguments: [6, 50]) func theBrowserIsServedWhileConnectionsDribble(senderCount: Int) throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let clock = ContinuousClock()
        func browserRound(_ name: String) throws -> Duration {
            let started = clock.now
            let response = try #require(try get("/callback?code=\(name)", port: listener.port))
            #expect(response.status == 200)
            return clock.now - started
        }
        let idle = try (0..<10).map { try browserRound("idle\($0)") }
        let senders = SlowSenders(port: listener.port, count: senderCount, interval: .milliseconds(300))
        defer { senders.stop() }
        #expect(senders.waitUntilOpened(senderCount), "\(senders.counts)")
        usleep(500_000)  // they have sent a line or two
        var latencies: [Duration] = []
        for round in 0..<10 {
            latencies.append(try browserRound("browser\(round)"))
            usleep(300_000)
        }
        let counts = senders.counts
        senders.stop()
        // Only the browser's callbacks were delivered: no dribbled head ever reached the broker.
        let origin = "http://127.0.0.1:\(listener.port)/callback?code="
        #expect(deliveries.all == (0..<10).map { "\(origin)idle\($0)" } + (0..<10).map { "\(origin)browser\($0)" })
        #expect(counts.closedByListener > 0 && listener.evictions > 0, "\(counts)")
        // Reported, not judged (timing is the stress round's to judge): the slowest of 10 rounds, as p99.
        let alone = idle.map(\.milliseconds).max() ?? 0
        let under = latencies.map(\.milliseconds).max() ?? 0
        print(
            "browser alone: \(alone) ms at most; under \(senderCount) slow senders: "
                + "\(latencies.map(\.milliseconds)) ms (slowest \(String(format: "%.1f", Double(under) / Double(max(alone, 1))))× the slowest alone, "
                + "alone counted as at least 1 ms); \(counts); evictions \(listener.evictions)")
    }

    /// A connection that keeps sending header lines (so never idle) is closed once its head is overdue.
    @Test func aHeadStillIncompleteAfterTheDeadlineIsClosed() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let clock = ContinuousClock()
        // Before connecting: the listener's deadline runs from its accept, which may come before
        // `RawConnection` returns.
        let started = clock.now
        let connection = try RawConnection(host: .ipv4, port: listener.port)
        connection.send("GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\n")
        var closed = false
        for line in 0..<100 {  // 30 s at most: the idle timeout (10 s) never fires on a connection this busy
            var pending = pollfd(fd: connection.fd, events: Int16(POLLIN), revents: 0)
            if poll(&pending, 1, 300) > 0 {
                closed = connection.readToEnd().eof
                break
            }
            connection.send("X-Line-\(line): z\r\n")
        }
        #expect(closed, "the dribbling connection was closed")
        #expect(clock.now - started >= LoopbackListener.headDeadline)
        #expect(deliveries.all.isEmpty)
        #expect(listener.evictions == 1)
        // The listener serves the next one.
        #expect(try get("/callback?code=2", port: listener.port)?.status == 200)
    }

    /// Host must name this listener: 127.0.0.1:PORT, [::1]:PORT or localhost:PORT. Anything else, or none
    /// (HTTP/1.0), or two, is 400 before the path is looked at: nothing is delivered.
    @Test(arguments: [
        "GET /callback?code=1 HTTP/1.0\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: rebound.example:PORT\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: localhost.rebound.example:PORT\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nHost: rebound.example\r\n\r\n",
        "GET /callback?code=1 HTTP/1.1\r\nHost: \r\n\r\n",
        "POST /callback?code=1 HTTP/1.1\r\nHost: rebound.example:PORT\r\nContent-Length: 0\r\n\r\n",
        "GET /other HTTP/1.0\r\n\r\n",
    ])
    func aRequestForAnotherHostIs400WithoutDelivery(request: String) throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let connection = try RawConnection(host: .ipv4, port: listener.port)
        connection.send(request.replacingOccurrences(of: "PORT", with: "\(listener.port)"))
        shutdown(connection.fd, Int32(SHUT_WR))
        let response = try #require(try connection.response())
        #expect(response.status == 400)
        #expect(deliveries.all.isEmpty)
    }

    @Test(arguments: ["127.0.0.1:PORT", "localhost:PORT", "LocalHost:PORT", "[::1]:PORT"])
    func theListenersOwnHostIsServed(host: String) throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let connection = try RawConnection(host: .ipv4, port: listener.port)
        let value = host.replacingOccurrences(of: "PORT", with: "\(listener.port)")
        connection.send("GET /callback?code=1 HTTP/1.1\r\nHost: \(value)\r\nConnection: close\r\n\r\n")
        #expect(try connection.response()?.status == 200)
        #expect(deliveries.all.count == 1)
    }
}

/// The connection table as a table of events, without sockets.
struct ConnectionTableTests {
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    @Test func oneMoreThanCapacityEvictsTheOneWaitingLongest() {
        var table = ConnectionTable(capacity: 2, headDeadline: .seconds(2))
        #expect(table.opened(1, socket: 11, at: at(0)).isEmpty)
        #expect(table.opened(2, socket: 12, at: at(100)).isEmpty)
        #expect(table.opened(3, socket: 13, at: at(200)) == [11])
        #expect(table.live == 2)
        // The evicted one stays, uncounted, until libmicrohttpd closes it.
        #expect(table.entries[1]?.evicted == true)
        table.closed(1)
        #expect(table.entries[1] == nil)
        #expect(table.evictions == 1)
    }

    @Test func aConnectionBeingAnsweredIsNeverEvicted() {
        var table = ConnectionTable(capacity: 2, headDeadline: .seconds(2))
        _ = table.opened(1, socket: 11, at: at(0))
        table.headRead(1)
        _ = table.opened(2, socket: 12, at: at(100))
        table.headRead(2)
        // Both are answered (deliveries run): the newcomer itself goes.
        #expect(table.opened(3, socket: 13, at: at(200)) == [13])
        // And no deadline runs for them.
        #expect(table.expired(at: at(60_000)).isEmpty)
        #expect(table.nextDeadline == nil)
    }

    @Test func theDeadlineCountsFromTheStartOrThePreviousAnswer() {
        var table = ConnectionTable(capacity: 4, headDeadline: .seconds(2))
        _ = table.opened(1, socket: 11, at: at(0))
        _ = table.opened(2, socket: 12, at: at(500))
        #expect(table.nextDeadline == at(2000))
        #expect(table.expired(at: at(1999)).isEmpty)
        #expect(table.expired(at: at(2000)) == [11])
        #expect(table.nextDeadline == at(2500))
        table.headRead(2)
        #expect(table.nextDeadline == nil)
        table.requestCompleted(2, at: at(3000))  // keep-alive: waits for the next head from now
        #expect(table.nextDeadline == at(5000))
        #expect(table.expired(at: at(4999)).isEmpty)
        #expect(table.expired(at: at(5000)) == [12])
        // An evicted connection is evicted once.
        #expect(table.expired(at: at(9000)).isEmpty)
    }

    @Test func overdueConnectionsGoFirstWhenOneOpens() {
        var table = ConnectionTable(capacity: 2, headDeadline: .seconds(2))
        _ = table.opened(1, socket: 11, at: at(0))
        _ = table.opened(2, socket: 12, at: at(1000))
        // At 2.5 s the first is overdue: it makes the room, the second stays.
        #expect(table.opened(3, socket: 13, at: at(2500)) == [11])
        #expect(table.live == 2)
        // A completion after the close (libmicrohttpd may report them in either order) changes nothing.
        let before = table.entries
        table.requestCompleted(99, at: at(3000))
        #expect(table.entries == before)
    }
}

extension Duration {
    fileprivate var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
