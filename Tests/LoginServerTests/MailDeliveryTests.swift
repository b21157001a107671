import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The test SMTP server: aiosmtpd (PyPI, pinned), run by `scripts/smtp` from
/// its virtual environment. Each message it accepts is a `.eml` file (the
/// bytes received) and a `.json` file (the envelope, TLS, the AUTH user).
final class TestSMTPServer {
    static var virtualEnvironment: String {
        let env = ProcessInfo.processInfo.environment
        if let venv = env["BL_SMTP_VENV"], !venv.isEmpty { return venv }
        let home = env["HOME"] ?? getpwuid(getuid()).map { String(cString: $0.pointee.pw_dir) } ?? "/"
        return home + "/.cache/browser-login/smtp-venv"
    }
    static var isInstalled: Bool {
        FileManager.default.isExecutableFile(atPath: virtualEnvironment + "/bin/python")
            && FileManager.default.fileExists(atPath: virtualEnvironment + "/.browser-login-requirements")
    }
    /// `BL_REQUIRE_SMTP` is set (CI): the tests never skip, a missing server fails them.
    static var isRequired: Bool { !(ProcessInfo.processInfo.environment["BL_REQUIRE_SMTP"] ?? "").isEmpty }
    static var shouldRun: Bool { isInstalled || isRequired }

    static let user = "mailer"
    static let password = "s3cret-smtp-Passw0rd"

    let process: SpawnedProcess
    let port: Int
    let mailDirectory: String

    /// `tls`: a certificate and key (STARTTLS offered and required); `auth`: AUTH required.
    init(
        in directory: String, tls: (certificate: String, key: String)? = nil, implicitTLS: Bool = false, auth: Bool = false
    ) throws {
        guard Self.isInstalled else {
            throw HarnessError("the test SMTP server is not installed (run scripts/smtp install)")
        }
        mailDirectory = directory + "/received"
        var arguments = [repositoryRoot + "/scripts/smtp", "serve", "--dir", mailDirectory]
        if let tls { arguments += ["--tls-cert", tls.certificate, "--tls-key", tls.key] }
        if implicitTLS { arguments.append("--implicit-tls") }
        if auth { arguments += ["--user", Self.user, "--password-env", "BL_TEST_SMTP_PASSWORD"] }
        let process = try SpawnedProcess(
            arguments,
            environment: ProcessInfo.processInfo.environment.merging(["BL_TEST_SMTP_PASSWORD": Self.password]) { $1 },
            log: directory + "/smtp.log", name: "test-smtp")
        self.process = process
        var port = 0
        do {
            try waitUntil(30, "the test SMTP server to be ready") {
                if let line = process.output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }) {
                    port = Int(line.dropFirst("ready ".count)) ?? 0
                    return true
                }
                if process.hasExited { throw HarnessError("the SMTP server exited:\n\(process.output)", fatal: true) }
                return false
            }
        } catch {
            _ = process.stop()
            throw error
        }
        self.port = port
    }

    deinit { _ = process.stop() }

    /// The messages received so far: the raw text and the envelope.
    func received() -> [(raw: String, envelope: [String: Any])] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: mailDirectory)) ?? []).filter {
            $0.hasSuffix(".eml")
        }.sorted()
        return names.compactMap { name in
            let base = mailDirectory + "/" + name.dropLast(4)
            guard let raw = try? String(contentsOfFile: base + ".eml", encoding: .utf8),
                let data = FileManager.default.contents(atPath: base + ".json"),
                let envelope = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            else { return nil }
            return (raw, envelope)
        }
    }
}

/// Mail delivery over SMTP to a real SMTP server (aiosmtpd) started by the test.
@Suite(.dedicatedThread, .enabled(if: TestSMTPServer.shouldRun, "the test SMTP server is not installed (scripts/smtp install)"))
struct MailDeliveryTests {
    static let email = "carol@example.org"

