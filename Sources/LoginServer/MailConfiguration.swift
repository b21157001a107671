import BrowserLoginProtocol
import CurlSupport
import Foundation

/// The sign-in email's sender and templates (`"email"` in the configuration file).
public struct EmailSettings: Sendable, Equatable {
    public static let defaultFrom = "browser-login-server@localhost"
    /// The `From` address (and the SMTP envelope sender). Set it whenever `smtp` is set.
    public var from = EmailSettings.defaultFrom
    /// The `From` display name, e.g. "Example sign-in".
    public var fromName: String?
    public var subject = SignInEmail.defaultSubject
    /// The templates' text (the file's contents when the configuration names one).
    public var textTemplate = SignInEmail.defaultText
    public var htmlTemplate = SignInEmail.defaultHTML
    public init() {}

    /// False when the templates have no link section (code-only mail): no email then carries a link.
    public var carriesLinks: Bool { SignInEmail.hasLinkSection(textTemplate) && SignInEmail.hasLinkSection(htmlTemplate) }
}

/// Mail delivery over SMTP (`"smtp"` in the configuration file); nil: the outbox directory.
public struct SMTPConfiguration: Sendable, Equatable {
    public enum Security: String, Sendable, Equatable {
        /// `smtp://`: STARTTLS, required.
        case startTLS = "starttls"
        /// `smtps://`: TLS from the first byte.
        case implicitTLS = "implicit"
        /// No TLS: only to a loopback server, for testing.
        case none
    }

    /// `smtp://host[:port]` (STARTTLS, port 587 for submission) or `smtps://host[:port]` (port 465).
    public var url: String
    /// nil: from the scheme (`starttls` for smtp, `implicit` for smtps).
    public var tls: Security?
    public var username: String?
    /// The password: a file holding it (a trailing newline is dropped), or the
    /// name of an environment variable holding it. Never in the configuration itself.
    public var passwordFile: String?
    public var passwordEnv: String?
    /// A PEM file of CAs to trust for the SMTP server instead of the system's.
    public var caFile: String?
    public var timeoutMillis: Int64 = 30_000

    public init(url: String) { self.url = url }

    public var security: Security { tls ?? (url.lowercased().hasPrefix("smtps:") ? .implicitTLS : .startTLS) }
}

extension ServerConfiguration {
    /// The rules of `emailRedirectUris`, `email` and `smtp`.
    func validateMail() throws(ConfigurationError) {
        func fail(_ field: String, _ rule: String, _ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: rule, message: message)
        }
        for (i, entry) in emailRedirectUris.enumerated() {
            do { _ = try EmailRedirectEntry(entry) } catch { throw fail("emailRedirectUris[\(i)]", error.rule, error.message) }
        }
        if !EmailSettings.isPlainAddress(email.from) {
            throw fail("email.from", "address", "the sender is a plain address such as login@example.com")
        }
        if smtp != nil && email.from == EmailSettings.defaultFrom {
            throw fail("email.from", "required", "with smtp, set email.from to the address the sign-in email comes from")
        }
        for (field, text) in [("email.fromName", email.fromName ?? "x"), ("email.subject", email.subject)] {
            if text.isEmpty || text.count > 200 || text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                throw fail(field, "text", "one line of 1 to 200 characters")
            }
        }
        try SignInEmail.check(email.textTemplate, field: "email.textTemplate")
        try SignInEmail.check(email.htmlTemplate, field: "email.htmlTemplate")
        if SignInEmail.hasLinkSection(email.textTemplate) != SignInEmail.hasLinkSection(email.htmlTemplate) {
            throw fail(
                "email.htmlTemplate", "link-section",
                "the text and the HTML template both keep the {{#link}} section, or neither does (code-only mail)")
        }
        guard let smtp else { return }
        guard let parts = URLParts(splitting: smtp.url), ["smtp", "smtps"].contains(parts.scheme.lowercased()),
            let host = parts.host, !host.isEmpty, !parts.hasUserinfo, parts.path.isEmpty || parts.path == "/",
            parts.query == nil, parts.fragment == nil,
            parts.portText.map({ !$0.isEmpty && $0.allSatisfy(\.isNumber) && (1...65535).contains(Int($0) ?? 0) }) ?? true
        else {
            throw fail(
                "smtp.url", "url",
                "write smtp://host[:port] (STARTTLS) or smtps://host[:port] (implicit TLS), without user, path or query")
        }
        let implicit = parts.scheme.lowercased() == "smtps"
        switch smtp.tls {
        case .startTLS? where implicit, .none? where implicit:
            throw fail("smtp.tls", "scheme", "smtps:// is implicit TLS; leave tls out or write \"implicit\"")
        case .implicitTLS? where !implicit:
            throw fail("smtp.tls", "scheme", "implicit TLS is the smtps:// scheme")
        case .none? where !CurlLoopback.isLoopback(host: host):
            throw fail("smtp.tls", "loopback-only", "\"tls\": \"none\" is allowed only for a loopback SMTP server (testing)")
        default: break
        }
        if smtp.passwordFile != nil && smtp.passwordEnv != nil {
            throw fail("smtp.passwordFile", "one-of", "give the password either in a file or in an environment variable")
        }
        if smtp.username == nil && (smtp.passwordFile != nil || smtp.passwordEnv != nil) {
            throw fail("smtp.username", "required", "a password needs a user name")
        }
        if let username = smtp.username {
            if username.isEmpty || username.unicodeScalars.contains(where: { $0.value < 0x20 }) {
                throw fail("smtp.username", "text", "the user name is one line of text")
            }
            if smtp.passwordFile == nil && smtp.passwordEnv == nil {
                throw fail("smtp.passwordFile", "required", "AUTH needs a password: passwordFile or passwordEnv")
            }
        }
        guard (1000...300_000).contains(smtp.timeoutMillis) else {
            throw fail("smtp.timeoutMillis", "range", "the SMTP timeout is 1000 to 300000 milliseconds")
        }
    }
}

