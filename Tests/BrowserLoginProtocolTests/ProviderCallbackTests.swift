import Testing

@testable import BrowserLoginProtocol

/// One row of the standard provider's callback table (RFC 6749 §4.1.2,
/// RFC 9207; docs/providers.md "Signing in through the browser"): a callback
/// URL and either the exact parse result or the exact refusal.
struct ProviderCallbackCase: Sendable, CustomTestStringConvertible {
    enum Expected: Sendable {
        /// target is scheme + authority + path as written.
        case parsed(target: String, outcome: ProviderCallback.Outcome, state: String, issuer: String?)
        case refused(CallbackRefusal)
    }
    let name: String
    let url: String
    let expected: Expected
    var testDescription: String { name }
}

private let issuer = "https://id.example.com/realms/main"
private let issQ = "iss=https%3A%2F%2Fid.example.com%2Frealms%2Fmain"
private let loopback = "http://127.0.0.1:49152/callback"

private func ok(
    _ name: String, _ url: String, code: String? = nil, error: String? = nil, description: String? = nil,
    state: String = "st1", issuer: String? = issuer, target: String = loopback
) -> ProviderCallbackCase {
    let outcome: ProviderCallback.Outcome = code.map { .code($0) } ?? .error(error!, description: description)
    return ProviderCallbackCase(
        name: name, url: url, expected: .parsed(target: target, outcome: outcome, state: state, issuer: issuer))
}

private func no(_ name: String, _ url: String, _ refusal: CallbackRefusal) -> ProviderCallbackCase {
    ProviderCallbackCase(name: name, url: url, expected: .refused(refusal))
}

/// Pads a valid callback with an ignored parameter to exactly `length` bytes.
private func padded(to length: Int) -> String {
    let head = "\(loopback)?code=c1&state=st1&\(issQ)&pad="
    return head + String(repeating: "x", count: length - head.utf8.count)
}

