import Testing

@testable import BrowserLoginProtocol

/// Loopback return URLs (docs/protocol.md §1, RFC 8252 §7.3): registered as
/// `http://127.0.0.1/PATH` or `http://[::1]/PATH`, without a port; a create
/// request's URL matches with any port, and everything else stays exact.
@Suite struct LoopbackReturnURLTests {
    @Test(arguments: ["http://127.0.0.1/callback", "http://[::1]/callback", "http://127.0.0.1/", "http://127.0.0.1/a/b"])
    func registered(_ text: String) throws {
        let url = try ReturnURL(text)
        #expect(url.isLoopback)
        #expect(!url.isHTTPS)
        #expect(url.text == text)
    }

    @Test(arguments: [
        ("http://localhost/cb", ReturnURLRefusal.httpNotLoopback),
        ("http://LOCALHOST/cb", .httpNotLoopback),
        ("http://app.localhost/cb", .httpNotLoopback),
        ("http://127.0.0.2/cb", .httpNotLoopback),
        ("http://127.1/cb", .httpNotLoopback),
        ("http://2130706433/cb", .httpNotLoopback),
        ("http://0x7f000001/cb", .httpNotLoopback),
        ("http://[0:0:0:0:0:0:0:1]/cb", .httpNotLoopback),
        ("http://[::ffff:127.0.0.1]/cb", .httpNotLoopback),
        ("http://0.0.0.0/cb", .httpNotLoopback),
        ("http://example.com/cb", .httpNotLoopback),
        ("http://127.0.0.1.example.com/cb", .httpNotLoopback),
        ("http://127.0.0.1:8080/cb", .portOnLoopback),
        ("http://127.0.0.1:/cb", .portOnLoopback),
        ("http://[::1]:8080/cb", .portOnLoopback),
        ("http://user@127.0.0.1/cb", .hasUserinfo),
        ("http://127.0.0.1@evil.example/cb", .hasUserinfo),
        ("http://127.0.0.1/cb?x=1", .hasQuery),
        ("http://127.0.0.1/cb#x", .hasFragment),
        ("http://127.0.0.1/a/../cb", .dotSegment),
        ("http://127.0.0.1/a/%2e%2e/cb", .dotSegment),
        ("http://127.0.0.1/a//cb", .emptyPathSegment),
        ("http://127.0.0.1/a%2Fcb", .invalidPercentEncoding),
        ("http://127.0.0.1", .pathMustStartWithSlash),
        ("HTTP://127.0.0.1/cb", .upperCaseScheme),
    ])
    func refused(_ text: String, _ refusal: ReturnURLRefusal) {
        #expect(throws: refusal) { try ReturnURL(text) }
    }

    /// The callback target with a query, through the real callback parser (as finish(url) and the
    /// server's create read it): which ports and look-alikes match a registered loopback URL.
    @Test(arguments: [
        ("http://127.0.0.1/cb", "http://127.0.0.1:1/cb", true),
        ("http://127.0.0.1/cb", "http://127.0.0.1:54321/cb", true),
        ("http://127.0.0.1/cb", "http://127.0.0.1:65535/cb", true),
        ("http://[::1]/cb", "http://[::1]:40000/cb", true),
        ("http://127.0.0.1/cb", "HTTP://127.0.0.1:40000/cb", true),  // the scheme compares case-insensitively
        // Hostile variants: never a match.
        ("http://127.0.0.1/cb", "http://127.0.0.1/cb", false),  // no port: the native host always sends one
        ("http://127.0.0.1/cb", "http://127.0.0.1:/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:0/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:080/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:65536/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:+80/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:80:80/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:8%30/cb", false),
        ("http://127.0.0.1/cb", "http://user@127.0.0.1:4000/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000@evil.example:4000/cb", false),
        ("http://127.0.0.1/cb", "http://localhost:4000/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.2:4000/cb", false),
        ("http://127.0.0.1/cb", "http://127.1:4000/cb", false),
        ("http://127.0.0.1/cb", "http://[::1]:4000/cb", false),
        ("http://[::1]/cb", "http://127.0.0.1:4000/cb", false),
        ("http://[::1]/cb", "http://[0:0:0:0:0:0:0:1]:4000/cb", false),
        ("http://127.0.0.1/cb", "https://127.0.0.1:4000/cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/cb/", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/CB", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/%63b", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000//cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/./cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/x/../cb", false),
        ("http://127.0.0.1/cb", "http://127.0.0.1:4000/cb2", false),
        ("http://127.0.0.1/a/cb", "http://127.0.0.1:4000/a%2Fcb", false),
        // A port is never free on anything but a loopback URL.
        ("https://app.example.com/cb", "https://app.example.com:4000/cb", false),
        ("myapp://auth/cb", "myapp://auth:4000/cb", false),
        ("com.example.notes:/cb", "com.example.notes:/cb", true),
    ])
    func matching(_ registered: String, _ target: String, _ expected: Bool) throws {
        let url = try ReturnURL(registered)
        let text = target + "?code=c1&attempt=a1&iss=https%3A%2F%2Flogin.example.com"
        guard let callback = try? Callback(parsing: text) else {
            #expect(!expected, "the parser refused \(target)")
            return
        }
        #expect(url.matches(callback.target) == expected)
        // The create request's URL (no query) is matched the same way.
        if let parts = URLParts(splitting: target) { #expect(url.matches(parts) == expected) }
    }

    @Test func aQueryOrFragmentNeverMatches() throws {
        let url = try ReturnURL("http://127.0.0.1/cb")
        for text in ["http://127.0.0.1:4000/cb?", "http://127.0.0.1:4000/cb?x=1", "http://127.0.0.1:4000/cb#x"] {
            #expect(!url.matches(try #require(URLParts(splitting: text))))
        }
    }

    /// The attempt keeps the URL with its port, and its callback must then match exactly.
    @Test func anAttemptKeepsThePortAndItsCallbackMatchesItExactly() throws {
        let loopback = try ReturnURL("http://127.0.0.1/cb")
        let kept = loopback.attemptURL(requested: "http://127.0.0.1:4000/cb")
        #expect(kept == "http://127.0.0.1:4000/cb")
        #expect(loopback.attemptURL(requested: "HTTP://127.0.0.1:4000/cb") == "http://127.0.0.1:4000/cb")
        let scheme = try ReturnURL("com.example.notes:/cb")
        #expect(scheme.attemptURL(requested: "COM.example.notes:/cb") == "com.example.notes:/cb")
        func parts(_ text: String) throws -> URLParts { try #require(URLParts(splitting: text)) }
        #expect(ReturnURL.attemptMatches(kept, try parts("http://127.0.0.1:4000/cb")))
        #expect(!ReturnURL.attemptMatches(kept, try parts("http://127.0.0.1:4001/cb")))
        #expect(!ReturnURL.attemptMatches(kept, try parts("http://127.0.0.1/cb")))
        #expect(!ReturnURL.attemptMatches(kept, try parts("http://127.0.0.1:4000/cb/")))
        #expect(!ReturnURL.attemptMatches(kept, try parts("http://127.0.0.1:4000/cb?x")))
        #expect(ReturnURL.attemptMatches("com.example.notes:/cb", try parts("com.example.notes:/cb")))
        #expect(!ReturnURL.attemptMatches("com.example.notes:/cb", try parts("com.example.notes:/cb2")))
    }
}
