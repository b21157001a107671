import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The server's sign-in methods (docs/server.md "Sign-in methods"):
/// `GET browser/config`, email sign-in turned off, code-only templates and
/// allow-list entries with a path. On the real server over HTTP.
@Suite(.dedicatedThread) struct SignInMethodsTests {
    static let email = "carol@example.org"

    func config(_ server: TestServer, _ browser: ScriptedBrowser? = nil) throws -> [String: Any] {
        let answer =
            try browser?.request("GET", server.base + "/browser/config", stateChanging: false)
            ?? server.get(server.base + "/browser/config")
        #expect(answer.status == 200, "\(answer.text)")
        #expect(answer.header("cache-control") == "no-store")
        return try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
    }

    /// A provider nothing answers for (a closed loopback port).
    static func unreachableProvider(port: Int) throws -> UpstreamProviderConfiguration {
        let closed = try freeLoopbackPort()
        return UpstreamProviderConfiguration(
            name: "corp", issuer: "http://127.0.0.1:\(closed)/o", clientId: "login-server",
            redirectUris: ["http://127.0.0.1:\(port)/browser-login/browser/upstream/callback/corp"])
    }

    @Test func theConfigurationAnswersAnyoneWithTheMethodsOffered() throws {
        let plain = try TestServer()
        let answer = try config(plain)
        #expect(answer["name"] as? String == "127.0.0.1")
        #expect(answer["mode"] as? String == "open")
        #expect(answer["waitlistEnabled"] as? Bool == false)
        #expect(answer["emailSignInEnabled"] as? Bool == true)
        #expect(answer["passkeyEnabled"] as? Bool == false)
        #expect((answer["passkeyRpIds"] as? [String]) == [])
        #expect((answer["upstreamProviders"] as? [Any])?.isEmpty == true)
        #expect(
            Set(answer.keys) == [
                "name", "mode", "waitlistEnabled", "emailSignInEnabled", "passkeyEnabled", "passkeyRpIds", "upstreamProviders",
            ])

