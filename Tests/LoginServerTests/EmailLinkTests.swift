import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The one sign-in email (docs/server.md, "Email"): a code and, for a
/// redirect target `emailRedirectUris` covers, a sign-in link; either one
/// signs in once. On the real server binary over HTTP.
@Suite(.dedicatedThread) struct EmailLinkTests {
    static let email = "alice@example.org"

    /// A server whose allow-list covers its own origin (so the hosted page's links).
    func linkServer(_ extra: [String: Any] = [:]) throws -> BinaryServer {
        try BinaryServer(["emailRedirectUris": ["{origin}"]].merging(extra) { $1 })
    }

    /// Browser loads the attempt's page (binding it) and asks for the email, the page's URL as the target.
    func requestEmail(_ server: BinaryServer, _ browser: ScriptedBrowser, _ attempt: NativeAttempt) throws -> (
        code: String, link: String
    ) {
        try browser.loadPage(attempt.created.authorizeUrl)
        let started = try browser.start(Self.email, redirectUri: attempt.created.authorizeUrl)
        #expect(started.status == 200, "\(started.text)")
        #expect(started.text.contains(#""linkSent":true"#))
        let message = try #require(server.mail(to: Self.email).last)
        let code = try #require(SignInEmail.code(in: message.body))
        let link = try #require(SignInEmail.link(in: message.body))
        return (code, link)
    }

