import Testing

@testable import BrowserLoginProtocol

/// One row of the callback table: a callback URL and either the exact parse
/// result or the exact refusal.
struct CallbackCase: Sendable, CustomTestStringConvertible {
    enum Expected: Sendable {
        /// target is scheme + authority + path as written.
        case parsed(target: String, outcome: Callback.Outcome, attempt: String, issuer: String)
        case refused(CallbackRefusal)
    }
    let name: String
    let url: String
    let expected: Expected
    var testDescription: String { name }
}

private let iss = "https://login.example.com"
private let issQ = "iss=https%3A%2F%2Flogin.example.com"
private let base = "myapp://auth/cb"

private func ok(
    _ name: String, _ url: String, code: String? = nil, error: String? = nil, attempt: String = "att1",
    issuer: String = iss, target: String = base
) -> CallbackCase {
    let outcome: Callback.Outcome = code.map { .code($0) } ?? .error(error!)
    return CallbackCase(
        name: name, url: url, expected: .parsed(target: target, outcome: outcome, attempt: attempt, issuer: issuer))
}

private func no(_ name: String, _ url: String, _ refusal: CallbackRefusal) -> CallbackCase {
    CallbackCase(name: name, url: url, expected: .refused(refusal))
}

/// Pads a valid callback with an ignored parameter to exactly `length` bytes.
private func padded(to length: Int) -> String {
    let head = "\(base)?code=c1&attempt=att1&\(issQ)&pad="
    return head + String(repeating: "x", count: length - head.utf8.count)
}

