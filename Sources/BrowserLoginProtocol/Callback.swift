/// Why a callback URL was refused before it was matched to an attempt
/// (docs/protocol.md §7 finish rules). Maps to RPC `CALLBACK_INVALID`.
public enum CallbackRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLong
    case malformed
    case hasFragment
    case hasUserinfo
    case missingParameter(String)
    case duplicateParameter(String)
    case invalidParameter(String)
    case codeAndError

    public var rule: String {
        switch self {
        case .tooLong: "too-long"
        case .malformed: "malformed"
        case .hasFragment: "no-fragment"
        case .hasUserinfo: "no-userinfo"
        case .missingParameter: "missing-parameter"
        case .duplicateParameter: "duplicate-parameter"
        case .invalidParameter: "invalid-parameter"
        case .codeAndError: "code-or-error"
        }
    }

    /// A message safe to show and log: it never repeats a parameter's value.
    public var message: String {
        switch self {
        case .tooLong: "the callback URL is longer than \(Callback.maximumLength) bytes"
        case .malformed: "the callback is not a well-formed URL"
        case .hasFragment: "the callback URL has a fragment"
        case .hasUserinfo: "the callback URL has userinfo"
        case .missingParameter(let name): "the callback URL lacks the '\(name)' parameter"
        case .duplicateParameter(let name): "the callback URL repeats the '\(name)' parameter"
        case .invalidParameter(let name): "the callback URL's '\(name)' parameter is malformed"
        case .codeAndError: "the callback URL carries both 'code' and 'error'"
        }
    }

    public var description: String { "\(rule): \(message)" }
}

/// A parsed callback: the return URL it was sent to, the server's attempt
/// id, the issuer and either a code or an error. Holds a code: never log it.
public struct Callback: Sendable, Equatable {
    public static let maximumLength = 8192

    public enum Outcome: Sendable, Equatable {
        case code(String)
        case error(String)
    }

    /// The callback's scheme, authority and path (its query and fragment are not kept).
    public var target: URLParts
    /// The server's attempt id.
    public var attempt: String
    /// The decoded `iss` parameter.
    public var issuer: String
    public var outcome: Outcome

    /// Parses `text` under §7: at most 8 KiB, no fragment, no userinfo,
    /// `code`, `attempt`, `iss` (or `error`, `attempt`, `iss`) each exactly
    /// once. Other parameters (`error_description`, `state`) are ignored.
    public init(parsing text: String) throws(CallbackRefusal) {
        guard text.utf8.count <= Self.maximumLength else { throw .tooLong }
        if text.contains("#") { throw .hasFragment }
        guard var parts = URLParts(splitting: text) else { throw .malformed }
        if parts.hasUserinfo { throw .hasUserinfo }
        guard let query = parts.query else { throw .missingParameter("attempt") }

        let values = try Self.parameters(query, known: ["code", "error", "attempt", "iss"])
        func required(_ name: String) throws(CallbackRefusal) -> String {
            guard let value = values[name], !value.isEmpty else { throw .missingParameter(name) }
            return value
        }
        if values["code"] != nil && values["error"] != nil { throw .codeAndError }
        if values["error"] != nil {
            outcome = .error(try required("error"))
        } else {
            outcome = .code(try required("code"))
        }
        attempt = try required("attempt")
        issuer = try required("iss")
        parts.query = nil
        parts.fragment = nil
        target = parts
    }

    /// A callback's query: each `known` parameter, decoded. Any parameter
    /// named twice is refused, unknown ones are skipped.
    static func parameters(_ query: String, known: Set<String>) throws(CallbackRefusal) -> [String: String] {
        var values: [String: String] = [:]
        var seen: Set<String> = []
        for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
            let eq = pair.firstIndex(of: "=")
            guard let name = percentDecode(pair[..<(eq ?? pair.endIndex)]) else { throw .malformed }
            guard seen.insert(name).inserted else { throw .duplicateParameter(name) }
            guard known.contains(name) else { continue }
            guard let value = percentDecode(eq.map { pair[pair.index(after: $0)...] } ?? "") else {
                throw .invalidParameter(name)
            }
            values[name] = value
        }
        return values
    }

    /// Builds the callback URL a server sends the browser to (§6).
    public static func url(returnURL: String, outcome: Outcome, attempt: String, issuer: String) -> String {
        let first =
            switch outcome {
            case .code(let code): "code=" + percentEncode(code)
            case .error(let error): "error=" + percentEncode(error)
            }
        return returnURL + "?" + first + "&attempt=" + percentEncode(attempt) + "&iss=" + percentEncode(issuer)
    }
}
