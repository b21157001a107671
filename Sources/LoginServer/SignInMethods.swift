import BrowserLoginProtocol

/// Which sign-in methods the server offers (docs/server.md "Sign-in
/// methods"): the rules of `name`, `emailSignInEnabled` and `passkeyRpIds`,
/// and `GET {base}/browser/config`, which tells the hosted page (and anyone,
/// without a session) what to show.
extension ServerConfiguration {
    /// The email routes, the upstream providers and passkeys (counted only
    /// with a relying party): a server offering none of them refuses to start.
    func validateSignInMethods() throws(ConfigurationError) {
        if let name,
            name.isEmpty || name.count > 80 || name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        {
            throw ConfigurationError(field: "name", rule: "text", message: "the server's name is one line of 1 to 80 characters")
        }
        var seen: Set<String> = []
        for (i, rpId) in passkeyRpIds.enumerated() {
            let field = "passkeyRpIds[\(i)]"
            if isIPLiteral(rpId) || (rpId.hasPrefix("[") && rpId.hasSuffix("]")) {
                throw ConfigurationError(
                    field: field, rule: "not-ip",
                    message:
                        "'\(rpId)' is an IP address; a passkey relying party id is a host name (WebAuthn has none for IP addresses), e.g. login.example.com or localhost"
                )
            }
            if !Self.isHostName(rpId) {
                throw ConfigurationError(
                    field: field, rule: "host-name",
                    message: "a relying party id is a lower-case host name without scheme, port or path, e.g. login.example.com")
            }
            if !seen.insert(rpId).inserted {
                throw ConfigurationError(field: field, rule: "unique", message: "'\(rpId)' is listed twice")
            }
        }
        if !emailSignInEnabled && upstreamProviders.isEmpty && passkeyRpIds.isEmpty {
            throw ConfigurationError(
                field: "emailSignInEnabled", rule: "at-least-one-method",
                message:
                    "with email sign-in off, configure another way to sign in: upstreamProviders, or passkeyRpIds for passkeys")
        }
    }

    /// A DNS host name: dot-separated labels of `a-z0-9-` (not starting or
    /// ending with `-`), at most 253 characters, no trailing dot.
    static func isHostName(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 253 else { return false }
        return text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.first != "-" && label.last != "-"
                && label.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
        }
    }
}

/// `GET {base}/browser/config`.
struct BrowserConfigResponse: Encodable {
    struct Provider: Encodable {
        /// The name the start route takes (`provider`).
        var id: String
        /// The button's text.
        var name: String
        /// False while the provider could not be reached lately (UpstreamProviders).
        var usable: Bool
    }
    var name: String
    var mode: String
    var waitlistEnabled: Bool
    var emailSignInEnabled: Bool
    var passkeyEnabled: Bool
    var passkeyRpIds: [String]
    var upstreamProviders: [Provider]
}

extension LoginService {
    /// The sign-in methods, answered to anyone: nothing in it is secret.
    func browserConfig(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let now = clock()
        return json(
            200,
            BrowserConfigResponse(
                name: configuration.name ?? (try? Origin(issuer).host) ?? issuer, mode: configuration.signupMode.rawValue,
                waitlistEnabled: configuration.waitlist, emailSignInEnabled: configuration.emailSignInEnabled,
                passkeyEnabled: !configuration.passkeyRpIds.isEmpty, passkeyRpIds: configuration.passkeyRpIds,
                upstreamProviders: upstream.entries.map {
                    .init(id: $0.name, name: $0.name, usable: upstream.isUsable($0.name, now: now))
                }))
    }

    /// The email routes with email sign-in off.
    static let emailSignInDisabled = APIError(
        .emailSignInDisabled, "this server does not sign people in by email; use another way offered on the sign-in page")
}