let providerCallbackCases: [ProviderCallbackCase] = [
    // Accepted.
    ok("code form", "\(loopback)?code=c1&state=st1&\(issQ)", code: "c1"),
    ok("any order", "\(loopback)?\(issQ)&state=st1&code=c1", code: "c1"),
    ok("without iss (the engine decides whether it is required)", "\(loopback)?code=c1&state=st1", code: "c1", issuer: nil),
    ok("iss not encoded", "\(loopback)?code=c1&state=st1&iss=https://id.example.com/realms/main", code: "c1"),
    ok("error form", "\(loopback)?error=access_denied&state=st1&\(issQ)", error: "access_denied"),
    ok("error without iss", "\(loopback)?error=access_denied&state=st1", error: "access_denied", issuer: nil),
    ok(
        "error_description kept, percent-decoded",
        "\(loopback)?error=invalid_scope&error_description=The%20scope%20is%20unknown&state=st1&\(issQ)",
        error: "invalid_scope", description: "The scope is unknown"),
    ok(
        "error_description with a plus kept as written",
        "\(loopback)?error=server_error&error_description=try+later&state=st1&\(issQ)", error: "server_error",
        description: "try+later"),
    ok(
        "empty error_description kept empty", "\(loopback)?error=e&error_description=&state=st1", error: "e", description: "",
        issuer: nil),
    ok("unknown parameters ignored", "\(loopback)?code=c1&state=st1&\(issQ)&session_state=abc&scope=openid", code: "c1"),
    ok(
        "a Browser Login 'attempt' is just an unknown parameter here", "\(loopback)?code=c1&state=st1&attempt=a1", code: "c1",
        issuer: nil),
    ok("valueless unknown parameter ignored", "\(loopback)?flag&code=c1&state=st1&\(issQ)", code: "c1"),
    ok("one trailing empty pair", "\(loopback)?code=c1&state=st1&\(issQ)&", code: "c1"),
    ok("percent-decoded code", "\(loopback)?code=a%2Bb%2Fc&state=st1&\(issQ)", code: "a+b/c"),
    ok("plus is not a space", "\(loopback)?code=a+b&state=st1&\(issQ)", code: "a+b"),
    ok("encoded delimiters stay in the state", "\(loopback)?code=c1&state=s%26code%3Dx&\(issQ)", code: "c1", state: "s&code=x"),
    ok("encoded parameter name", "\(loopback)?c%6Fde=c1&st%61te=st1&\(issQ)", code: "c1"),
    ok(
        "IPv6 loopback target", "http://[::1]:49152/callback?code=c1&state=st1&\(issQ)", code: "c1",
        target: "http://[::1]:49152/callback"),
    ok(
        "private-use scheme target", "com.example.chat:/callback?code=c1&state=st1&\(issQ)", code: "c1",
        target: "com.example.chat:/callback"),
    ok(
        "port and path kept as written (compared by the engine)", "HTTP://127.0.0.1:1/Callback?code=c1&state=st1",
        code: "c1", issuer: nil, target: "HTTP://127.0.0.1:1/Callback"),
    ok("exactly 8 KiB", padded(to: 8192), code: "c1"),

    // Refused: size, fragment, userinfo, not a URL.
    no("one byte over 8 KiB", padded(to: 8193), .tooLong),
    no("very long", loopback + "?" + String(repeating: "a", count: 100_000), .tooLong),
    no("fragment", "\(loopback)?code=c1&state=st1&\(issQ)#x", .hasFragment),
    no("empty fragment", "\(loopback)?code=c1&state=st1&\(issQ)#", .hasFragment),
    no("fragment-only response (implicit flow shape)", "\(loopback)#code=c1&state=st1", .hasFragment),
    no("userinfo", "http://user@127.0.0.1:49152/callback?code=c1&state=st1&\(issQ)", .hasUserinfo),
    no("at sign in the authority", "http://evil.example@127.0.0.1/callback?code=c1&state=st1", .hasUserinfo),
    no("empty", "", .malformed),
    no("no scheme", "/callback?code=c1&state=st1", .malformed),
    no("space", "http://127.0.0.1/call back?code=c1&state=st1", .malformed),
    no("non-ASCII", "http://127.0.0.1/callé?code=c1&state=st1", .malformed),
    no("NUL in a name", "\(loopback)?code=c1&state=st1&x%00=1", .malformed),

    // Refused: missing or empty parameters.
    no("no query", loopback, .missingParameter("state")),
    no("empty query", "\(loopback)?", .missingParameter("code")),
    no("no code and no error", "\(loopback)?state=st1&\(issQ)", .missingParameter("code")),
    no("missing state", "\(loopback)?code=c1&\(issQ)", .missingParameter("state")),
    no("missing state on an error", "\(loopback)?error=access_denied&\(issQ)", .missingParameter("state")),
    no("empty state", "\(loopback)?code=c1&state=&\(issQ)", .missingParameter("state")),
    no("state without '='", "\(loopback)?code=c1&state&\(issQ)", .missingParameter("state")),
    no("empty code", "\(loopback)?code=&state=st1", .missingParameter("code")),
    no("empty error", "\(loopback)?error=&state=st1", .missingParameter("error")),
    no("names differ in case", "\(loopback)?code=c1&State=st1", .missingParameter("state")),
    no("empty iss", "\(loopback)?code=c1&state=st1&iss=", .invalidParameter("iss")),
    no("iss without '='", "\(loopback)?code=c1&state=st1&iss", .invalidParameter("iss")),

    // Refused: repeated parameters (any parameter, even an ignored one).
    no("code twice", "\(loopback)?code=c1&code=c2&state=st1", .duplicateParameter("code")),
    no("state twice, same value", "\(loopback)?code=c1&state=st1&state=st1", .duplicateParameter("state")),
    no("iss twice", "\(loopback)?code=c1&state=st1&\(issQ)&iss=https%3A%2F%2Fevil.example", .duplicateParameter("iss")),
    no("error twice", "\(loopback)?error=a&error=b&state=st1", .duplicateParameter("error")),
    no(
        "error_description twice", "\(loopback)?error=a&error_description=x&error_description=y&state=st1",
        .duplicateParameter("error_description")),
    no("encoded name repeats", "\(loopback)?code=c1&c%6Fde=c2&state=st1", .duplicateParameter("code")),
    no("ignored parameter twice", "\(loopback)?scope=a&scope=b&code=c1&state=st1", .duplicateParameter("scope")),
    no("two empty pairs", "\(loopback)?code=c1&&state=st1&&", .duplicateParameter("")),

    // Refused: malformed values, code and error together.
    no("code and error", "\(loopback)?code=c1&error=access_denied&state=st1&\(issQ)", .codeAndError),
    no("code and an empty error", "\(loopback)?code=c1&error=&state=st1", .codeAndError),
    no("NUL in code", "\(loopback)?code=c%001&state=st1", .invalidParameter("code")),
    no("bad escape in state", "\(loopback)?code=c1&state=%zz", .invalidParameter("state")),
    no("truncated escape in iss", "\(loopback)?code=c1&state=st1&iss=%", .invalidParameter("iss")),
    no("not UTF-8 in state", "\(loopback)?code=c1&state=%FF", .invalidParameter("state")),
    no(
        "newline in error_description", "\(loopback)?error=e&error_description=a%0Ab&state=st1",
        .invalidParameter("error_description")),
]