    @Test func theLinkSignsInOnceInTheBrowserWhereSignInStartedAndRetiresTheCode() throws {
        let server = try linkServer()
        let attempt = try server.attempt()
        let browser = try server.browser()
        let (code, link) = try requestEmail(server, browser, attempt)
        // ONE email, carrying both, in both parts.
        let messages = server.mail(to: Self.email)
        #expect(messages.count == 1)
        let message = try #require(messages.first)
        #expect(link.hasPrefix(attempt.created.authorizeUrl + "#signin_token="))
        let html = try #require(message.html)
        #expect(html.contains(code) && html.contains(#"href="\#(link)""#))
        #expect(message.body.contains("Your sign-in code is \(code)"))

        let signedIn = try browser.openLink(link, attemptId: attempt.id)
        #expect(signedIn.status == 200, "\(signedIn.text)")
        #expect(try signedIn.decode(BrowserSessionInfo.self).authMethod == "email")
        // It continues the native attempt: Continue, then the exchange.
        let session = try #require(try browser.currentSession())
        let callback = try browser.authorize(
            attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId)
        let issued = try server.exchange(attempt, callback: callback)
        #expect(issued.session.authMethod == "email" && issued.session.account.email == Self.email)

        // One email signs in once: the link again, and the code after the link, fail.
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpExpired)
        expectRefusal(try server.browser().verify(Self.email, code: code), .otpExpired)
        server.expectLogHasNone(of: [code, link, EmailLinkParts(link)!.selector, EmailLinkParts(link)!.verifier])
    }

    @Test func theCodeRetiresTheLink() throws {
        let server = try linkServer()
        let attempt = try server.attempt()
        let browser = try server.browser()
        let (code, link) = try requestEmail(server, browser, attempt)
        let verified = try browser.verify(Self.email, code: code)
        #expect(verified.status == 200, "\(verified.text)")
        #expect(try verified.decode(BrowserSessionInfo.self).authMethod == "email")
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpExpired)
        // A new request replaces the email: the old link is gone, the new one works.
        let (_, second) = try requestEmail(server, browser, attempt)
        #expect(second != link)
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpExpired)
        #expect(try browser.openLink(second, attemptId: attempt.id).status == 200)
        server.expectLogHasNone(of: [code, link, second])
    }

    @Test func aLinkOpenedInAnotherBrowserDoesNotSignInThereAndTheCodeStillWorks() throws {
        let server = try linkServer()
        let attempt = try server.attempt()
        let browser = try server.browser()
        let (code, link) = try requestEmail(server, browser, attempt)
        // A second cookie jar: another browser (the email opened on a phone, say).
        let other = try server.browser()
        try other.loadPage(attempt.created.authorizeUrl)  // the page is already bound: no binding cookie here
        expectRefusal(try other.openLink(link, attemptId: attempt.id), .browserMismatch)
        expectRefusal(try other.openLink(link, attemptId: nil), .browserMismatch)
        #expect(try other.currentSession() == nil)
        // Neither consumed nor counted: five refusals later the code still signs the first browser in.
        for _ in 0..<5 { expectRefusal(try other.openLink(link, attemptId: attempt.id), .browserMismatch) }
        let verified = try browser.verify(Self.email, code: code)
        #expect(verified.status == 200, "\(verified.text)")
        let session = try #require(try browser.currentSession())
        let callback = try browser.authorize(
            attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId)
        _ = try server.exchange(attempt, callback: callback)
        expectRefusal(try other.openLink(link, attemptId: attempt.id), .otpExpired)
        server.expectLogHasNone(of: [code, link])
    }

    @Test func wrongLinkTokensCountWithWrongCodes() throws {
        let server = try linkServer()
        let attempt = try server.attempt()
        let browser = try server.browser()
        let (code, link) = try requestEmail(server, browser, attempt)
        let parts = try #require(EmailLinkParts(link))
        let forged = parts.target + "#signin_token=" + parts.selector + "." + String(parts.verifier.reversed())
        expectRefusal(try browser.verify(Self.email, code: code == "111111" ? "222222" : "111111"), .otpInvalid)
        expectRefusal(try browser.verify(Self.email, code: code == "333333" ? "444444" : "333333"), .otpInvalid)
        expectRefusal(try browser.openLink(forged, attemptId: attempt.id), .otpInvalid)
        expectRefusal(try browser.openLink(forged, attemptId: attempt.id), .otpInvalid)
        // The fifth wrong try, code or link, retires the email.
        expectRefusal(try browser.openLink(forged, attemptId: attempt.id), .otpMaxAttempts)
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpMaxAttempts)
        expectRefusal(try browser.verify(Self.email, code: code), .otpMaxAttempts)
        // A damaged token and an unknown selector.
        expectRefusal(try browser.post("/browser/signin/link", ["token": "no-dot"]), .otpInvalid)
        expectRefusal(try browser.post("/browser/signin/link", ["token": "unknown.selector"]), .otpExpired)
        #expect(try browser.currentSession() == nil)
        server.expectLogHasNone(of: [code, link])
    }

    @Test func theLinkExpiresWithTheCode() throws {
        let server = try linkServer(["signInCodeLifetimeMillis": 1500])
        let attempt = try server.attempt()
        let browser = try server.browser()
        let (code, link) = try requestEmail(server, browser, attempt)
        #expect(server.mail(to: Self.email).last?.body.contains("valid for 1 minutes") == true)
        usleep(2_000_000)
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpExpired)
        expectRefusal(try browser.verify(Self.email, code: code), .otpExpired)
        #expect(try browser.currentSession() == nil)
    }

    // MARK: The allow-list fails closed

    @Test func noListGivesCodeOnlyEmailWhateverTheTarget() throws {
        let server = try BinaryServer()
        let attempt = try server.attempt()
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        for target in [attempt.created.authorizeUrl, "https://elsewhere.example/x", "not a url"] {
            let answer = try browser.start(Self.email, redirectUri: target)
            #expect(answer.status == 200 && answer.text.contains(#""linkSent":false"#), "\(answer.text)")
        }
        let messages = server.mail(to: Self.email)
        #expect(messages.count == 3)
        for message in messages {
            #expect(SignInEmail.code(in: message.body) != nil)
            #expect(SignInEmail.link(in: message.body) == nil && !message.body.contains("signin_token"))
            #expect(message.html?.contains("signin_token") == false && message.html?.contains("href") == false)
        }
        // An empty list is no list.
        let empty = try BinaryServer(["emailRedirectUris": [String]()])
        let answer = try empty.browser().start(Self.email, redirectUri: "https://elsewhere.example/x")
        #expect(answer.status == 200 && answer.text.contains(#""linkSent":false"#))
    }

    @Test func aTargetTheListDoesNotCoverRefusesTheWholeRequest() throws {
        let server = try BinaryServer([
            "emailRedirectUris": ["{origin}", "https://app.example.com", "com.example.app://signin", "com.example.bare:"]
        ])
        let browser = try server.browser()
        let refused = [
            "http://127.0.0.1:\(server.port + 1)/browser-login/browser/login",  // another port
            "http://localhost:\(server.port)/browser-login/browser/login",  // another host
            "https://127.0.0.1:\(server.port)/",  // another scheme
            "https://app.example.com:8443/welcome",  // another port on a listed host
            "https://evil.example.com/",
            "https://app.example.com.evil.example/",
            "http://app.example.com/",  // http is not https
            "com.example.app://other/path",  // another authority
            "com.example.other://signin",  // another scheme
            "https://user@app.example.com/",  // userinfo
            "https://app.example.com/#x",  // a fragment (the token goes there)
            "/relative", "", "javascript:alert(1)",
        ]
        for target in refused {
            let answer = try browser.start(Self.email, redirectUri: target)
            #expect(answer.status == 400)
            expectRefusal(answer, .invalidRedirectURI)
        }
        // Never a silent code-only fallback: nothing was stored or sent.
        #expect(server.mail(to: Self.email).isEmpty)
        expectRefusal(try browser.verify(Self.email, code: "123456"), .otpExpired)
        // Covered: by origin (case and the default port aside), by scheme and authority.
        let covered = [
            "HTTP://127.0.0.1:\(server.port)/browser-login/browser/login?attempt=x",
            "https://APP.example.com:443/welcome?a=b", "https://app.example.com",
            "com.example.app://SIGNIN/done", "COM.EXAMPLE.APP://signin", "com.example.bare:/callback",
        ]
        for target in covered {
            let answer = try browser.start(Self.email, redirectUri: target)
            #expect(answer.status == 200 && answer.text.contains(#""linkSent":true"#), "\(target): \(answer.text)")
            let last = try #require(server.mail(to: Self.email).last)
            let link = try #require(SignInEmail.link(in: last.body))
            #expect(link.hasPrefix(target + "#signin_token="))
        }
        // No target: code-only email, the list not consulted.
        let plain = try browser.start(Self.email)
        #expect(plain.status == 200 && plain.text.contains(#""linkSent":false"#))
        let last = try #require(server.mail(to: Self.email).last)
        #expect(SignInEmail.link(in: last.body) == nil)
        #expect(server.mail(to: Self.email).count == covered.count + 1)
    }

    @Test func invalidAllowListsAndMailSettingsStopStartUp() throws {
        let directory = try TemporaryDirectory("mail-config-test")
        let cases: [([String: Any], String)] = [
            (["emailRedirectUris": ["https://app.example.com/callback#top"]], "emailRedirectUris[0]: origin"),
            (["emailRedirectUris": ["http://app.example.com"]], "emailRedirectUris[0]: origin"),
            (["emailRedirectUris": ["https://ok.example.com", "javascript://x"]], "emailRedirectUris[1]: scheme"),
            (["emailRedirectUris": ["https://app.example.com?x=1"]], "emailRedirectUris[0]: origin"),
            (["smtp": ["url": "smtp://mail.example.com:587"]], "email.from: required"),
            (["smtp": ["url": "http://mail.example.com"], "email": ["from": "a@example.com"]], "smtp.url: url"),
            (
                ["smtp": ["url": "smtp://mail.example.com", "tls": "none"], "email": ["from": "a@example.com"]],
                "smtp.tls: loopback-only"
            ),
            (
                ["smtp": ["url": "smtps://mail.example.com", "tls": "starttls"], "email": ["from": "a@example.com"]],
                "smtp.tls: scheme"
            ),
            (
                ["smtp": ["url": "smtp://mail.example.com", "username": "u"], "email": ["from": "a@example.com"]],
                "smtp.passwordFile: required"
            ),
            (
                [
                    "smtp": ["url": "smtp://mail.example.com", "username": "u", "passwordFile": "p", "passwordEnv": "P"],
                    "email": ["from": "a@example.com"],
                ], "smtp.passwordFile: one-of"
            ),
            (["smtp": ["url": "smtp://mail.example.com", "port": 25]], "smtp.port: known-member"),
            (["email": ["from": "not an address"]], "email.from: address"),
            (["email": ["subject": "two\nlines"]], "email.subject: text"),
            (["email": ["textTemplate": "missing.txt"]], "email.textTemplate: readable"),
            (["email": ["textTemplate": "no-code.txt"]], "email.textTemplate: placeholders"),
            (["email": ["htmlTemplate": "unknown.html"]], "email.htmlTemplate: placeholders"),
        ]
        try Data("Hello {{#link}}{{link}}{{/link}}".utf8).write(to: directory.url.appendingPathComponent("no-code.txt"))
        try Data("{{code}} {{#link}}{{link}}{{/link}} {{name}}".utf8).write(
            to: directory.url.appendingPathComponent("unknown.html"))
        try ServerBinary.expectRefusals(cases, in: directory.path)
        // An SMTP password from an unset variable stops start-up too, naming the variable, not a value.
        var config: [String: Any] = [
            "database": "server.sqlite",
            "clients": [["clientId": confirmClient, "appName": "Notes", "returnUrls": [confirmReturn], "policy": "confirm"]],
            "smtp": ["url": "smtp://127.0.0.1:1", "username": "u", "passwordEnv": "BL_TEST_UNSET_SMTP_PASSWORD"],
            "email": ["from": "login@example.com"],
        ]
        config["port"] = 0
        let file = directory.path + "/server.json"
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        let run = try ServerBinary.run(["serve", "--config", file])
        #expect(run.status == 78 && run.err.contains("smtp.passwordEnv: set"), "\(run.err)")
    }

    @Test func templatesFromFilesAreUsed() throws {
        let server = try BinaryServer(
            [
                "emailRedirectUris": ["{origin}"],
                "email": [
                    "from": "login@example.com", "fromName": "Exämple sign-in", "subject": "Dein Anmeldecode",
                    "textTemplate": "text.txt", "htmlTemplate": "mail.html",
                ],
            ],
            files: [
                "text.txt": "Code: {{code}} für {{email}}{{#link}}\nLink: {{link}}{{/link}}\n",
                "mail.html": "<p>{{code}}</p>{{#link}}<a href=\"{{link}}\">go</a>{{/link}}<p>{{email}}</p>\n",
            ])
        let attempt = try server.attempt()
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        #expect(try browser.start(Self.email, redirectUri: attempt.created.authorizeUrl).status == 200)
        let message = try #require(server.mail(to: Self.email).last)
        #expect(message.subject == "Dein Anmeldecode")
        #expect(message.from == "=?utf-8?B?RXjDpG1wbGUgc2lnbi1pbg==?= <login@example.com>")
        let link = try #require(SignInEmail.link(in: message.body))
        #expect(message.body.hasPrefix("Code: ") && message.body.contains("für \(Self.email)\nLink: \(link)"))
        #expect(message.html?.contains(#"<a href="\#(link)">go</a>"#) == true)
        // Without a link, the section is dropped.
        #expect(try browser.start(Self.email).status == 200)
        let plain = try #require(server.mail(to: Self.email).last)
        #expect(!plain.body.contains("Link:") && plain.html?.contains("<a ") == false)
    }

    @Test func theServerTellsSystemdItIsReady() throws {
        let directory = try TemporaryDirectory("notify-test")
        let socket = try NotifySocket(path: directory.path + "/notify")
        let server = try BinaryServer(environment: ["NOTIFY_SOCKET": socket.path])
        var messages: [String] = []
        let deadline = nowNanos() + 10_000_000_000
        while nowNanos() < deadline, !messages.contains(where: { $0.contains("READY=1") }) {
            if let message = socket.receive(timeoutMilliseconds: 200) { messages.append(message) }
        }
        let ready = try #require(messages.first { $0.contains("READY=1") })
        #expect(ready.contains("STATUS=listening on \(server.origin)"))
        // It answers by then.
        #expect(try RawHTTP.send("GET", server.base + "/health").status == 200)
        #expect(exitStatus(server.process.stop()) == 0)
        var stopping = false
        while let message = socket.receive(timeoutMilliseconds: 500) { stopping = stopping || message.contains("STOPPING=1") }
        #expect(stopping)
    }
}
