/// The loopback address a listener binds (RFC 8252 §7.3, §8.3: a literal
/// loopback address, never `localhost`, never a wildcard).
public enum LoopbackHost: String, Sendable {
    case ipv4 = "127.0.0.1"
    case ipv6 = "::1"

    /// The address as it appears in a URL's authority.
    var urlHost: String {
        switch self {
        case .ipv4: rawValue
        case .ipv6: "[\(rawValue)]"
        }
    }
}

/// What the genuine callback's request is answered with.
public struct LoopbackPage: Sendable, Equatable {
    /// 200 for signed in, 400 for a refusal.
    public var status: Int
    /// "Signed in" / "Sign-in failed".
    public var title: String
    /// Plain text ("You are signed in to Example Chat. You can close this tab."); HTML-escaped when rendered.
    public var message: String

    public init(status: Int, title: String, message: String) {
        self.status = status
        self.title = title
        self.message = message
    }

    /// The listener's own answers, for requests that never reach `deliver`.
    static let notFound = LoopbackPage(
        status: 404, title: "Not found", message: "This address only receives a sign-in redirect.")
    static let methodNotAllowed = LoopbackPage(
        status: 405, title: "Method not allowed", message: "This address only receives a sign-in redirect.")
    static let badRequest = LoopbackPage(
        status: 400, title: "Bad request", message: "This request is not a sign-in redirect.")

    /// The page as UTF-8 HTML: no script, no external resource, inline CSS only
    /// (the answer's Content-Security-Policy allows nothing else).
    func html() -> [UInt8] {
        let title = escapeHTML(self.title)
        let message = escapeHTML(self.message)
        let page = """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(title)</title>
            <style>
            :root { color-scheme: light dark; }
            body { margin: 0; min-height: 100vh; display: flex; align-items: center; justify-content: center;
              font-family: system-ui, -apple-system, "Segoe UI", Cantarell, sans-serif;
              background: #f4f5f7; color: #1f2328; }
            main { max-width: 32rem; margin: 1.5rem; padding: 2rem 2.25rem; border-radius: 12px;
              background: #ffffff; box-shadow: 0 1px 3px rgba(0, 0, 0, 0.12), 0 8px 24px rgba(0, 0, 0, 0.06); }
            h1 { margin: 0 0 0.75rem; font-size: 1.4rem; font-weight: 600; }
            p { margin: 0; line-height: 1.5; }
            @media (prefers-color-scheme: dark) {
              body { background: #1c1d20; color: #e6e7e9; }
              main { background: #2a2b2f; box-shadow: none; }
            }
            </style>
            </head>
            <body>
            <main>
            <h1>\(title)</h1>
            <p>\(message)</p>
            </main>
            </body>
            </html>

            """
        return Array(page.utf8)
    }
}

/// Escapes text for an HTML element's content or a quoted attribute value.
func escapeHTML(_ text: String) -> String {
    var escaped = ""
    escaped.reserveCapacity(text.utf8.count)
    for character in text.unicodeScalars {
        switch character {
        case "&": escaped += "&amp;"
        case "<": escaped += "&lt;"
        case ">": escaped += "&gt;"
        case "\"": escaped += "&quot;"
        case "'": escaped += "&#39;"
        default: escaped.unicodeScalars.append(character)
        }
    }
    return escaped
}
