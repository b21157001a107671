import Testing

@testable import BrowserLoginProtocol

/// One row of the registration table: a return URL and what §1 (and the
/// project's choices where §1 is silent) says about it.
struct RegistrationCase: Sendable, CustomTestStringConvertible {
    let url: String
    /// nil: accepted.
    let refusal: ReturnURLRefusal?
    /// The exact rule name the refusal must carry.
    let rule: String?

    static func accept(_ url: String) -> RegistrationCase { RegistrationCase(url: url, refusal: nil, rule: nil) }
    static func refuse(_ url: String, _ refusal: ReturnURLRefusal, _ rule: String) -> RegistrationCase {
        RegistrationCase(url: url, refusal: refusal, rule: rule)
    }

    var testDescription: String {
        let shown = url.count > 80 ? String(url.prefix(60)) + "…(\(url.utf8.count) bytes)" : url
        return (rule.map { "refuse[\($0)] " } ?? "accept ") + shown
    }
}

private let longLabel = String(repeating: "a", count: 64)
private let longPath = "https://app.example.com/" + String(repeating: "p", count: ReturnURL.maximumLength - 24)
private let tooLongPath = longPath + "p"

let registrationCases: [RegistrationCase] = [
    // Accepted: the two shapes of §1.
    .accept("com.example.notes:/callback"),
    .accept("myapp://auth/callback"),
    .accept("https://app.example.com/callback"),
    .accept("https://app.example.com:443/callback"),
    .accept("https://App.Example.COM/callback"),  // host case is free; only the scheme must be lower case
    .accept("https://xn--bcher-kva.example/callback"),  // punycode
    .accept("https://app.example.com/"),
    .accept("https://app.example.com/a/b/"),
    .accept("https://a-b.example.co.uk/cb"),
    .accept("com.example.notes:/"),
    .accept("com.example.app+dev.x-1:/cb"),
    .accept("myapp://AUTH/callback"),
    .accept("https://app.example.com/caf%C3%A9"),
    .accept("https://app.example.com/a%20b"),
    .accept("https://app.example.com/..a/.b/c."),  // not dot segments, only look like them
    .accept(longPath),  // exactly the maximum length

    // Scheme.
    .refuse("HTTPS://app.example.com/cb", .upperCaseScheme, "lower-case-scheme"),
    .refuse("Com.Example.Notes:/cb", .upperCaseScheme, "lower-case-scheme"),
    .refuse("myApp://auth/cb", .upperCaseScheme, "lower-case-scheme"),
    .refuse("http://app.example.com/cb", .httpNotLoopback, "http-only-on-loopback-ip"),
    .refuse("file:///etc/passwd", .forbiddenScheme("file"), "forbidden-scheme"),
    .refuse("data:text/html,hello", .forbiddenScheme("data"), "forbidden-scheme"),
    .refuse("javascript:alert(1)", .forbiddenScheme("javascript"), "forbidden-scheme"),
    .refuse("vbscript:msgbox", .forbiddenScheme("vbscript"), "forbidden-scheme"),
    .refuse("mailto:someone", .forbiddenScheme("mailto"), "forbidden-scheme"),
    .refuse("about:blank", .forbiddenScheme("about"), "forbidden-scheme"),
    .refuse("blob:https://app.example.com/x", .forbiddenScheme("blob"), "forbidden-scheme"),
    .refuse("ftp://files.example.com/cb", .forbiddenScheme("ftp"), "forbidden-scheme"),
    .refuse("ws://app.example.com/cb", .forbiddenScheme("ws"), "forbidden-scheme"),
    .refuse("wss://app.example.com/cb", .forbiddenScheme("wss"), "forbidden-scheme"),

    // Query, fragment, userinfo.
    .refuse("myapp://auth/cb?x=1", .hasQuery, "no-query"),
    .refuse("myapp://auth/cb?", .hasQuery, "no-query"),
    .refuse("https://app.example.com/cb?code=1", .hasQuery, "no-query"),
    .refuse("myapp://auth/cb#top", .hasFragment, "no-fragment"),
    .refuse("https://app.example.com/cb#", .hasFragment, "no-fragment"),
    .refuse("https://user@app.example.com/cb", .hasUserinfo, "no-userinfo"),
    .refuse("https://user:secret@app.example.com/cb", .hasUserinfo, "no-userinfo"),
    .refuse("https://app.example.com@evil.example/cb", .hasUserinfo, "no-userinfo"),
    .refuse("https://app.example.com%2F@evil.example/cb", .hasUserinfo, "no-userinfo"),
    .refuse("myapp://user@auth/cb", .hasUserinfo, "no-userinfo"),

    // Authority and path shape.
    .refuse("myapp:///cb", .emptyAuthority, "non-empty-authority"),
    .refuse("https:/cb", .emptyAuthority, "non-empty-authority"),
    .refuse("https:///cb", .emptyAuthority, "non-empty-authority"),
    .refuse("com.example.notes:callback", .pathMustStartWithSlash, "absolute-path"),
    .refuse("https://app.example.com", .pathMustStartWithSlash, "absolute-path"),
    .refuse("myapp://auth", .pathMustStartWithSlash, "absolute-path"),

    // Dot segments, empty segments (an extra slash), percent-encoding.
    .refuse("https://app.example.com/a/../cb", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com/./cb", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com/cb/..", .dotSegment, "no-dot-segments"),
    .refuse("com.example.notes:/..", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com/%2e%2e/cb", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com/%2E/cb", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com/.%2E/cb", .dotSegment, "no-dot-segments"),
    .refuse("https://app.example.com//cb", .emptyPathSegment, "no-empty-segments"),
    .refuse("https://app.example.com/a//cb", .emptyPathSegment, "no-empty-segments"),
    .refuse("com.example.notes://", .emptyAuthority, "non-empty-authority"),
    .refuse("com.example.notes:/a//b", .emptyPathSegment, "no-empty-segments"),
    .refuse("https://app.example.com/a%2Fb", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/a%2fb", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%3Fx", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%23x", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%5Cx", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%00", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%0A", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%7F", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%252F", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/%252e%252e/cb", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%2500", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%zz", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%4", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%", .invalidPercentEncoding, "valid-percent-encoding"),
    .refuse("https://app.example.com/cb%FF", .invalidPercentEncoding, "valid-percent-encoding"),

    // Host rules for https.
    .refuse("https://127.0.0.1/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://8.8.8.8/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://0x7f.0.0.1/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://2130706433/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://[::1]/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://[2001:db8::1]:443/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://[::ffff:127.0.0.1]/cb", .ipLiteral, "no-ip-literal"),
    .refuse("https://localhost/cb", .localhost, "no-localhost"),
    .refuse("https://LocalHost/cb", .localhost, "no-localhost"),
    .refuse("https://app.localhost/cb", .localhost, "no-localhost"),
    .refuse("https://localhost:443/cb", .localhost, "no-localhost"),
    .refuse("https://intranet/cb", .hostWithoutDot, "host-has-dot"),
    .refuse("https://app.example.com./cb", .trailingDot, "no-trailing-dot"),
    .refuse("https://localhost./cb", .trailingDot, "no-trailing-dot"),
    .refuse("https://app..example.com/cb", .invalidHost, "host-name"),
    .refuse("https://.example.com/cb", .invalidHost, "host-name"),
    .refuse("https://-app.example.com/cb", .invalidHost, "host-name"),
    .refuse("https://app-.example.com/cb", .invalidHost, "host-name"),
    .refuse("https://app_1.example.com/cb", .invalidHost, "host-name"),
    .refuse("https://app%2Eexample.com/cb", .invalidHost, "host-name"),
    .refuse("https://\(longLabel).example.com/cb", .invalidHost, "host-name"),
    .refuse("myapp://[::1]/cb", .invalidHost, "host-name"),
    .refuse("myapp://au%74h/cb", .invalidHost, "host-name"),
    // Unicode host names: non-ASCII is not a URL character; write punycode.
    .refuse("https://bücher.example/cb", .notAbsoluteURL, "absolute-url"),
    .refuse("myapp://ünï/cb", .notAbsoluteURL, "absolute-url"),

    // Ports.
    .refuse("https://app.example.com:8443/cb", .portNot443, "port-443"),
    .refuse("https://app.example.com:80/cb", .portNot443, "port-443"),
    .refuse("https://app.example.com:0443/cb", .portNot443, "port-443"),
    .refuse("https://app.example.com:/cb", .portNot443, "port-443"),
    .refuse("https://app.example.com:443:443/cb", .portNot443, "port-443"),
    .refuse("myapp://auth:8080/cb", .portOnCustomScheme, "no-port-on-custom-scheme"),
    .refuse("myapp://auth:/cb", .portOnCustomScheme, "no-port-on-custom-scheme"),

    // Not a URL at all.
    .refuse("", .notAbsoluteURL, "absolute-url"),
    .refuse("/callback", .notAbsoluteURL, "absolute-url"),
    .refuse("1app:/cb", .notAbsoluteURL, "absolute-url"),
    .refuse(":/cb", .notAbsoluteURL, "absolute-url"),
    .refuse("myapp://auth/c b", .notAbsoluteURL, "absolute-url"),
    .refuse("myapp://auth/cb\t", .notAbsoluteURL, "absolute-url"),
    .refuse("myapp://auth/cb\u{0}", .notAbsoluteURL, "absolute-url"),
    .refuse("https://app.example.com\\@evil.example/cb", .notAbsoluteURL, "absolute-url"),
    .refuse("https://app.example.com/<script>", .notAbsoluteURL, "absolute-url"),
    .refuse(tooLongPath, .tooLong, "too-long"),
    .refuse("myapp://auth/" + String(repeating: "%00", count: 5000), .tooLong, "too-long"),
]

@Suite struct ReturnURLRegistrationTests {
    @Test func tableIsLargeEnough() {
        #expect(registrationCases.count >= 40)
        #expect(registrationCases.contains { $0.refusal == nil })
    }

    @Test(arguments: registrationCases)
    func registration(_ c: RegistrationCase) {
        do {
            let url = try ReturnURL(c.url)
            #expect(c.refusal == nil, "accepted, but should break \(c.rule ?? "")")
            #expect(url.text == c.url, "kept as written")
        } catch {
            #expect(error == c.refusal)
            #expect(error.rule == c.rule)
            #expect(!error.message.isEmpty)
            #expect(error.description == "\(error.rule): \(error.message)")
        }
    }

    @Test func everyRefusalHasItsOwnRuleName() {
        let all: [ReturnURLRefusal] = [
            .tooLong, .notAbsoluteURL, .upperCaseScheme, .forbiddenScheme("x"), .hasQuery, .hasFragment, .hasUserinfo,
            .emptyAuthority, .pathMustStartWithSlash, .dotSegment, .emptyPathSegment, .invalidPercentEncoding,
            .invalidHost, .ipLiteral, .localhost, .hostWithoutDot, .trailingDot, .portNot443, .portOnCustomScheme,
            .httpNotLoopback, .portOnLoopback,
        ]
        #expect(Set(all.map(\.rule)).count == all.count)
    }

    @Test func forbiddenSchemeListIsTheSpecs() {
        #expect(
            ReturnURL.forbiddenSchemes == [
                "http", "https", "file", "data", "javascript", "vbscript", "mailto", "about", "blob", "ftp", "ws", "wss",
            ])
    }

    @Test func httpsFlag() throws {
        #expect(try ReturnURL("https://app.example.com/cb").isHTTPS)
        #expect(try !ReturnURL("com.example.notes:/cb").isHTTPS)
    }
}

/// One row of the exact-match table: a registered return URL, the URL a
/// callback was sent to (before its query), and whether they match.
struct MatchCase: Sendable, CustomTestStringConvertible {
    let registered: String
    let target: String
    let matches: Bool
    var testDescription: String { "\(registered) \(matches ? "==" : "!=") \(target)" }
}

private func same(_ r: String, _ t: String) -> MatchCase { MatchCase(registered: r, target: t, matches: true) }
private func differ(_ r: String, _ t: String) -> MatchCase { MatchCase(registered: r, target: t, matches: false) }

let matchCases: [MatchCase] = [
    same("https://app.example.com/cb", "https://app.example.com/cb"),
    same("https://app.example.com/cb", "HTTPS://app.example.com/cb"),
    same("https://app.example.com/cb", "https://APP.Example.COM/cb"),
    same("https://App.Example.com/cb", "https://app.example.com/cb"),
    same("https://app.example.com:443/cb", "https://app.example.com:443/cb"),
    same("com.example.notes:/callback", "com.example.notes:/callback"),
    same("com.example.notes:/callback", "COM.Example.Notes:/callback"),
    same("myapp://auth/callback", "myapp://AUTH/callback"),
    same("https://app.example.com/caf%C3%A9", "https://app.example.com/caf%C3%A9"),
    same("https://app.example.com/", "https://app.example.com/"),

    differ("https://app.example.com/cb", "https://app.example.com/CB"),
    differ("https://app.example.com/cb", "https://app.example.com/cb/"),
    differ("https://app.example.com/cb/", "https://app.example.com/cb"),
    differ("https://app.example.com/a/cb", "https://app.example.com/a%2Fcb"),
    differ("https://app.example.com/cb", "https://app.example.com/%63b"),
    differ("https://app.example.com/caf%C3%A9", "https://app.example.com/caf%c3%a9"),
    differ("https://app.example.com/a/cb", "https://app.example.com/a/%2e/cb"),
    differ("https://app.example.com/a/cb", "https://app.example.com/a/./cb"),
    differ("https://app.example.com/a/cb", "https://app.example.com/a/x/../cb"),
    differ("https://app.example.com/cb", "https://app.example.com:443/cb"),
    differ("https://app.example.com:443/cb", "https://app.example.com/cb"),
    differ("https://app.example.com/cb", "https://app.example.com:8443/cb"),
    differ("https://app.example.com/cb", "https://app.example.com/cb2"),
    differ("https://app.example.com/cb", "https://app.example.com/cb/extra"),
    differ("https://app.example.com/cb", "https://app.example.com/c"),
    differ("https://app.example.com/cb", "https://app.example.com//cb"),
    differ("https://app.example.com/a/cb", "https://app.example.com/a//cb"),
    differ("https://app.example.com/cb", "https://app.example.com./cb"),
    differ("https://app.example.com/cb", "https://evil.app.example.com/cb"),
    differ("https://app.example.com/cb", "https://app.example.com.evil.example/cb"),
    differ("https://app.example.com/cb", "https://app%2Eexample.com/cb"),
    differ("https://app.example.com/cb", "http://app.example.com/cb"),
    differ("https://app.example.com/cb", "https://[::1]/cb"),
    differ("https://app.example.com/cb", "https://[::1]:443/cb"),
    differ("https://app.example.com/cb", "https:app.example.com/cb"),
    differ("com.example.notes:/callback", "com.example.notes://callback"),
    differ("com.example.notes:/callback", "com.example.notes:callback"),
    differ("com.example.notes:/callback", "com.example.notes:/callback/"),
    differ("com.example.notes:/callback", "com.example.notes:/Callback"),
    differ("myapp://auth/callback", "myapp:/auth/callback"),
    differ("myapp://auth/callback", "myapp://auth:80/callback"),
    differ("myapp://auth/callback", "myapp2://auth/callback"),
    differ("myapp://auth/callback", "myapp://auth/callback%00"),
]

@Suite struct ReturnURLMatchTests {
    @Test func tableIsLargeEnough() { #expect(matchCases.count >= 20) }

    /// The target goes through the real callback parser, as finish(url) does.
    @Test(arguments: matchCases)
    func exactMatch(_ c: MatchCase) throws {
        let registered = try ReturnURL(c.registered)
        let text = c.target + "?code=c1&attempt=a1&iss=https%3A%2F%2Flogin.example.com"
        let callback: Callback
        do {
            callback = try Callback(parsing: text)
        } catch {
            // A target the parser refuses can never match; such rows must say so.
            #expect(!c.matches, "refused \(error)")
            return
        }
        #expect(registered.matches(callback.target) == c.matches)
    }

    /// §1 and §5.1: a URL with a query or a fragment never matches, whatever
    /// its scheme, authority and path.
    @Test(arguments: [
        "https://app.example.com/cb?", "https://app.example.com/cb?x=1", "https://app.example.com/cb#",
        "https://app.example.com/cb#x", "https://app.example.com/cb?x#y",
    ])
    func queryOrFragmentNeverMatches(_ text: String) throws {
        let registered = try ReturnURL("https://app.example.com/cb")
        let parts = try #require(URLParts(splitting: text))
        #expect(!registered.matches(parts))
    }

    @Test func aRegisteredURLMatchesItself() throws {
        for c in registrationCases where c.refusal == nil {
            let url = try ReturnURL(c.url)
            guard !url.isLoopback else { continue }  // its port varies: LoopbackReturnURLTests
            #expect(url.matches(url.parts), "\(c.url)")
        }
    }
}
