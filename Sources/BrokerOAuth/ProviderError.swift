import BrokerCore
import BrowserLoginProtocol

/// Why a call to an OAuth 2.0 / OpenID Connect provider did not answer with
/// its success body (docs/providers.md). Messages never hold a token, a code,
/// a verifier, a client secret, a device code or an endpoint's URL; the
/// provider's own words (`error`, `error_description`) are kept as plain text
/// only (see `ProviderError.plainText`).
public enum ProviderError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request certainly never reached the provider (name resolution,
    /// connection or TLS failed; or a step before it, such as fetching the
    /// metadata, failed).
    case notSent(String)
    /// Sent (or possibly sent), then no answer came (timeout, connection lost).
    case noAnswer(String)
    /// A 5xx.
    case serverFailure(status: Int)
    /// An answer that is not the protocol's: wrong content, bad JSON, a
    /// redirect, a missing member.
    case malformed(status: Int, String)
    /// A well-formed OAuth error body (RFC 6749 §5.2): a definite answer.
    case refused(status: Int, error: String, description: String?)
    /// The metadata's `issuer` is not the configured issuer.
    case issuerMismatch(expected: String, got: String)
    /// An endpoint (named by its metadata member or client-file key) is not
    /// https, nor http on a loopback address.
    case insecureEndpoint(String)
    /// The provider lacks what the call needs (PKCE S256, an endpoint).
    case unsupported(String)
    /// The answer was larger than allowed.
    case responseTooLarge

    /// The `unsupported` answer of a device sign-in without a device
    /// authorization endpoint (maps to `DEVICE_FLOW_UNSUPPORTED`).
    public static let noDeviceEndpoint = ProviderError.unsupported("the provider has no device authorization endpoint")
    /// The `unsupported` answer of a revoke without a revocation endpoint:
    /// nothing is owed, the provider cannot revoke.
    public static let noRevocationEndpoint = ProviderError.unsupported("the provider has no revocation endpoint")

    /// Only a well-formed error body is a definite answer from the provider
    /// (docs/protocol.md §7 applies to providers too); the local refusals
    /// (issuer mismatch, insecure endpoint, unsupported) are definite as well.
    public var isDefinite: Bool {
        switch self {
        case .refused, .issuerMismatch, .insecureEndpoint, .unsupported: true
        default: false
        }
    }

    /// True when the request certainly did not reach the provider: a
    /// connection that never opened, or a refusal decided locally before
    /// anything was sent.
    public var certainlyNotSent: Bool {
        switch self {
        case .notSent, .issuerMismatch, .insecureEndpoint, .unsupported: true
        default: false
        }
    }

    /// The provider's `error` for a well-formed refusal.
    public var providerErrorCode: String? {
        if case .refused(_, let error, _) = self { return error }
        return nil
    }

    public var description: String {
        switch self {
        case .notSent(let m): "the provider could not be reached (\(m))"
        case .noAnswer(let m): "the provider did not answer (\(m))"
        case .serverFailure(let s): "the provider failed (HTTP \(s))"
        case .malformed(let s, let m): "the provider's answer (HTTP \(s)) is not an OAuth answer: \(m)"
        case .refused(let s, let error, let text):
            "the provider refused (HTTP \(s) \(ProviderError.plainText(error, limit: 100)))"
                + (text.map { ": " + ProviderError.plainText($0) } ?? "")
        case .issuerMismatch(let expected, let got):
            "the provider's issuer is '\(ProviderError.issuerText(got))', not the configured '\(ProviderError.issuerText(expected))'"
        case .insecureEndpoint(let name):
            "the provider's \(name) is neither https nor http on a loopback address"
        case .unsupported(let m): m
        case .responseTooLarge: "the provider's answer is too large"
        }
    }

    /// The broker error for a call that failed this way. Every message says
    /// what to do next.
    public func brokerError(attemptId: String? = nil) -> BrokerError {
        if self == .proofNotMade || self == .keyNotMade, case .notSent(let what) = self {
            // Made here, not at the provider: a key or proof libcrypto could not make (DPOP_KEY_UNAVAILABLE).
            return BrokerError(
                .dpopKeyUnavailable,
                "\(what), so nothing was sent; try again, and if it persists check that libcrypto (libssl3) is installed, or set DPoP=no in the client file",
                attemptId: attemptId)
        }
        switch self {
        case .notSent(let detail), .noAnswer(let detail):
            // The detail names only the host and what failed, never a path or a secret.
            return BrokerError(
                .providerUnreachable,
                "the provider could not be reached (\(ProviderError.plainText(detail))); check the network and the client's Issuer=, then try again",
                attemptId: attemptId)
        case .serverFailure(let status):
            return BrokerError(
                .providerUnreachable,
                "the provider failed (HTTP \(status)); try again later, and tell its operator if it persists",
                attemptId: attemptId)
        case .malformed, .responseTooLarge:
            return BrokerError(
                .serverProtocolError,
                "the provider's answer broke the protocol (\(self)); check the client's Issuer=, Protocol= and *Endpoint= keys",
                attemptId: attemptId)
        case .refused(_, let error, let text):
            let code = ProviderError.plainText(error, limit: 100)
            let said = text.map { ProviderError.plainText($0) }.flatMap { $0.isEmpty ? nil : " (\($0))" } ?? ""
            // A refused proof (a nonce asked for again after the broker answered it once) is no client-file mistake.
            let next =
                code == "use_dpop_nonce" || code == "invalid_dpop_proof"
                ? "the provider refused the request's DPoP proof; try again, and if it persists tell the provider's operator, or set DPoP=no in the client file"
                : "check the client's ClientId= and Scopes= with the provider's settings, then sign in again"
            return BrokerError(
                .providerError, "the provider refused: \(code)\(said); \(next)", attemptId: attemptId, providerError: code)
        case .issuerMismatch(let expected, let got):
            return BrokerError(
                .issuerMismatch,
                "the provider says its issuer is '\(ProviderError.issuerText(got))' but the client file says Issuer=\(ProviderError.issuerText(expected)); set Issuer= to exactly the provider's issuer",
                attemptId: attemptId)
        case .insecureEndpoint(let name):
            return BrokerError(
                .serverProtocolError,
                "the provider's \(name) is neither https nor http on a loopback address; fix the provider's metadata or set the matching *Endpoint= key to an https address",
                attemptId: attemptId)
        case .unsupported(let m):
            if self == .noDeviceEndpoint {
                return BrokerError(
                    .deviceFlowUnsupported,
                    "the provider has no device authorization endpoint; sign in with the browser, or set DeviceAuthorizationEndpoint= if the provider has one",
                    attemptId: attemptId)
            }
            return BrokerError(
                .serverProtocolError,
                "\(m); check the client's Issuer= and *Endpoint= keys, or use a provider that supports it",
                attemptId: attemptId)
        }
    }

    /// The provider's words as plain text: control characters removed, any
    /// word that looks like a link replaced, at most `limit` characters.
    public static func plainText(_ text: String, limit: Int = 200) -> String {
        plainText(text, limit: limit, keepingLinks: false)
    }

    /// An issuer (an identifier, shown as written): control characters
    /// removed, at most 300 characters.
    public static func issuerText(_ text: String) -> String {
        plainText(text, limit: 300, keepingLinks: true)
    }

    static func plainText(_ text: String, limit: Int, keepingLinks: Bool) -> String {
        var cleaned = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069:
                cleaned.unicodeScalars.append(" ")
            default:
                cleaned.unicodeScalars.append(scalar)
            }
        }
        let words = cleaned.split(separator: " ", omittingEmptySubsequences: true).map { word -> Substring in
            let lower = word.lowercased()
            if !keepingLinks,
                lower.contains("://") || lower.hasPrefix("www.") || lower.contains("http:") || lower.contains("https:")
            {
                return "(link removed)"
            }
            return word
        }
        let joined = words.joined(separator: " ")
        return joined.count <= limit ? joined : String(joined.prefix(limit))
    }
}
