import BrokerLoopback
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The listener as a real HTTP client sees it: the curl program, with
/// keep-alive (two URLs on one connection) and an IPv6 literal.
@Suite(.dedicatedThread)
struct CurlClientTests {
    @Test func curlGetsThePageOnAKeptAliveConnection() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let base = "http://127.0.0.1:\(listener.port)"
        let first = "\(base)/callback?code=SplxlOBeZQQYbYS6WxSbIA&state=af0ifjsldkj%2B%2F%3D"
        let second = "\(base)/callback?error=access_denied&error_description=the%20user%20said%20no"
        let run = try runProgram(
            "/usr/bin/curl",
            ["--silent", "--show-error", "--include", "--globoff", "--path-as-is", "--max-time", "30", first, second])
        #expect(run.status == 0, "curl: \(run.err)")
        #expect(run.out.components(separatedBy: "HTTP/1.1 200").count == 3, "two pages: \(run.out)")
        #expect(run.out.lowercased().contains("cache-control: no-store"))
        #expect(deliveries.all == [first, second])
    }

    @Test(.enabled(if: ipv6LoopbackAvailable, "::1 cannot be bound on this machine"))
    func curlReachesTheIPv6Listener() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv6, port: 0, path: "/cb", deliver: deliveries.deliver)
        defer { listener.close() }
        let url = "http://[::1]:\(listener.port)/cb?code=x%20y"
        let run = try runProgram(
            "/usr/bin/curl", ["--silent", "--show-error", "--include", "--globoff", "--max-time", "30", url])
        #expect(run.status == 0, "curl: \(run.err)")
        #expect(run.out.hasPrefix("HTTP/1.1 200"))
        #expect(deliveries.all == [url])
    }
}