    /// A self-signed certificate for 127.0.0.1 and localhost, made by openssl in `directory`.
    func certificate(in directory: String) throws -> (certificate: String, key: String) {
        let certificate = directory + "/smtp-cert.pem"
        let key = directory + "/smtp-key.pem"
        let run = try runProgram(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate, "-days", "2",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ])
        try #require(run.status == 0, "\(run.err)")
        return (certificate, key)
    }

    func smtpServerConfig(_ smtp: [String: Any]) -> [String: Any] {
        [
            "emailRedirectUris": ["{origin}"], "smtp": smtp,
            "email": ["from": "login@example.com", "fromName": "Exämple sign-in"],
        ]
    }

    @Test func theSignInEmailIsDeliveredOverSTARTTLSWithAUTH() throws {
        let directory = try TemporaryDirectory("smtp-test")
        let tls = try certificate(in: directory.path)
        let smtp = try TestSMTPServer(in: directory.path, tls: tls, auth: true)
        let server = try BinaryServer(
            smtpServerConfig([
                "url": "smtp://127.0.0.1:\(smtp.port)", "username": TestSMTPServer.user, "passwordFile": "smtp-password",
                "caFile": tls.certificate,
            ]), files: ["smtp-password": TestSMTPServer.password + "\n"])
        let attempt = try server.attempt()
        let browser = try server.browser()
        try browser.loadPage(attempt.created.authorizeUrl)
        let started = try browser.start(Self.email, redirectUri: attempt.created.authorizeUrl)
        #expect(started.status == 200, "\(started.text)")
        #expect(!FileManager.default.fileExists(atPath: server.outbox), "SMTP replaces the outbox")

        let messages = smtp.received()
        try #require(messages.count == 1)
        let (raw, envelope) = messages[0]
        #expect(envelope["tls"] as? Bool == true)
        #expect(envelope["user"] as? String == TestSMTPServer.user)
        #expect(envelope["mail_from"] as? String == "login@example.com")
        #expect(envelope["rcpt_tos"] as? [String] == [Self.email])
        // Proper MIME: both parts, Date, Message-ID, encoded headers, CRLF.
        let parsed = try #require(MailFormat.parse(raw))
        #expect(parsed.header("From") == "=?utf-8?B?RXjDpG1wbGUgc2lnbi1pbg==?= <login@example.com>")
        #expect(parsed.header("To") == Self.email)
        #expect(parsed.subject == SignInEmail.defaultSubject)
        #expect(parsed.header("MIME-Version") == "1.0")
        #expect(parsed.header("Auto-Submitted") == "auto-generated")
        #expect(parsed.header("Content-Type")?.hasPrefix("multipart/alternative; boundary=") == true)
        let messageId = try #require(parsed.header("Message-ID"))
        #expect(messageId.hasPrefix("<") && messageId.hasSuffix("@example.com>"))
        let date = try #require(parsed.header("Date"))
        #expect(date.hasSuffix(" +0000") && date.split(separator: " ").count == 6, "\(date)")
        #expect(raw.contains("\r\n") && !raw.replacingOccurrences(of: "\r\n", with: "").contains("\n"))
        #expect(raw.split(separator: "\r\n", omittingEmptySubsequences: false).allSatisfy { $0.utf8.count <= 998 })
        let text = try #require(parsed.text)
        let html = try #require(parsed.html)
        let code = try #require(SignInEmail.code(in: text))
        let link = try #require(SignInEmail.link(in: text))
        #expect(link.hasPrefix(attempt.created.authorizeUrl + "#signin_token="))
        #expect(html.contains(code) && html.contains(#"href="\#(link)""#))
        #expect(!raw.contains(TestSMTPServer.password))

        // The delivered code signs in (and so retires the delivered link).
        let verified = try browser.verify(Self.email, code: code)
        #expect(verified.status == 200, "\(verified.text)")
        expectRefusal(try browser.openLink(link, attemptId: attempt.id), .otpExpired)
        server.expectLogHasNone(of: [code, link, TestSMTPServer.password, EmailLinkParts(link)!.verifier])
    }

    @Test func aRefusedPasswordOrAMissingSTARTTLSSendsNothingAndSaysWhy() throws {
        let directory = try TemporaryDirectory("smtp-test")
        let tls = try certificate(in: directory.path)
        let smtp = try TestSMTPServer(in: directory.path, tls: tls, auth: true)
        let wrong = "not-the-password"
        let server = try BinaryServer(
            smtpServerConfig([
                "url": "smtp://127.0.0.1:\(smtp.port)", "username": TestSMTPServer.user,
                "passwordEnv": "BL_TEST_SERVER_SMTP_PASSWORD", "caFile": tls.certificate,
            ]), environment: ["BL_TEST_SERVER_SMTP_PASSWORD": wrong])
        let answer = try server.browser().start(Self.email)
        expectRefusal(answer, .internalError)
        #expect(answer.text.contains("could not be sent"))
        #expect(smtp.received().isEmpty)
        #expect(server.log.contains("refused the user name or password"), "\(server.log)")
        server.expectLogHasNone(of: [wrong, TestSMTPServer.password])

        // A server that does not offer STARTTLS: never sent in the clear.
        let plainDirectory = try TemporaryDirectory("smtp-test")
        let plain = try TestSMTPServer(in: plainDirectory.path)
        let strict = try BinaryServer(smtpServerConfig(["url": "smtp://127.0.0.1:\(plain.port)"]))
        expectRefusal(try strict.browser().start(Self.email), .internalError)
        #expect(plain.received().isEmpty)
        #expect(strict.log.contains("does not offer STARTTLS"), "\(strict.log)")
        // An untrusted certificate (no caFile): refused too.
        let untrusted = try BinaryServer(
            smtpServerConfig([
                "url": "smtp://127.0.0.1:\(smtp.port)", "username": TestSMTPServer.user,
                "passwordEnv": "BL_TEST_SERVER_SMTP_PASSWORD",
            ]), environment: ["BL_TEST_SERVER_SMTP_PASSWORD": TestSMTPServer.password])
        expectRefusal(try untrusted.browser().start(Self.email), .internalError)
        #expect(smtp.received().isEmpty)
        #expect(untrusted.log.contains("certificate is not trusted"), "\(untrusted.log)")
    }

    @Test func tlsNoneDeliversInTheClearToLoopbackOnly() throws {
        let directory = try TemporaryDirectory("smtp-test")
        let smtp = try TestSMTPServer(in: directory.path)
        let server = try BinaryServer(smtpServerConfig(["url": "smtp://127.0.0.1:\(smtp.port)", "tls": "none"]))
        #expect(try server.browser().start(Self.email).status == 200)
        let messages = smtp.received()
        try #require(messages.count == 1)
        #expect(messages[0].envelope["tls"] as? Bool == false)
        let parsed = try #require(MailFormat.parse(messages[0].raw))
        #expect(SignInEmail.code(in: parsed.text ?? "") != nil)
        #expect(SignInEmail.link(in: parsed.text ?? "") == nil, "no target: code-only")
    }

    @Test func smtpsIsTLSFromTheFirstByte() throws {
        let directory = try TemporaryDirectory("smtp-test")
        let tls = try certificate(in: directory.path)
        let smtp = try TestSMTPServer(in: directory.path, tls: tls, implicitTLS: true, auth: true)
        let server = try BinaryServer(
            smtpServerConfig([
                "url": "smtps://localhost:\(smtp.port)", "username": TestSMTPServer.user,
                "passwordEnv": "BL_TEST_SERVER_SMTP_PASSWORD", "caFile": tls.certificate,
            ]), environment: ["BL_TEST_SERVER_SMTP_PASSWORD": TestSMTPServer.password])
        let answer = try server.browser().start(Self.email)
        #expect(answer.status == 200, "\(answer.text) \(server.log)")
        let messages = smtp.received()
        try #require(messages.count == 1)
        #expect(messages[0].envelope["tls"] as? Bool == true)
        #expect(messages[0].envelope["user"] as? String == TestSMTPServer.user)
        server.expectLogHasNone(of: [TestSMTPServer.password])
    }
}
