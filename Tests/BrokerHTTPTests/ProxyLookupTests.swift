import BrokerCore
import BrokerCurl
import CurlSupport
import Synchronization
import Testing

@testable import BrokerHTTP

/// The transport's proxy lookup (the daemon's seam to the desktop's proxy
/// settings) and the loopback rule, with a loopback test server standing in
/// for the proxy. The real proxy and the environment: EndToEndTests/ProxyTests.
@Suite struct ProxyLookupTests {
    func get(_ url: String) -> HTTPRequest {
        HTTPRequest(
            method: "GET", url: url, timeoutMilliseconds: 5_000, connectTimeoutMilliseconds: 2_000,
            maximumResponseBytes: 1 << 20, changesState: false)
    }

    @Test(arguments: [
        ("http://127.0.0.1:8080/x", true), ("http://127.1/", true), ("http://127.255.0.9/", true),
        ("http://localhost/", true), ("http://LocalHost./", true), ("http://app.localhost:99/", true),
        ("http://[::1]:9/", true), ("http://[::ffff:127.0.0.1]/", true),
        ("https://login.example.com/", false), ("http://128.0.0.1/", false), ("http://localhost.example.com/", false),
        ("http://[::2]/", false), ("http://127.0.0.1.nip.io/", false), ("not a url", false),
    ])
    func loopbackIsReadAsLibcurlReadsTheHost(_ url: String, _ loopback: Bool) {
        #expect(CurlLoopback.contains(url: url) == loopback)
    }

    @Test func theLookupNamesTheProxyOfEachOriginAndLoopbackIsNeverLookedUp() async throws {
        let proxy = try TestHTTPServer { _ in .respond(status: 299, body: Array("via proxy".utf8)) }
        defer { proxy.stop() }
        let target = try TestHTTPServer { _ in .respond(status: 200) }
        defer { target.stop() }
        let asked = Mutex<[String]>([])
        let transport = CurlTransport { origin in
            asked.withLock { $0.append(origin) }
            return proxy.url
        }

        // A name that never resolves: only the proxy can answer for it.
        let response = try await transport.send(get("http://login.proxy-test.invalid:8080/a/b?c=d"))
        #expect(response.status == 299)
        #expect(proxy.requests.first?.target == "http://login.proxy-test.invalid:8080/a/b?c=d")
        #expect(asked.withLock { $0 } == ["http://login.proxy-test.invalid:8080"], "the origin, never the path")

        // Loopback goes direct, without asking.
        let direct = try await transport.send(get(target.url + "/x"))
        #expect(direct.status == 200)
        #expect(target.requests.count == 1)
        #expect(proxy.requests.count == 1)
        #expect(asked.withLock { $0.count } == 1)
    }

    @Test func aNilAnswerMeansDirect() async throws {
        let transport = CurlTransport { _ in nil }
        do {
            _ = try await transport.send(get("http://login.proxy-test.invalid/"))
            Issue.record("a name that never resolves was answered")
        } catch {
            #expect("\(error)".contains("could not resolve login.proxy-test.invalid"), "\(error)")
        }
    }
}