let callbackCases: [CallbackCase] = [
    // Accepted.
    ok("code form", "\(base)?code=c1&attempt=att1&\(issQ)", code: "c1"),
    ok("any order", "\(base)?\(issQ)&attempt=att1&code=c1", code: "c1"),
    ok("error form", "\(base)?error=access_denied&attempt=att1&\(issQ)", error: "access_denied"),
    ok("other error value", "\(base)?error=server_error&attempt=att1&\(issQ)", error: "server_error"),
    ok("iss not encoded", "\(base)?code=c1&attempt=att1&iss=https://login.example.com", code: "c1"),
    ok(
        "iss with port", "\(base)?code=c1&attempt=att1&iss=https%3A%2F%2Flogin.example.com%3A8443", code: "c1",
        issuer: "https://login.example.com:8443"),
    ok("unknown parameters ignored", "\(base)?state=s&code=c1&attempt=att1&\(issQ)&error_description=x", code: "c1"),
    ok(
        "error with description", "\(base)?error=access_denied&error_description=User%20declined&attempt=att1&\(issQ)",
        error: "access_denied"),
    ok("valueless unknown parameter ignored", "\(base)?flag&code=c1&attempt=att1&\(issQ)", code: "c1"),
    ok("one trailing empty pair", "\(base)?code=c1&attempt=att1&\(issQ)&", code: "c1"),
    ok("percent-decoded value", "\(base)?code=a%2Bb%2Fc&attempt=att1&\(issQ)", code: "a+b/c"),
    ok("plus is not a space", "\(base)?code=a+b&attempt=att1&\(issQ)", code: "a+b"),
    ok("double encoding decoded once", "\(base)?code=a%252Fb&attempt=att1&\(issQ)", code: "a%2Fb"),
    ok("encoded delimiters stay in the value", "\(base)?code=c1&attempt=a%26code%3Dx&\(issQ)", code: "c1", attempt: "a&code=x"),
    ok("encoded hash in a value", "\(base)?code=a%23b&attempt=att1&\(issQ)", code: "a#b"),
    ok("encoded parameter name", "\(base)?c%6Fde=c1&attempt=att1&\(issQ)", code: "c1"),
    ok("unicode value", "\(base)?code=%C3%A9&attempt=att1&\(issQ)", code: "é"),
    ok("NUL in an ignored value", "\(base)?code=c1&attempt=att1&\(issQ)&x=%00", code: "c1"),
    ok(
        "upper-case scheme and host kept as written", "MYAPP://AUTH/cb?code=c1&attempt=att1&\(issQ)", code: "c1",
        target: "MYAPP://AUTH/cb"),
    ok(
        "custom scheme without authority", "com.example.notes:/callback?code=c1&attempt=att1&\(issQ)", code: "c1",
        target: "com.example.notes:/callback"),
    ok(
        "https target", "https://app.example.com/cb?code=c1&attempt=att1&\(issQ)", code: "c1",
        target: "https://app.example.com/cb"),
    ok(
        "dot segments kept as written", "https://app.example.com/a/../cb?code=c1&attempt=att1&\(issQ)", code: "c1",
        target: "https://app.example.com/a/../cb"),
    ok(
        "IPv6 target parses (and never matches a registration)", "https://[::1]:8443/cb?code=c1&attempt=att1&\(issQ)",
        code: "c1", target: "https://[::1]:8443/cb"),
    ok("exactly 8 KiB", padded(to: 8192), code: "c1"),

    // Refused: size, fragment, userinfo, not a URL.
    no("one byte over 8 KiB", padded(to: 8193), .tooLong),
    no("very long", base + "?" + String(repeating: "a", count: 100_000), .tooLong),
    no("fragment", "\(base)?code=c1&attempt=att1&\(issQ)#x", .hasFragment),
    no("empty fragment", "\(base)?code=c1&attempt=att1&\(issQ)#", .hasFragment),
    no("fragment before the query", "\(base)#?code=c1&attempt=att1&\(issQ)", .hasFragment),
    no("userinfo", "myapp://user@auth/cb?code=c1&attempt=att1&\(issQ)", .hasUserinfo),
    no("at sign in the authority", "https://app.example.com@evil.example/cb?code=c1&attempt=att1&\(issQ)", .hasUserinfo),
    no("empty", "", .malformed),
    no("no scheme", "/cb?code=c1&attempt=att1&\(issQ)", .malformed),
    no("space", "myapp://auth/c b?code=c1&attempt=att1&\(issQ)", .malformed),
    no("raw NUL", "myapp://auth/cb?code=c1\u{0}&attempt=att1&\(issQ)", .malformed),
    no("non-ASCII", "myapp://auth/cé?code=c1&attempt=att1&\(issQ)", .malformed),
    no("unicode host", "https://bücher.example/cb?code=c1&attempt=att1&\(issQ)", .malformed),
    no("backslash", "myapp://auth\\cb?code=c1&attempt=att1&\(issQ)", .malformed),
    no("NUL in a name", "\(base)?code=c1&attempt=att1&\(issQ)&x%00=1", .malformed),

    // Refused: missing or empty parameters.
    no("no query", base, .missingParameter("attempt")),
    no("empty query", "\(base)?", .missingParameter("code")),
    no("no code", "\(base)?attempt=att1&\(issQ)", .missingParameter("code")),
    no("no attempt", "\(base)?code=c1&\(issQ)", .missingParameter("attempt")),
    no("no iss", "\(base)?code=c1&attempt=att1", .missingParameter("iss")),
    no("no iss on an error", "\(base)?error=access_denied&attempt=att1", .missingParameter("iss")),
    no("empty code", "\(base)?code=&attempt=att1&\(issQ)", .missingParameter("code")),
    no("code without '='", "\(base)?code&attempt=att1&\(issQ)", .missingParameter("code")),
    no("empty attempt", "\(base)?code=c1&attempt=&\(issQ)", .missingParameter("attempt")),
    no("empty iss", "\(base)?code=c1&attempt=att1&iss=", .missingParameter("iss")),
    no("empty error", "\(base)?error=&attempt=att1&\(issQ)", .missingParameter("error")),
    no("names differ in case", "\(base)?Code=c1&attempt=att1&\(issQ)", .missingParameter("code")),

    // Refused: repeated parameters (any parameter, even an ignored one).
    no("code twice", "\(base)?code=c1&code=c2&attempt=att1&\(issQ)", .duplicateParameter("code")),
    no("attempt twice, same value", "\(base)?code=c1&attempt=att1&attempt=att1&\(issQ)", .duplicateParameter("attempt")),
    no("iss twice", "\(base)?code=c1&attempt=att1&\(issQ)&iss=https%3A%2F%2Fevil.example", .duplicateParameter("iss")),
    no("error twice", "\(base)?error=a&error=b&attempt=att1&\(issQ)", .duplicateParameter("error")),
    no("empty code then code", "\(base)?code=&code=c1&attempt=att1&\(issQ)", .duplicateParameter("code")),
    no("encoded name repeats", "\(base)?code=c1&c%6Fde=c2&attempt=att1&\(issQ)", .duplicateParameter("code")),
    no("ignored parameter twice", "\(base)?state=1&state=2&code=c1&attempt=att1&\(issQ)", .duplicateParameter("state")),
    no("two empty pairs", "\(base)?code=c1&&attempt=att1&&\(issQ)", .duplicateParameter("")),

    // Refused: malformed values, code and error together.
    no("NUL in code", "\(base)?code=c%001&attempt=att1&\(issQ)", .invalidParameter("code")),
    no("bad escape in code", "\(base)?code=%zz&attempt=att1&\(issQ)", .invalidParameter("code")),
    no("truncated escape in iss", "\(base)?code=c1&attempt=att1&iss=%", .invalidParameter("iss")),
    no("not UTF-8 in attempt", "\(base)?code=c1&attempt=%FF&\(issQ)", .invalidParameter("attempt")),
    no("newline in iss", "\(base)?code=c1&attempt=att1&iss=https%3A%2F%2Flogin.example.com%0A", .invalidParameter("iss")),
    no("code and error", "\(base)?code=c1&error=access_denied&attempt=att1&\(issQ)", .codeAndError),
]