        let server = try TestServer.onAFreePort { c, port in
            c.name = "Example Sign-in"
            c.signupMode = .invite
            c.waitlist = true
            c.passkeyRpIds = ["login.example.com", "localhost"]
            c.upstreamProviders = [try! Self.unreachableProvider(port: port)]
        }
        let configured = try config(server)
        #expect(configured["name"] as? String == "Example Sign-in")
        #expect(configured["mode"] as? String == "invite")
        #expect(configured["waitlistEnabled"] as? Bool == true)
        #expect(configured["passkeyEnabled"] as? Bool == true)
        #expect((configured["passkeyRpIds"] as? [String]) == ["login.example.com", "localhost"])
        let providers = try #require(configured["upstreamProviders"] as? [[String: Any]])
        #expect(providers.count == 1)
        #expect(providers.first?["id"] as? String == "corp" && providers.first?["name"] as? String == "corp")
        #expect(providers.first?["usable"] as? Bool == true)
        // Only GET; a browser's cookies change nothing.
        expectError(
            try RawHTTP.postJSON(server.base + "/browser/config", "{}", headers: [("Origin", server.origin)]),
            .methodNotAllowed)
    }

    /// A provider that could not be reached is `usable: false` for a minute, then offered again.
    @Test func aProviderThatCannotBeReachedIsNotUsableForAMinute() throws {
        let server = try TestServer.onAFreePort { c, port in
            c.upstreamProviders = [try! Self.unreachableProvider(port: port)]
        }
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let started = try browser.post("/browser/upstream/start", ["provider": "corp", "attemptId": attempt.id])
        #expect(started.status == 502 && started.errorCode == "UPSTREAM_UNAVAILABLE", "\(started.text)")
        func usable() throws -> Bool? {
            (try config(server)["upstreamProviders"] as? [[String: Any]])?.first?["usable"] as? Bool
        }
        #expect(try usable() == false)
        server.time.advance(59_000)
        #expect(try usable() == false)
        server.time.advance(1_000)
        #expect(try usable() == true)
    }

    @Test func emailSignInTurnedOffRefusesItsRoutes() throws {
        let server = try TestServer.onAFreePort { c, port in
            c.emailSignInEnabled = false
            c.upstreamProviders = [try! Self.unreachableProvider(port: port)]
            c.emailRedirectUris = ["http://127.0.0.1:\(port)"]
        }
        #expect(try config(server)["emailSignInEnabled"] as? Bool == false)
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        expectRefusal(try browser.start(Self.email, redirectUri: attempt.created.authorizeUrl), .emailSignInDisabled)
        #expect(ServerErrorCode.emailSignInDisabled.httpStatus == 403)
        expectRefusal(try browser.start(Self.email), .emailSignInDisabled)
        // Test accounts sign in through the same routes: off too.
        expectRefusal(try browser.verify(testBase, code: "000000"), .emailSignInDisabled)
        expectRefusal(try browser.openLink("x#signin_token=a.b", attemptId: attempt.id), .emailSignInDisabled)
        #expect(server.mailCount == 0)
        #expect(try browser.currentSession() == nil)
        // The same-origin rule still comes first.
        expectRefusal(
            try RawHTTP.postJSON(server.base + "/browser/signin/start", #"{"email":"a@example.org"}"#), .originMismatch)
    }

    @Test func aServerWithNoSignInMethodRefusesToStart() throws {
        func refusal(_ adjust: @escaping (inout ServerConfiguration) -> Void) -> ConfigurationError? {
            do {
                _ = try TestServer(adjust)
                return nil
            } catch let error as ConfigurationError {
                return error
            } catch {
                Issue.record("unexpected \(error)")
                return nil
            }
        }
        let none = refusal { $0.emailSignInEnabled = false }
        #expect(none?.field == "emailSignInEnabled" && none?.rule == "at-least-one-method", "\(String(describing: none))")
        // Passkeys count as a method only with a relying party.
        #expect(
            refusal {
                $0.emailSignInEnabled = false; $0.passkeyRpIds = []
            } != nil)
        #expect(
            refusal {
                $0.emailSignInEnabled = false; $0.passkeyRpIds = ["localhost"]
            } == nil)
        for (rpId, rule) in [
            ("127.0.0.1", "not-ip"), ("::1", "not-ip"), ("[::1]", "not-ip"), ("10.1.2.3", "not-ip"),
            ("Login.Example.com", "host-name"), ("https://login.example.com", "host-name"),
            ("login.example.com:443", "host-name"),
            ("", "host-name"), ("-bad.example.com", "host-name"),
        ] {
            let error = refusal { $0.passkeyRpIds = [rpId] }
            #expect(error?.field == "passkeyRpIds[0]" && error?.rule == rule, "\(rpId): \(String(describing: error))")
        }
        #expect(refusal { $0.passkeyRpIds = ["localhost", "localhost"] }?.rule == "unique")
        #expect(refusal { $0.name = "" }?.field == "name")
    }

    /// The real binary: exit status 78 and the field named, before anything listens.
    @Test func theBinaryRefusesNoMethodAndIPRelyingParties() throws {
        let directory = try TemporaryDirectory("methods-config-test")
        try ServerBinary.expectRefusals(
            [
                (["emailSignInEnabled": false], "emailSignInEnabled: at-least-one-method"),
                (["passkeyRpIds": ["192.168.1.10"]], "passkeyRpIds[0]: not-ip: '192.168.1.10' is an IP address"),
                (["emailSignInEnabled": "no"], "emailSignInEnabled: type"),
            ], in: directory.path)
    }

    // MARK: Code-only templates

    static let codeOnlyText = "Your sign-in code is {{code}}\n"
    static let codeOnlyHTML = "<p>Your sign-in code is <b>{{code}}</b></p>"

    /// Templates without the link section: no link, whatever the target and the allow-list say.
    @Test func codeOnlyTemplatesNeverCarryALink() throws {
        let server = try TestServer.onAFreePort { c, port in
            c.emailRedirectUris = ["http://127.0.0.1:\(port)"]
            c.email.textTemplate = Self.codeOnlyText
            c.email.htmlTemplate = Self.codeOnlyHTML
        }
        let attempt = try NativeAttempt.create(server)
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        // A covered target, and one the list does not cover: both code-only, neither refused.
        for target in [attempt.created.authorizeUrl, "https://elsewhere.example.com/page"] {
            let started = try browser.start(Self.email, redirectUri: target)
            #expect(started.status == 200 && started.text.contains(#""linkSent":false"#), "\(started.text)")
            let message = try #require(server.mail(to: Self.email).last)
            #expect(SignInEmail.link(in: message.body) == nil)
            #expect(!message.body.contains("signin_token") && !(message.html ?? "").contains("signin_token"))
        }
        let message = try #require(server.mail(to: Self.email).last)
        #expect(message.body.hasPrefix("Your sign-in code is "))
        let code = try #require(SignInEmail.code(in: message.body))
        #expect(try browser.verify(Self.email, code: code).status == 200)
    }

    @Test func templateLinkSectionRules() throws {
        func refusal(text: String, html: String) -> ConfigurationError? {
            do {
                _ = try TestServer { c in
                    c.email.textTemplate = text
                    c.email.htmlTemplate = html
                }
                return nil
            } catch {
                return error as? ConfigurationError
            }
        }
        #expect(refusal(text: Self.codeOnlyText, html: Self.codeOnlyHTML) == nil)
        #expect(refusal(text: "{{code}}", html: "{{code}}") == nil)
        // One template with the section, the other without: refused, named.
        let mixed = refusal(text: SignInEmail.defaultText, html: Self.codeOnlyHTML)
        #expect(mixed?.field == "email.htmlTemplate" && mixed?.rule == "link-section", "\(String(describing: mixed))")
        // The link outside a section, a section without the link, an unclosed section.
        for text in ["{{code}} {{link}}", "{{code}} {{#link}}open it{{/link}}", "{{code}} {{#link}}{{link}}"] {
            let error = refusal(text: text, html: SignInEmail.defaultHTML)
            #expect(
                error?.field == "email.textTemplate" && error?.rule == "placeholders", "\(text): \(String(describing: error))")
        }
        #expect(refusal(text: "no code here", html: Self.codeOnlyHTML)?.rule == "placeholders")
    }

    // MARK: Allow-list entries with a path

    /// `http://localhost:5173/oauth/callback` is the origin `http://localhost:5173`:
    /// any page there may receive a link, another port may not.
    @Test func allowListEntriesWithAPathMatchByOrigin() throws {
        let server = try TestServer { c in
            c.emailRedirectUris = ["http://localhost:5173/oauth/callback", "http://localhost", "https://App.Example.com/x/y"]
        }
        let browser = try server.browser()
        for target in [
            "http://localhost:5173/oauth/callback", "http://localhost:5173/other/page?x=1", "http://localhost:5173",
            "http://localhost/", "http://localhost:80/signin", "https://app.example.com/",
        ] {
            let started = try browser.start(Self.email, redirectUri: target)
            #expect(started.status == 200 && started.text.contains(#""linkSent":true"#), "\(target): \(started.text)")
            let message = try #require(server.mail(to: Self.email).last)
            let link = try #require(SignInEmail.link(in: message.body))
            #expect(link.hasPrefix(target + "#signin_token="))
        }
        for target in ["http://localhost:5174/oauth/callback", "http://127.0.0.1:5173/oauth/callback", "https://localhost/"] {
            expectRefusal(try browser.start(Self.email, redirectUri: target), .invalidRedirectURI)
        }
        // Still refused: a query, a fragment, a user; http on a host that is not loopback.
        for entry in [
            "http://localhost:5173/cb?x=1", "http://localhost:5173/cb#top", "http://me@localhost:5173/cb",
            "http://app.example.com/cb",
        ] {
            #expect(throws: ConfigurationError.self, "\(entry)") { _ = try TestServer { $0.emailRedirectUris = [entry] } }
        }
    }

    /// The hosted page served at `http://localhost:PORT` (the development
    /// origin), its allow-list entry written with a path: the email's link
    /// lands on the page and the native attempt continues.
    @Test func aLocalhostPageWithAPathEntryGetsItsLinkAndContinues() throws {
        let server = try TestServer.onAFreePort { c, port in
            c.publicOrigin = "http://localhost:\(port)"
            c.emailRedirectUris = ["http://localhost:\(port)/browser-login/browser/login"]
        }
        let port = server.server.configuration.port
        #expect(server.origin == "http://localhost:\(port)")
        let attempt = try NativeAttempt.create(server)
        #expect(attempt.created.authorizeUrl.hasPrefix("http://localhost:\(port)/browser-login/browser/login?attempt="))
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let started = try browser.start(Self.email, redirectUri: attempt.created.authorizeUrl)
        #expect(started.status == 200 && started.text.contains(#""linkSent":true"#), "\(started.text)")
        let message = try #require(server.mail(to: Self.email).last)
        let link = try #require(SignInEmail.link(in: message.body))
        #expect(link.hasPrefix(attempt.created.authorizeUrl + "#signin_token="))
        #expect(try browser.openLink(link, attemptId: attempt.id).status == 200)
        let session = try #require(try browser.currentSession())
        let callback = try browser.authorize(attemptId: attempt.id, decision: .continue, expectedSessionId: session.sessionId)
        let answer = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
        #expect(answer.status == 200, "\(answer.text)")
        #expect(try answer.decode(ExchangeResponse.self).session.account.email == Self.email)
    }
}

extension TestServer {
    /// How many messages the outbox holds, for anyone.
    var mailCount: Int { (try? FileManager.default.contentsOfDirectory(atPath: outbox).count) ?? 0 }

    /// The messages the outbox holds for `email`.
    func mail(to email: String) -> [MailMessage] { OutboxMailSender.messages(in: outbox, to: email) }
}
