/// Why a return URL cannot be registered (docs/protocol.md §1). Each case names
/// the rule it broke, in `rule`, and says it for people in `message`.
public enum ReturnURLRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLong
    case notAbsoluteURL
    case upperCaseScheme
    case forbiddenScheme(String)
    case hasQuery
    case hasFragment
    case hasUserinfo
    case emptyAuthority
    case pathMustStartWithSlash
    case dotSegment
    case emptyPathSegment
    case invalidPercentEncoding
    case invalidHost
    case ipLiteral
    case localhost
    case hostWithoutDot
    case trailingDot
    case portNot443
    case portOnCustomScheme
    case httpNotLoopback
    case portOnLoopback

    /// A stable name for the rule, for logs and configuration errors.
    public var rule: String {
        switch self {
        case .tooLong: "too-long"
        case .notAbsoluteURL: "absolute-url"
        case .upperCaseScheme: "lower-case-scheme"
        case .forbiddenScheme: "forbidden-scheme"
        case .hasQuery: "no-query"
        case .hasFragment: "no-fragment"
        case .hasUserinfo: "no-userinfo"
        case .emptyAuthority: "non-empty-authority"
        case .pathMustStartWithSlash: "absolute-path"
        case .dotSegment: "no-dot-segments"
        case .emptyPathSegment: "no-empty-segments"
        case .invalidPercentEncoding: "valid-percent-encoding"
        case .invalidHost: "host-name"
        case .ipLiteral: "no-ip-literal"
        case .localhost: "no-localhost"
        case .hostWithoutDot: "host-has-dot"
        case .trailingDot: "no-trailing-dot"
        case .portNot443: "port-443"
        case .portOnCustomScheme: "no-port-on-custom-scheme"
        case .httpNotLoopback: "http-only-on-loopback-ip"
        case .portOnLoopback: "no-port-on-loopback"
        }
    }

    public var message: String {
        switch self {
        case .tooLong: "a return URL is at most \(ReturnURL.maximumLength) characters"
        case .notAbsoluteURL:
            "a return URL is an absolute URL with a scheme and only URL characters (no spaces, controls or non-ASCII)"
        case .upperCaseScheme: "the scheme must be written in lower case"
        case .forbiddenScheme(let s):
            "the scheme '\(s)' cannot be a return URL; use a custom scheme (reverse-DNS recommended) or https"
        case .hasQuery: "a return URL has no query (the server appends code, attempt and iss)"
        case .hasFragment: "a return URL has no fragment"
        case .hasUserinfo: "a return URL has no userinfo ('@' in the authority)"
        case .emptyAuthority: "'//' must be followed by a host; write 'scheme:/path' for no host"
        case .pathMustStartWithSlash: "the path must start with '/'"
        case .dotSegment: "the path may not contain '.' or '..' segments"
        case .emptyPathSegment: "the path may not contain '//'"
        case .invalidPercentEncoding: "the path has a malformed or forbidden percent-encoding"
        case .invalidHost: "the host must be an ASCII host name of letters, digits, '-' and '.' (punycode for unicode names)"
        case .ipLiteral: "an https return URL needs a public host name, not an IP literal"
        case .localhost: "an https return URL cannot be on localhost"
        case .hostWithoutDot: "an https return URL needs a public host name containing a dot"
        case .trailingDot: "the host name may not end with a dot"
        case .portNot443: "an https return URL must use port 443"
        case .portOnCustomScheme: "a custom-scheme return URL has no port"
        case .httpNotLoopback:
            "an http return URL is a loopback redirect on an IP literal: http://127.0.0.1/PATH or http://[::1]/PATH (never localhost, RFC 8252 §7.3)"
        case .portOnLoopback:
            "a loopback return URL is registered without a port; the native host sends the port it listens on at create"
        }
    }

    public var description: String { "\(rule): \(message)" }
}

/// A registered return URL (docs/protocol.md §1): an absolute URL with no query,
/// no fragment and no userinfo, on a lower-case custom scheme, on https on
/// a public host name, port 443, or a loopback redirect `http://127.0.0.1/PATH`
/// or `http://[::1]/PATH` registered without a port (RFC 8252 §7.3).
public struct ReturnURL: Sendable, Hashable, CustomStringConvertible {
    public static let maximumLength = 2048
    public static let forbiddenSchemes: Set<String> = [
        "http", "https", "file", "data", "javascript", "vbscript", "mailto", "about", "blob", "ftp", "ws", "wss",
    ]

    /// The URL exactly as registered.
    public let text: String
    public let parts: URLParts

    public var isHTTPS: Bool { parts.scheme == "https" }
    /// A loopback redirect: its port varies per attempt (§1).
    public var isLoopback: Bool { parts.scheme == "http" }
    public var scheme: String { parts.scheme }
    public var description: String { text }

    /// Validates `text` against §1. Throws the first rule it breaks.
    public init(_ text: String) throws(ReturnURLRefusal) {
        guard text.utf8.count <= Self.maximumLength else { throw .tooLong }
        guard let parts = URLParts(splitting: text) else { throw .notAbsoluteURL }
        if parts.scheme != parts.scheme.lowercased() { throw .upperCaseScheme }
        if parts.fragment != nil { throw .hasFragment }
        if parts.query != nil { throw .hasQuery }
        if parts.hasUserinfo { throw .hasUserinfo }
        let isHTTPS = parts.scheme == "https"
        let isHTTP = parts.scheme == "http"
        if Self.forbiddenSchemes.contains(parts.scheme), !isHTTPS, !isHTTP { throw .forbiddenScheme(parts.scheme) }

        if isHTTP {
            guard let host = parts.host, Self.loopbackHosts.contains(host) else { throw .httpNotLoopback }
            if parts.portText != nil { throw .portOnLoopback }
        } else if let authority = parts.authority {
            if authority.isEmpty { throw .emptyAuthority }
            try Self.checkAuthority(parts, https: isHTTPS)
        } else if isHTTPS {
            throw .emptyAuthority
        }
        try Self.checkPath(parts.path)
        self.text = text
        self.parts = parts
    }