@Suite struct CallbackParsingTests {
    @Test func tableIsLargeEnough() { #expect(callbackCases.count >= 30) }

    @Test(arguments: callbackCases)
    func parse(_ c: CallbackCase) throws {
        switch c.expected {
        case .parsed(let target, let outcome, let attempt, let issuer):
            let callback = try Callback(parsing: c.url)
            #expect(callback.outcome == outcome)
            #expect(callback.attempt == attempt)
            #expect(callback.issuer == issuer)
            #expect(callback.target == URLParts(splitting: target))
            #expect(callback.target.query == nil && callback.target.fragment == nil)
        case .refused(let refusal):
            #expect(throws: refusal) { try Callback(parsing: c.url) }
        }
    }

    @Test func refusalMessagesNeverRepeatAValue() {
        let secret = "SECRETCODE"
        let urls = [
            "\(base)?code=\(secret)&code=\(secret)&attempt=att1&\(issQ)",
            "\(base)?code=\(secret)%00&attempt=att1&\(issQ)",
            "\(base)?code=\(secret)&error=x&attempt=att1&\(issQ)",
            "\(base)?code=\(secret)&attempt=att1&\(issQ)#\(secret)",
        ]
        for url in urls {
            do {
                _ = try Callback(parsing: url)
                Issue.record("accepted \(url)")
            } catch {
                #expect(!error.description.contains(secret))
            }
        }
    }

    @Test func ruleNames() {
        let rules: [(CallbackRefusal, String)] = [
            (.tooLong, "too-long"), (.malformed, "malformed"), (.hasFragment, "no-fragment"),
            (.hasUserinfo, "no-userinfo"), (.missingParameter("x"), "missing-parameter"),
            (.duplicateParameter("x"), "duplicate-parameter"), (.invalidParameter("x"), "invalid-parameter"),
            (.codeAndError, "code-or-error"),
        ]
        for (refusal, rule) in rules { #expect(refusal.rule == rule) }
    }
}

@Suite struct CallbackBuilderTests {
    @Test func codeURLIsExactlyTheSpecsShape() {
        let url = Callback.url(
            returnURL: "com.example.notes:/callback", outcome: .code("Zk3-_x"), attempt: "att_1", issuer: iss)
        #expect(url == "com.example.notes:/callback?code=Zk3-_x&attempt=att_1&iss=https%3A%2F%2Flogin.example.com")
    }

    @Test func errorURLIsExactlyTheSpecsShape() {
        let url = Callback.url(
            returnURL: "https://app.example.com/cb", outcome: .error("access_denied"), attempt: "att1",
            issuer: "http://127.0.0.1:8080")
        #expect(url == "https://app.example.com/cb?error=access_denied&attempt=att1&iss=http%3A%2F%2F127.0.0.1%3A8080")
    }

    @Test(arguments: [
        Callback.Outcome.code("abc"), .code("a b&c=d#e%f+g"), .code("é"), .error("access_denied"),
    ])
    func builtURLsParseBackAndMatch(_ outcome: Callback.Outcome) throws {
        let registered = try ReturnURL("myapp://auth/callback")
        let text = Callback.url(returnURL: registered.text, outcome: outcome, attempt: "a&b", issuer: iss)
        let callback = try Callback(parsing: text)
        #expect(callback.outcome == outcome)
        #expect(callback.attempt == "a&b")
        #expect(callback.issuer == iss)
        #expect(registered.matches(callback.target))
    }

    @Test func percentEncodeKeepsOnlyUnreserved() {
        #expect(percentEncode("AZaz09-._~") == "AZaz09-._~")
        #expect(percentEncode(" !#$&'()*+,/:;=?@[]%") == "%20%21%23%24%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D%25")
        #expect(percentEncode("é") == "%C3%A9")
    }
}