extension EmailSettings {
    /// `local@domain` in printable ASCII, nothing that needs quoting in a header or on the SMTP envelope.
    static func isPlainAddress(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && text.utf8.count <= 254
            && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && !"<>()[]\\,;:\"".utf8.contains($0) }
    }
}

/// The `email`, `smtp` and `emailRedirectUris` members of the configuration file.
enum MailConfigFile {
    struct Email: Decodable {
        var from: String?
        var fromName: String?
        var subject: String?
        var textTemplate: String?
        var htmlTemplate: String?
    }
    struct SMTP: Decodable {
        var url: String?
        var tls: String?
        var username: String?
        var passwordFile: String?
        var passwordEnv: String?
        var caFile: String?
        var timeoutMillis: Int64?
    }

    static let emailMembers: Set<String> = ["from", "fromName", "subject", "textTemplate", "htmlTemplate"]
    static let smtpMembers: Set<String> = ["url", "tls", "username", "passwordFile", "passwordEnv", "caFile", "timeoutMillis"]

    /// Applies the members; `path` resolves a file name against the file's folder.
    static func apply(
        redirects: [String]?, email: Email?, smtp: SMTP?, to c: inout ServerConfiguration, path: (String?) -> String?
    ) throws(ConfigurationError) {
        if let redirects { c.emailRedirectUris = redirects }
        if let email {
            if let v = email.from { c.email.from = v }
            c.email.fromName = email.fromName
            if let v = email.subject { c.email.subject = v }
            func read(_ name: String?, _ field: String) throws(ConfigurationError) -> String? {
                guard let file = path(name) else { return nil }
                guard let data = FileManager.default.contents(atPath: file),
                    let text = String(data: data, encoding: .utf8)
                else {
                    throw ConfigurationError(field: field, rule: "readable", message: "cannot read the template file \(file)")
                }
                return text
            }
            if let v = try read(email.textTemplate, "email.textTemplate") { c.email.textTemplate = v }
            if let v = try read(email.htmlTemplate, "email.htmlTemplate") { c.email.htmlTemplate = v }
        }
        if let smtp {
            guard let url = smtp.url else {
                throw ConfigurationError(field: "smtp.url", rule: "required", message: "set the SMTP server: smtp://host:587")
            }
            var s = SMTPConfiguration(url: url)
            if let tls = smtp.tls {
                guard let value = SMTPConfiguration.Security(rawValue: tls) else {
                    throw ConfigurationError(
                        field: "smtp.tls", rule: "one-of",
                        message: "tls is \"starttls\", \"implicit\" or \"none\" (loopback only)")
                }
                s.tls = value
            }
            s.username = smtp.username
            s.passwordFile = path(smtp.passwordFile)
            s.passwordEnv = smtp.passwordEnv
            s.caFile = path(smtp.caFile)
            if let v = smtp.timeoutMillis { s.timeoutMillis = v }
            c.smtp = s
        }
    }
}
