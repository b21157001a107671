import Testing

@testable import BrowserLoginProtocol

struct OriginCase: Sendable, CustomTestStringConvertible {
    let text: String
    /// The serialised origin when accepted.
    let serialized: String?
    let refusal: OriginRefusal?
    var testDescription: String { text.isEmpty ? "(empty)" : text }
}

private func accept(_ text: String, _ serialized: String? = nil) -> OriginCase {
    OriginCase(text: text, serialized: serialized ?? text, refusal: nil)
}
private func refuse(_ text: String, _ refusal: OriginRefusal) -> OriginCase {
    OriginCase(text: text, serialized: nil, refusal: refusal)
}

let originCases: [OriginCase] = [
    accept("https://login.example.com"),
    accept("https://login.example.com:8443"),
    accept("https://login.example.com:443", "https://login.example.com"),
    accept("http://127.0.0.1:8080"),
    accept("http://127.0.0.1:80", "http://127.0.0.1"),
    accept("http://127.255.0.9"),
    accept("http://localhost:3000"),
    accept("http://[::1]:8080"),
    accept("https://[::1]"),
    accept("https://10.0.0.1"),
    accept("https://localhost"),

    refuse("", .malformed),
    refuse("login.example.com", .malformed),
    refuse("https://", .malformed),
    refuse("https:login.example.com", .malformed),
    refuse("https://login example.com", .malformed),
    refuse("https://bücher.example", .malformed),
    refuse("https://login_1.example.com", .malformed),
    refuse("https://[::1", .malformed),
    refuse("https://[::g]", .malformed),
    refuse("https://login.example.com/", .hasPathOrQuery),
    refuse("https://login.example.com/base", .hasPathOrQuery),
    refuse("https://login.example.com?x", .hasPathOrQuery),
    refuse("https://login.example.com#x", .hasPathOrQuery),
    refuse("https://user@login.example.com", .hasUserinfo),
    refuse("HTTPS://login.example.com", .notLowerCase),
    refuse("https://Login.Example.com", .notLowerCase),
    refuse("ftp://login.example.com", .schemeNotAllowed),
    refuse("wss://login.example.com", .schemeNotAllowed),
    refuse("http://login.example.com", .httpNeedsLoopback),
    refuse("http://10.0.0.1:8080", .httpNeedsLoopback),
    refuse("http://127.1", .httpNeedsLoopback),
    refuse("http://127.0.0.256", .httpNeedsLoopback),
    refuse("http://localhost.", .httpNeedsLoopback),
    refuse("http://app.localhost", .httpNeedsLoopback),
    refuse("https://login.example.com:", .invalidPort),
    refuse("https://login.example.com:0", .invalidPort),
    refuse("https://login.example.com:65536", .invalidPort),
    refuse("https://login.example.com:08443", .invalidPort),
    refuse("https://login.example.com:+443", .invalidPort),
    refuse("https://login.example.com:44a", .invalidPort),
]

@Suite struct OriginTests {
    @Test(arguments: originCases)
    func parse(_ c: OriginCase) {
        do {
            let origin = try Origin(c.text)
            #expect(c.refusal == nil)
            #expect(origin.serialized == c.serialized)
            #expect(try Origin(origin.serialized) == origin, "the serialised form parses back to itself")
        } catch {
            #expect(error == c.refusal)
            #expect(!error.message.isEmpty)
        }
    }

    @Test func parts() throws {
        let o = try Origin("https://login.example.com:8443")
        #expect(o.scheme == "https" && o.host == "login.example.com" && o.port == 8443)
        #expect(o.effectivePort == 8443)
        #expect(try Origin("https://login.example.com").effectivePort == 443)
        #expect(try Origin("http://127.0.0.1").effectivePort == 80)
        #expect(try Origin("http://[::1]:9").isLoopback)
        #expect(try !Origin("https://login.example.com").isLoopback)
    }

    @Test(arguments: [
        ("localhost", true), ("LOCALHOST", true), ("[::1]", true), ("127.0.0.1", true), ("127.1.2.3", true),
        ("127.0.0.255", true), ("127.0.0.256", false), ("127.0.0", false), ("128.0.0.1", false), ("[::2]", false),
        ("localhost.", false), ("127.0.0.1.", false), ("127.0.0.-1", false),
    ])
    func loopbackHosts(_ host: String, _ loopback: Bool) {
        #expect(Origin.isLoopbackHost(host) == loopback)
    }
}
