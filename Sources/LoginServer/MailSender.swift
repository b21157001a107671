import BrowserLoginProtocol
import CurlSupport
import Foundation

/// One email message: the sign-in email, with its text (and HTML) body.
/// Holds a sign-in code and maybe a sign-in link: never log it.
public struct MailMessage: Sendable, Equatable {
    public var to: String
    public var subject: String
    /// The text part.
    public var body: String
    /// The HTML part; nil: a text-only message.
    public var html: String?
    /// The `From` address and display name.
    public var from: String
    public var fromName: String?

    public init(
        to: String, subject: String, body: String, html: String? = nil, from: String = EmailSettings.defaultFrom,
        fromName: String? = nil
    ) {
        self.to = to
        self.subject = subject
        self.body = body
        self.html = html
        self.from = from
        self.fromName = fromName
    }

    /// The message as Internet mail, with a new `Message-ID` on the sender's domain.
    func rendered(now: Int64) throws -> String {
        let domain = from.split(separator: "@").last.map(String.init) ?? "localhost"
        return MailFormat.render(
            self, date: now, messageId: try Crypto.randomToken(bytes: 18) + "@" + domain,
            boundary: "bl-" + (try Crypto.randomToken(bytes: 18)))
    }
}

/// Sends the sign-in emails: the outbox directory (development, the
/// default), SMTP (`"smtp"` in the configuration), or whatever a program
/// that embeds the server plugs in.
public protocol MailSender: Sendable {
    func send(_ message: MailMessage) throws
}

/// Why a message could not be sent, for the log: never holds the message,
/// the address or a password.
public struct MailDeliveryError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// The default sender: writes each message to `directory`, one file per
/// message (`<millis>-<random>.eml`, mode 0600, written atomically), so a
/// developer or a test can read it.
public struct OutboxMailSender: MailSender {
    public let directory: String
    public init(directory: String) { self.directory = directory }

    public func send(_ message: MailMessage) throws {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let now = Timestamp.now().millisecondsSince1970
        let name = "\(now)-\(try Crypto.randomToken(bytes: 6)).eml"
        let text = try message.rendered(now: now)
        let temporary = directory + "/." + name + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        else { throw CocoaError(.fileWriteUnknown) }
        try FileManager.default.moveItem(atPath: temporary, toPath: directory + "/" + name)
    }

    /// The messages in `directory` addressed to `email`, oldest first: the
    /// text part as `body`, the HTML part as `html`.
    public static func messages(in directory: String, to email: String) -> [MailMessage] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            $0.hasSuffix(".eml") && !$0.hasPrefix(".")
        }.sorted()
        return names.compactMap { name -> MailMessage? in
            guard let data = FileManager.default.contents(atPath: directory + "/" + name),
                let parsed = MailFormat.parse(String(decoding: data, as: UTF8.self)),
                let to = parsed.header("to"), to.lowercased() == email.lowercased()
            else { return nil }
            return MailMessage(
                to: to, subject: parsed.subject, body: parsed.text ?? "", html: parsed.html,
                from: parsed.header("from") ?? "")
        }
    }

    /// The 6-digit code of the newest message to `email`, if any.
    public static func latestCode(in directory: String, to email: String) -> String? {
        messages(in: directory, to: email).last.flatMap { SignInEmail.code(in: $0.body) }
    }

    /// The sign-in link of the newest message to `email`, if it has one.
    public static func latestLink(in directory: String, to email: String) -> String? {
        messages(in: directory, to: email).last.flatMap { SignInEmail.link(in: $0.body) }
    }
}

/// Sends over SMTP with libcurl (docs/server.md, "Email"): STARTTLS (or
/// implicit TLS) unless the configuration says `"tls": "none"` for a
/// loopback server, AUTH when a user name is set. One connection per message.
public struct SMTPMailSender: MailSender {
    let configuration: SMTPConfiguration
    let password: String?

    /// Reads the password (from its file or environment variable) now, so a
    /// missing one stops the server at start-up rather than at the first email.
    public init(_ configuration: SMTPConfiguration, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError)
    {
        self.configuration = configuration
        if let file = configuration.passwordFile {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigurationError(
                    field: "smtp.passwordFile", rule: "readable", message: "cannot read the SMTP password file")
            }
            var text = String(decoding: data, as: UTF8.self)
            while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
            password = text
        } else if let name = configuration.passwordEnv {
            guard let value = environment[name], !value.isEmpty else {
                throw ConfigurationError(
                    field: "smtp.passwordEnv", rule: "set",
                    message: "the environment variable \(name) that holds the SMTP password is not set")
            }
            password = value
        } else {
            password = nil
        }
    }

    public func send(_ message: MailMessage) throws {
        let text = try message.rendered(now: Timestamp.now().millisecondsSince1970)
        let security: CurlSMTPSecurity =
            switch configuration.security {
            case .startTLS: .startTLS
            case .implicitTLS: .implicitTLS
            case .none: .none
            }
        do {
            try CurlSMTP.send(
                CurlSMTPRequest(
                    url: configuration.url, security: security, username: configuration.username, password: password,
                    from: message.from, recipients: [message.to], message: Array(text.utf8), caFile: configuration.caFile,
                    timeoutMilliseconds: Int(configuration.timeoutMillis)))
        } catch {
            throw MailDeliveryError(description: error.description)
        }
    }
}
