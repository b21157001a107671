/// A URL split into its parts exactly as written: no normalisation, no
/// percent-decoding, nothing resolved. Foundation's URL types normalise and
/// accept more than the protocol allows, so the protocol's rules are checked
/// on this literal split instead.
public struct URLParts: Sendable, Hashable {
    /// The scheme as written (case preserved).
    public var scheme: String
    /// The authority after `//`, or nil when the URL has no `//`.
    public var authority: String?
    public var path: String
    public var query: String?
    public var fragment: String?

    /// Splits `text`; nil when it has no valid scheme or contains a byte that
    /// may not appear in a URL (controls, space, non-ASCII, `\`, `"`, `<`, `>`,
    /// `{`, `}`, `|`, `^`, backtick).
    public init?(splitting text: String) {
        let bytes = Array(text.utf8)
        for b in bytes {
            if b <= 0x20 || b >= 0x7F { return nil }
            switch b {
            case UInt8(ascii: "\\"), UInt8(ascii: "\""), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "{"),
                UInt8(ascii: "}"), UInt8(ascii: "|"), UInt8(ascii: "^"), UInt8(ascii: "`"):
                return nil
            default: continue
            }
        }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return nil }
        let schemeBytes = bytes[0..<colon]
        guard isASCIILetter(schemeBytes.first!), schemeBytes.allSatisfy({ isASCIIAlphanumeric($0, or: "+-.") }) else {
            return nil
        }
        scheme = String(decoding: schemeBytes, as: UTF8.self)
        var rest = bytes[(colon + 1)...]
        if let hash = rest.firstIndex(of: UInt8(ascii: "#")) {
            fragment = String(decoding: rest[(hash + 1)...], as: UTF8.self)
            rest = rest[..<hash]
        } else {
            fragment = nil
        }
        if let question = rest.firstIndex(of: UInt8(ascii: "?")) {
            query = String(decoding: rest[(question + 1)...], as: UTF8.self)
            rest = rest[..<question]
        } else {
            query = nil
        }
        if rest.starts(with: [UInt8(ascii: "/"), UInt8(ascii: "/")]) {
            let afterSlashes = rest.index(rest.startIndex, offsetBy: 2)
            let authorityEnd = rest[afterSlashes...].firstIndex(of: UInt8(ascii: "/")) ?? rest.endIndex
            authority = String(decoding: rest[afterSlashes..<authorityEnd], as: UTF8.self)
            path = String(decoding: rest[authorityEnd...], as: UTF8.self)
        } else {
            authority = nil
            path = String(decoding: rest, as: UTF8.self)
        }
    }

    /// The host of the authority (userinfo and port removed), as written.
    public var host: String? {
        guard var a = authority else { return nil }
        if let at = a.lastIndex(of: "@") { a = String(a[a.index(after: at)...]) }
        if a.hasPrefix("[") {
            guard let close = a.firstIndex(of: "]") else { return a }
            return String(a[...close])
        }
        if let colon = a.firstIndex(of: ":") { return String(a[..<colon]) }
        return a
    }

    /// The port text after the host, if the authority has one (may be empty or non-numeric).
    public var portText: String? {
        guard var a = authority else { return nil }
        if let at = a.lastIndex(of: "@") { a = String(a[a.index(after: at)...]) }
        if a.hasPrefix("[") {
            guard let close = a.firstIndex(of: "]") else { return nil }
            let after = a[a.index(after: close)...]
            return after.hasPrefix(":") ? String(after.dropFirst()) : nil
        }
        guard let colon = a.firstIndex(of: ":") else { return nil }
        return String(a[a.index(after: colon)...])
    }

    public var hasUserinfo: Bool { authority?.contains("@") ?? false }

    /// scheme + authority + path, lower-casing scheme and authority (§1: scheme
    /// and host compare case-insensitively; the path compares byte for byte).
    public var matchKey: String {
        var key = scheme.lowercased() + ":"
        if let authority { key += "//" + authority.lowercased() }
        return key + path
    }
}

@inline(__always) func isASCIILetter(_ b: UInt8) -> Bool { (b | 0x20) >= 0x61 && (b | 0x20) <= 0x7A }
@inline(__always) func isASCIIDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
/// An ASCII letter, digit, or one of the characters of `extra`.
func isASCIIAlphanumeric(_ b: UInt8, or extra: String) -> Bool {
    isASCIILetter(b) || isASCIIDigit(b) || extra.utf8.contains(b)
}
/// The value of one hex digit (either case); nil for any other byte.
@inline(__always) public func hexValue(_ b: UInt8) -> UInt8? {
    switch b {
    case 0x30...0x39: return b - 0x30
    case 0x41...0x46: return b - 0x41 + 10
    case 0x61...0x66: return b - 0x61 + 10
    default: return nil
    }
}

/// Percent-decodes `text`; nil for a malformed escape or a decoded NUL or
/// control character, or bytes that are not UTF-8.
public func percentDecode(_ text: Substring) -> String? {
    var out: [UInt8] = []
    out.reserveCapacity(text.utf8.count)
    var it = Array(text.utf8)[...]
    while let b = it.first {
        it = it.dropFirst()
        if b == UInt8(ascii: "%") {
            guard it.count >= 2, let hi = hexValue(it[it.startIndex]), let lo = hexValue(it[it.startIndex + 1]) else {
                return nil
            }
            let decoded = hi << 4 | lo
            if decoded < 0x20 || decoded == 0x7F { return nil }
            out.append(decoded)
            it = it.dropFirst(2)
        } else {
            out.append(b)
        }
    }
    return String(validating: out, as: UTF8.self)
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
public func percentEncode(_ text: String) -> String {
    var out = ""
    for b in text.utf8 {
        if isASCIIAlphanumeric(b, or: "-._~") {
            out.unicodeScalars.append(Unicode.Scalar(b))
        } else {
            let hex = Array("0123456789ABCDEF".utf8)
            out.unicodeScalars.append("%")
            out.unicodeScalars.append(Unicode.Scalar(hex[Int(b >> 4)]))
            out.unicodeScalars.append(Unicode.Scalar(hex[Int(b & 0xF)]))
        }
    }
    return out
}