@Suite struct ProviderCallbackParsingTests {
    @Test func tableIsLargeEnough() { #expect(providerCallbackCases.count >= 40) }

    @Test(arguments: providerCallbackCases)
    func parse(_ c: ProviderCallbackCase) throws {
        switch c.expected {
        case .parsed(let target, let outcome, let state, let issuer):
            let callback = try ProviderCallback(parsing: c.url)
            #expect(callback.outcome == outcome)
            #expect(callback.state == state)
            #expect(callback.issuer == issuer)
            #expect(callback.target == URLParts(splitting: target))
            #expect(callback.target.query == nil && callback.target.fragment == nil)
        case .refused(let refusal):
            #expect(throws: refusal) { try ProviderCallback(parsing: c.url) }
        }
    }

    @Test func theLimitIsTheBrowserLoginCallbacks() {
        #expect(Callback.maximumLength == 8192)
        #expect((try? ProviderCallback(parsing: padded(to: 8192))) != nil)
        #expect(throws: CallbackRefusal.tooLong) { try ProviderCallback(parsing: padded(to: 8193)) }
    }

    @Test func refusalMessagesNeverRepeatAValue() {
        let secret = "SECRETCODE"
        let urls = [
            "\(loopback)?code=\(secret)&code=\(secret)&state=st1",
            "\(loopback)?code=\(secret)%00&state=st1",
            "\(loopback)?code=\(secret)&error=x&state=st1",
            "\(loopback)?code=c1&state=\(secret)#\(secret)",
            "\(loopback)?code=c1&state=%FF\(secret)",
            "http://\(secret)@127.0.0.1/callback?code=c1&state=st1",
        ]
        for url in urls {
            do {
                _ = try ProviderCallback(parsing: url)
                Issue.record("accepted a callback that should be refused")
            } catch {
                #expect(!error.description.contains(secret))
                #expect(!error.message.contains(secret))
            }
        }
    }
}

/// `isProviderCallback` routes `login.finish`: a standard provider's
/// callback names a `state` and no `attempt`; a Browser Login callback
/// (docs/protocol.md §6) names an `attempt`.
@Suite struct ProviderCallbackRoutingTests {
    @Test(arguments: [
        "\(loopback)?code=c1&state=st1&\(issQ)",
        "\(loopback)?error=access_denied&state=st1",
        "com.example.chat:/callback?code=c1&state=st1",
        "\(loopback)?st%61te=st1&code=c1",
        // Routed here even when malformed: the provider path then refuses it.
        "\(loopback)?state=st1",
        "\(loopback)?state=&code=c1",
        "\(loopback)?state=st1&state=st2",
        "\(loopback)?code=c1&state=st1#fragment",
    ])
    func providerCallbacks(_ url: String) {
        #expect(ProviderCallback.isProviderCallback(url))
    }

    @Test(arguments: [
        // Browser Login callbacks (docs/protocol.md §6).
        "com.example.notes:/callback?code=c1&attempt=att1&iss=https%3A%2F%2Flogin.example.com",
        "com.example.notes:/callback?error=access_denied&attempt=att1&iss=https%3A%2F%2Flogin.example.com",
        // A Browser Login callback that also carries a state stays one.
        "com.example.notes:/callback?code=c1&attempt=att1&state=st1&iss=https%3A%2F%2Flogin.example.com",
        "\(loopback)?state=st1&att%65mpt=a1",
        // No state at all.
        "\(loopback)?code=c1&\(issQ)",
        "\(loopback)",
        "\(loopback)?",
        "\(loopback)#state=st1",
        // Not a URL.
        "",
        "state=st1",
        "http://127.0.0.1/call back?state=st1",
    ])
    func otherCallbacks(_ url: String) {
        #expect(!ProviderCallback.isProviderCallback(url))
    }

    @Test func aBrowserLoginCallbackBuiltByTheProtocolIsNotAProviderCallback() {
        let url = Callback.url(
            returnURL: "com.example.notes:/callback", outcome: .code("c1"), attempt: "att1",
            issuer: "https://login.example.com")
        #expect(!ProviderCallback.isProviderCallback(url))
        #expect((try? Callback(parsing: url)) != nil)
    }
}
