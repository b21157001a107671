/// Why a server or API origin is not acceptable.
public enum OriginRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed
    case notLowerCase
    case schemeNotAllowed
    case httpNeedsLoopback
    case hasPathOrQuery
    case hasUserinfo
    case invalidPort

    public var message: String {
        switch self {
        case .malformed: "an origin is 'https://host[:port]' with nothing after it"
        case .notLowerCase: "write the origin's scheme and host in lower case"
        case .schemeNotAllowed: "an origin's scheme is https (or http on a loopback address)"
        case .httpNeedsLoopback: "http is allowed only on a loopback address (127.0.0.0/8, [::1], localhost); use https"
        case .hasPathOrQuery: "an origin has no path, query or fragment (put the path in the base path)"
        case .hasUserinfo: "an origin has no userinfo"
        case .invalidPort: "the port must be a number from 1 to 65535"
        }
    }
    public var description: String { message }
}

/// An origin, `https://host[:port]` or `http://loopback[:port]` (docs/protocol.md
/// §4: the issuer). Serialised without a default port.
public struct Origin: Sendable, Hashable, CustomStringConvertible {
    public let scheme: String
    public let host: String
    public let port: Int?

    public var serialized: String {
        var s = scheme + "://" + host
        if let port { s += ":\(port)" }
        return s
    }
    public var description: String { serialized }

    /// The port to connect to.
    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    public var isLoopback: Bool { Origin.isLoopbackHost(host) }

    public init(_ text: String) throws(OriginRefusal) {
        guard let parts = URLParts(splitting: text), let authority = parts.authority, !authority.isEmpty else {
            throw .malformed
        }
        guard parts.path.isEmpty, parts.query == nil, parts.fragment == nil else { throw .hasPathOrQuery }
        guard !parts.hasUserinfo else { throw .hasUserinfo }
        guard parts.scheme == parts.scheme.lowercased(), authority == authority.lowercased() else {
            throw .notLowerCase
        }
        guard parts.scheme == "https" || parts.scheme == "http" else { throw .schemeNotAllowed }
        guard let host = parts.host, !host.isEmpty else { throw .malformed }
        let hostOK: Bool
        if host.hasPrefix("[") {
            hostOK = host.hasSuffix("]") && host.dropFirst().dropLast().allSatisfy { $0.isHexDigit || $0 == ":" }
        } else {
            hostOK = host.utf8.allSatisfy { isASCIIAlphanumeric($0, or: "-.") }
        }
        guard hostOK else { throw .malformed }
        var port: Int? = nil
        if let portText = parts.portText {
            guard let p = Int(portText), (1...65535).contains(p), portText.first != "0", portText.allSatisfy(\.isNumber)
            else { throw .invalidPort }
            let isDefault = (parts.scheme == "https" && p == 443) || (parts.scheme == "http" && p == 80)
            port = isDefault ? nil : p
        }
        if parts.scheme == "http" && !Origin.isLoopbackHost(host) { throw .httpNeedsLoopback }
        self.scheme = parts.scheme
        self.host = host
        self.port = port
    }

    /// 127.0.0.0/8, `[::1]` and `localhost`.
    public static func isLoopbackHost(_ host: String) -> Bool {
        let lower = host.lowercased()
        if lower == "localhost" || lower == "[::1]" { return true }
        let octets = lower.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets[0] == "127" else { return false }
        return octets.allSatisfy { o in
            guard let v = Int(o), o.allSatisfy(\.isNumber) else { return false }
            return (0...255).contains(v)
        }
    }
}
