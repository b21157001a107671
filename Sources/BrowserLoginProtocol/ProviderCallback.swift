/// A standard provider's redirect back to the app (RFC 6749 §4.1.2, RFC 9207;
/// docs/providers.md): the redirect URI it was sent to, `state`, either a
/// code or an error, and `iss` when the provider sends it. Holds a code and
/// the state: never log it.
public struct ProviderCallback: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case code(String)
        /// `error` and its `error_description`.
        case error(String, description: String?)
    }

    /// The callback's scheme, authority and path (query and fragment not kept).
    public var target: URLParts
    public var state: String
    public var issuer: String?
    public var outcome: Outcome

    /// True for a callback of a standard provider rather than of a Browser
    /// Login server: it names a `state` and no `attempt`.
    public static func isProviderCallback(_ text: String) -> Bool {
        guard let query = URLParts(splitting: text)?.query else { return false }
        var names: Set<String> = []
        for pair in query.split(separator: "&") {
            let name = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            if let decoded = percentDecode(name) { names.insert(decoded) }
        }
        return names.contains("state") && !names.contains("attempt")
    }

    /// Parses `text`: at most 8 KiB, no fragment, no userinfo; `state` and
    /// either `code` or `error` exactly once; `iss` and `error_description`
    /// at most once. Any parameter named twice is refused.
    public init(parsing text: String) throws(CallbackRefusal) {
        guard text.utf8.count <= Callback.maximumLength else { throw .tooLong }
        if text.contains("#") { throw .hasFragment }
        guard var parts = URLParts(splitting: text) else { throw .malformed }
        if parts.hasUserinfo { throw .hasUserinfo }
        guard let query = parts.query else { throw .missingParameter("state") }
        let values = try Callback.parameters(query, known: ["code", "error", "error_description", "state", "iss"])
        func required(_ name: String) throws(CallbackRefusal) -> String {
            guard let value = values[name], !value.isEmpty else { throw .missingParameter(name) }
            return value
        }
        if values["code"] != nil && values["error"] != nil { throw .codeAndError }
        if values["error"] != nil {
            outcome = .error(try required("error"), description: values["error_description"])
        } else {
            outcome = .code(try required("code"))
        }
        state = try required("state")
        if let iss = values["iss"] {
            guard !iss.isEmpty else { throw .invalidParameter("iss") }
            issuer = iss
        }
        parts.query = nil
        parts.fragment = nil
        target = parts
    }
}