    /// True when `callback`'s scheme + authority + path equal this URL's
    /// exactly (scheme and host case-insensitively, the path byte for byte).
    /// A URL that still carries a query or a fragment never matches (§1,
    /// §5.1); pass a parsed callback's `target`, which has neither.
    ///
    /// A loopback redirect is the one exception (§1, RFC 8252 §7.3): it
    /// matches the same scheme, address and path with any port from 1 to
    /// 65535 (digits as written, no leading zero), and nothing else — no
    /// userinfo, no other address, no empty port.
    public func matches(_ callback: URLParts) -> Bool {
        guard callback.query == nil, callback.fragment == nil else { return false }
        guard isLoopback else { return callback.matchKey == parts.matchKey }
        guard callback.scheme.lowercased() == "http", !callback.hasUserinfo, callback.host == parts.host,
            let port = callback.portText, Self.isPort(port), callback.path == parts.path
        else { return false }
        return callback.authority == parts.host! + ":" + port
    }

    /// The URL an attempt keeps for `requested` (which matches this one): the
    /// registered text, or for a loopback redirect the registered URL with the
    /// requested port, which the attempt's callback must then match exactly (§1).
    public func attemptURL(requested: String) -> String {
        guard isLoopback, let host = parts.host, let port = URLParts(splitting: requested)?.portText else { return text }
        return "http://" + host + ":" + port + parts.path
    }

    /// True when `callback`'s scheme + authority + path equal an attempt's
    /// return URL exactly (a loopback redirect's port included; scheme and host
    /// case-insensitively, the path byte for byte), with no query or fragment.
    public static func attemptMatches(_ attemptURL: String, _ callback: URLParts) -> Bool {
        guard callback.query == nil, callback.fragment == nil, let kept = URLParts(splitting: attemptURL),
            kept.query == nil, kept.fragment == nil
        else { return false }
        return kept.matchKey == callback.matchKey
    }

    /// The hosts of a loopback redirect: IP literals only (RFC 8252 §7.3, §8.3).
    public static let loopbackHosts: Set<String> = ["127.0.0.1", "[::1]"]

    /// A TCP port as a URL writes it: 1 to 65535, digits only, no leading zero.
    static func isPort(_ text: String) -> Bool {
        guard let first = text.utf8.first, first != UInt8(ascii: "0"), text.utf8.count <= 5,
            text.utf8.allSatisfy(isASCIIDigit), let value = Int(text)
        else { return false }
        return value <= 65535
    }

    private static func checkAuthority(_ parts: URLParts, https: Bool) throws(ReturnURLRefusal) {
        guard let host = parts.host else { throw .emptyAuthority }
        if host.hasPrefix("[") { throw https ? .ipLiteral : .invalidHost }
        if host.isEmpty { throw .emptyAuthority }
        if !host.utf8.allSatisfy({ isASCIIAlphanumeric($0, or: "-.") }) { throw .invalidHost }
        if let port = parts.portText {
            if !https { throw .portOnCustomScheme }
            if port != "443" { throw .portNot443 }
        }
        guard https else { return }
        let lower = host.lowercased()
        if lower.hasSuffix(".") { throw .trailingDot }
        if lower.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty) {
            throw .invalidHost
        }
        if isIPv4Literal(lower) { throw .ipLiteral }
        if lower == "localhost" || lower.hasSuffix(".localhost") { throw .localhost }
        if !lower.contains(".") { throw .hostWithoutDot }
        for label in lower.split(separator: ".") where label.hasPrefix("-") || label.hasSuffix("-") || label.count > 63 {
            throw .invalidHost
        }
    }

    private static func checkPath(_ path: String) throws(ReturnURLRefusal) {
        guard path.hasPrefix("/") else { throw .pathMustStartWithSlash }
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        for (index, segment) in segments.enumerated() {
            if segment.isEmpty && index < segments.count - 1 { throw .emptyPathSegment }
            if segment.isEmpty && segments.count > 1 && index == segments.count - 1 { continue }
            guard let decoded = percentDecode(segment) else { throw .invalidPercentEncoding }
            if decoded == "." || decoded == ".." { throw .dotSegment }
            if decoded.contains("/") || decoded.contains("?") || decoded.contains("#") || decoded.contains("\\") {
                throw .invalidPercentEncoding
            }
            if decoded.contains("%") && segment.contains("%25") { throw .invalidPercentEncoding }
        }
    }
}

/// True for a dotted-quad (or shorter numeric form like `127.1` or a bare
/// number) that resolvers would read as an IPv4 address.
func isIPv4Literal(_ host: String) -> Bool {
    let labels = host.split(separator: ".", omittingEmptySubsequences: false)
    guard !labels.isEmpty, labels.count <= 4 else { return false }
    return labels.allSatisfy { label in
        guard !label.isEmpty else { return false }
        let lower = label.lowercased()
        if lower.hasPrefix("0x") { return lower.dropFirst(2).allSatisfy { $0.isHexDigit } }
        return label.allSatisfy { $0.isASCII && $0.isNumber }
    }
}
