import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Another local process against the loopback listener of a real sign-in: the real broker, the test
/// provider over HTTP, real sockets on the listener's port (docs/reliability.md, the loopback listener).
@Suite(.dedicatedThread, .enabled(if: TestProvider.shouldRun)) struct LoopbackNeighbourSignInTests {
    /// 50 connections dribble a header line every 2 s on the attempt's listener, and open again as soon
    /// as they are closed: the browser's callback still completes the sign-in, and nothing else is delivered.
    @Test func aSignInCompletesWhileFiftyConnectionsDribbleOnItsListener() throws {
        let world = try ProviderWorld()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let port = try #require(listenerPort(url))
        let broker = try #require(world.h.broker?.pid)
        let residentBefore = try #require(residentKiB(broker))
        let descriptorsBefore = openDescriptors(broker)
        let cpuBefore = cpuSeconds(broker) ?? 0
        let senders = SlowSenders(port: port, count: 50, interval: .seconds(2), target: "/callback?code=x&state=y")
        defer { senders.stop() }
        #expect(senders.waitUntilOpened(50), "\(senders.counts)")
        let clock = ContinuousClock()
        let started = clock.now
        let delivered = try world.provider.authorizeDelivering(url, deliver: true)
        let took = clock.now - started
        let counts = senders.counts
        senders.stop()
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        #expect(try world.session()["status"] == "signedIn")
        #expect(try attemptState(world.h.rpc(), id) == "completed")
        #expect(counts.closedByListener > 0, "\(counts)")
        // Nothing stays behind: the listener closed with the attempt (its descriptors are gone), and the
        // broker's memory is where it was (the first ID token check loads libcrypto: ≈ 2 MiB).
        let cpu = (cpuSeconds(broker) ?? 0) - cpuBefore
        try waitUntil(10, "the listener's descriptors to close") { openDescriptors(broker) <= descriptorsBefore }
        let residentAfter = try #require(residentKiB(broker))
        #expect(residentAfter - residentBefore <= 10 * 1024, "RSS \(residentBefore) → \(residentAfter) KiB")
        print(
            "sign-in (provider pages and callback) under 50 slow senders: \(took); \(counts); broker CPU \(cpu) s, "
                + "RSS \(residentBefore) → \(residentAfter) KiB")
    }

    /// The genuine callback sent without a Host (HTTP/1.0), or with a rebound host name: 400, and the
    /// attempt still waits (nothing was consulted, no code exchanged); sent as a browser sends it, it signs in.
    @Test func aCallbackForAnotherHostIsRefusedAndConsumesNothing() throws {
        let world = try ProviderWorld()
        let (attempt, url) = try world.start()
        let id = try #require(attempt["attemptId"]?.stringValue)
        let port = try #require(listenerPort(url))
        let genuine = try world.provider.authorize(url)
        let target = try #require(genuine.range(of: "/callback?").map { String(genuine[$0.lowerBound...]) })
        for request in [
            "GET \(target) HTTP/1.0\r\n\r\n",
            "GET \(target) HTTP/1.1\r\nHost: rebound.example:\(port)\r\nConnection: close\r\n\r\n",
        ] {
            #expect(loopbackHTTPStatus(port: UInt16(port), request) == 400, "\(request.prefix(40))")
            #expect(try attemptState(world.h.rpc(), id) == "waiting")
        }
        #expect(try world.provider.tokenCounts().refresh == 0)
        let status = loopbackHTTPStatus(
            port: UInt16(port), "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n")
        #expect(status == 200)
        #expect(try world.session()["status"] == "signedIn")
        #expect(try attemptState(world.h.rpc(), id) == "completed")
    }

    /// The listener's port, from the authorize URL's redirect_uri (http://127.0.0.1:PORT/callback).
    private func listenerPort(_ authorizeURL: String) -> UInt16? {
        guard let start = authorizeURL.range(of: "redirect_uri=http%3A%2F%2F127.0.0.1%3A") else { return nil }
        return UInt16(authorizeURL[start.upperBound...].prefix { $0.isNumber })
    }
}
