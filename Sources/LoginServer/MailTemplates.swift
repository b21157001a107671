import BrowserLoginProtocol

/// The one sign-in email (docs/server.md, "Email"): a subject, a text and an
/// HTML template, built in and overridable by files named in the
/// configuration. Placeholders: `{{code}}`, `{{link}}`, `{{minutes}}`,
/// `{{email}}`, `{{issuer}}`; `{{#link}}…{{/link}}` is kept only when the
/// email carries a sign-in link. HTML templates get their values escaped.
public enum SignInEmail {
    public static let defaultSubject = "Your sign-in code"

    public static let defaultText = """
        Your sign-in code is {{code}}

        Type it on the sign-in page where you asked for it. It is valid for {{minutes}} minutes.
        {{#link}}
        Or open this link in the same browser to sign in:

        {{link}}

        The code and the link come as a pair: whichever you use first signs you in, and then neither works again.
        {{/link}}
        If you did not ask to sign in to {{issuer}}, ignore this email.

        """

    public static let defaultHTML = """
        <!doctype html>
        <html lang="en">
        <head><meta charset="utf-8"><title>Your sign-in code</title></head>
        <body style="font-family: system-ui, sans-serif; color: #1d1f23;">
        <p>Your sign-in code is</p>
        <p style="font-size: 1.6em; font-weight: bold; letter-spacing: 0.2em;">{{code}}</p>
        <p>Type it on the sign-in page where you asked for it. It is valid for {{minutes}} minutes.</p>
        {{#link}}<p>Or open this link in the same browser to sign in:</p>
        <p><a href="{{link}}">Sign in</a></p>
        <p>The code and the link come as a pair: whichever you use first signs you in, and then neither works again.</p>
        {{/link}}<p>If you did not ask to sign in to {{issuer}}, ignore this email.</p>
        </body>
        </html>

        """

    static let placeholders: Set<String> = ["code", "link", "minutes", "email", "issuer", "#link", "/link"]

    /// `template` with the link section kept or dropped and the placeholders filled in.
    static func render(_ template: String, values: [String: String], hasLink: Bool, html: Bool) -> String {
        var text = template
        while let open = text.range(of: "{{#link}}"),
            let close = text.range(of: "{{/link}}", range: open.upperBound..<text.endIndex)
        {
            let inner = String(text[open.upperBound..<close.lowerBound])
            text.replaceSubrange(open.lowerBound..<close.upperBound, with: hasLink ? inner : "")
        }
        for (name, value) in values {
            text = text.replacingOccurrences(of: "{{" + name + "}}", with: html ? HostedPage.escapeHTML(value) : value)
        }
        return text
    }

    /// Checks a template: `{{code}}` present, no unknown placeholder, and
    /// `{{link}}` only inside a `{{#link}}…{{/link}}` section. The section
    /// may be left out: a template without it is code-only mail (the server
    /// then issues no link).
    static func check(_ template: String, field: String) throws(ConfigurationError) {
        func fail(_ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: "placeholders", message: message)
        }
        var rest = Substring(template)
        while let open = rest.range(of: "{{") {
            guard let close = rest.range(of: "}}", range: open.upperBound..<rest.endIndex) else {
                throw fail("'{{' without '}}'")
            }
            let name = String(rest[open.upperBound..<close.lowerBound])
            guard placeholders.contains(name) else {
                throw fail("unknown placeholder {{\(name)}}; known: {{code}} {{link}} {{minutes}} {{email}} {{issuer}}")
            }
            rest = rest[close.upperBound...]
        }
        guard template.contains("{{code}}") else { throw fail("the template must show the code: {{code}}") }
        let outside = render(template, values: [:], hasLink: false, html: false)
        if outside.contains("{{link}}") || outside.contains("{{#link}}") || outside.contains("{{/link}}") {
            throw fail(
                "the link goes inside its section, {{#link}} … {{link}} … {{/link}}; delete the whole section for code-only mail"
            )
        }
        if hasLinkSection(template) && !template.contains("{{link}}") {
            throw fail("the link section must show the link: {{#link}} … {{link}} … {{/link}}")
        }
    }

    /// Whether `template` has a `{{#link}}…{{/link}}` section (it can carry a link).
    static func hasLinkSection(_ template: String) -> Bool {
        template.contains("{{#link}}")
    }

    /// The code of a sign-in email's text (the default template's "code is NNNNNN").
    public static func code(in text: String) -> String? {
        guard let range = text.range(of: "code is ") else { return nil }
        let code = text[range.upperBound...].prefix(6)
        return code.count == 6 && code.allSatisfy(\.isNumber) ? String(code) : nil
    }

    /// The sign-in link of a sign-in email's text: the word that carries `#signin_token=`.
    public static func link(in text: String) -> String? {
        text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" })
            .first { $0.contains("#" + EmailLinks.fragmentName + "=") }.map(String.init)
    }
}

extension LoginService {
    /// The one sign-in email to `email`: the code, and the link when there is one.
    func signInEmail(to email: EmailAddress, code: String, link: String?) -> MailMessage {
        let settings = configuration.email
        var values = [
            "code": code, "minutes": "\(max(1, (configuration.signInCodeLifetimeMillis + 59_999) / 60_000))", "email": email.text,
            "issuer": issuer,
        ]
        if let link { values["link"] = link }
        return MailMessage(
            to: email.text, subject: settings.subject,
            body: SignInEmail.render(settings.textTemplate, values: values, hasLink: link != nil, html: false),
            html: SignInEmail.render(settings.htmlTemplate, values: values, hasLink: link != nil, html: true),
            from: settings.from, fromName: settings.fromName)
    }
}
