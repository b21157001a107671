import BrowserLoginProtocol
import Foundation

/// The sign-in email as Internet mail (RFC 5322, MIME RFC 2045–2047): a
/// `multipart/alternative` of a text and an HTML part, both UTF-8 in
/// quoted-printable, with `Date`, `Message-ID` and encoded headers. Also
/// reads such a message back (the outbox and the tests).
public enum MailFormat {
    /// The whole message, CRLF line ends.
    static func render(_ message: MailMessage, date: Int64, messageId: String, boundary: String) -> String {
        var lines = [
            "From: " + mailbox(message.from, name: message.fromName),
            "To: " + message.to,
            "Subject: " + encodedWords(message.subject),
            "Date: " + rfc5322Date(millisecondsSince1970: date),
            "Message-ID: <" + messageId + ">",
            // RFC 3834: no vacation replies to a sign-in email.
            "Auto-Submitted: auto-generated",
            "MIME-Version: 1.0",
        ]
        func part(_ type: String, _ text: String) -> [String] {
            [
                "Content-Type: \(type); charset=utf-8", "Content-Transfer-Encoding: quoted-printable", "",
                quotedPrintable(text),
            ]
        }
        if let html = message.html {
            lines.append("Content-Type: multipart/alternative; boundary=\"\(boundary)\"")
            lines.append("")
            lines.append("This is a message in MIME format: a text part and an HTML part.")
            lines.append("--" + boundary)
            lines += part("text/plain", message.body)
            lines.append("--" + boundary)
            lines += part("text/html", html)
            lines.append("--" + boundary + "--")
        } else {
            lines += part("text/plain", message.body)
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// `Wed, 02 Dec 2026 14:41:05 +0000` (RFC 5322 §3.3, in UTC).
    static func rfc5322Date(millisecondsSince1970 ms: Int64) -> String {
        var seconds = time_t(ms / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) +0000"
    }

    /// `address` with its display name: quoted when it is plain ASCII, as
    /// encoded words (RFC 2047) otherwise.
    static func mailbox(_ address: String, name: String?) -> String {
        guard let name, !name.isEmpty else { return address }
        let plain = name.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } && !name.contains("=?")
        let shown =
            plain
            ? "\"" + name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
            : encodedWords(name)
        return shown + " <" + address + ">"
    }

    /// `text` as it is when it is printable ASCII, else as RFC 2047 `B`
    /// encoded words of at most 39 bytes of UTF-8 each (folded with CRLF SP), so
    /// a header line stays within 76 characters (RFC 2047 §2).
    static func encodedWords(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) && !text.contains("=?") && text.utf8.count <= 900 {
            return text
        }
        var words: [[UInt8]] = []
        var chunk: [UInt8] = []
        for scalar in text.unicodeScalars {
            let bytes = Array(String(scalar).utf8)
            if chunk.count + bytes.count > 39 {
                words.append(chunk)
                chunk = []
            }
            chunk += bytes
        }
        if !chunk.isEmpty || words.isEmpty { words.append(chunk) }
        return words.map { "=?utf-8?B?" + Data($0).base64EncodedString() + "?=" }.joined(separator: "\r\n ")
    }

    /// Quoted-printable (RFC 2045 §6.7) of `text`'s UTF-8, lines at most 76
    /// characters, CRLF line ends; a line's leading dot and trailing white
    /// space are encoded too.
    static func quotedPrintable(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF")
        var out: [String] = []
        let lines = text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false)
        for line in lines {
            let bytes = Array(line.utf8)
            var current = ""
            for (index, byte) in bytes.enumerated() {
                let last = index == bytes.count - 1
                let literal =
                    (byte >= 33 && byte <= 126 && byte != UInt8(ascii: "="))
                    || ((byte == 32 || byte == 9) && !last)
                let leadingDot = byte == UInt8(ascii: ".") && current.isEmpty
                let piece =
                    literal && !leadingDot
                    ? String(UnicodeScalar(byte)) : "=" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
                if current.count + piece.count > 75 {
                    out.append(current + "=")
                    current = ""
                }
                current += piece
            }
            out.append(current)
        }
        return out.joined(separator: "\r\n")
    }

    // MARK: Reading

    /// A received message: its headers (unfolded), the decoded subject, and
    /// the decoded text and HTML parts.
    public struct Parsed: Sendable {
        public var headers: [(name: String, value: String)]
        public var subject: String
        public var text: String?
        public var html: String?

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    /// Reads a message as this server writes it (and as most mail is): nil when it has no header block.
    public static func parse(_ raw: String) -> Parsed? {
        let text = raw.replacingOccurrences(of: "\r\n", with: "\n")
        guard let split = text.range(of: "\n\n") else { return nil }
        let headers = unfold(String(text[..<split.lowerBound]))
        let body = String(text[split.upperBound...])
        var parsed = Parsed(
            headers: headers, subject: decodeWords(headers.first { $0.name.lowercased() == "subject" }?.value ?? ""))
        collect(headers: headers, body: body, into: &parsed)
        return parsed
    }

    private static func unfold(_ block: String) -> [(name: String, value: String)] {
        var out: [(name: String, value: String)] = []
        for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.first == " " || line.first == "\t", !out.isEmpty {
                out[out.count - 1].value += " " + line.trimmingCharacters(in: .whitespaces)
            } else if let colon = line.firstIndex(of: ":") {
                out.append(
                    (String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
            }
        }
        return out
    }

    private static func collect(headers: [(name: String, value: String)], body: String, into parsed: inout Parsed) {
        let type = headers.first { $0.name.lowercased() == "content-type" }?.value ?? "text/plain"
        let lower = type.lowercased()
        if lower.hasPrefix("multipart/"), let range = type.range(of: "boundary=") {
            var boundary = String(type[range.upperBound...])
            if let semicolon = boundary.firstIndex(of: ";") { boundary = String(boundary[..<semicolon]) }
            boundary = boundary.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
            let pieces = body.components(separatedBy: "--" + boundary)
            for piece in pieces.dropFirst() where !piece.hasPrefix("--") {
                let part = piece.hasPrefix("\n") ? String(piece.dropFirst()) : piece
                guard let split = part.range(of: "\n\n") else { continue }
                var content = String(part[split.upperBound...])
                if content.hasSuffix("\n") { content.removeLast() }
                collect(headers: unfold(String(part[..<split.lowerBound])), body: content, into: &parsed)
            }
            return
        }
        let encoding = headers.first { $0.name.lowercased() == "content-transfer-encoding" }?.value.lowercased() ?? ""
        let decoded: String
        switch encoding {
        case "quoted-printable": decoded = decodeQuotedPrintable(body)
        case "base64":
            decoded = String(
                decoding: Data(base64Encoded: body.filter { !$0.isWhitespace }) ?? Data(), as: UTF8.self)
        default: decoded = body
        }
        if lower.hasPrefix("text/html") {
            parsed.html = decoded
        } else if lower.hasPrefix("text/plain") {
            parsed.text = decoded
        }
    }

    static func decodeQuotedPrintable(_ text: String) -> String {
        var out: [UInt8] = []
        let bytes = Array(text.utf8)
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "="), i + 1 < bytes.count, bytes[i + 1] == 10 {
                i += 2
            } else if b == UInt8(ascii: "="), i + 2 < bytes.count, let hi = hexValue(bytes[i + 1]),
                let lo = hexValue(bytes[i + 2])
            {
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(b)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes RFC 2047 `B` encoded words (the ones this server writes).
    static func decodeWords(_ value: String) -> String {
        guard value.contains("=?") else { return value }
        var out = ""
        for word in value.split(separator: " ") {
            let w = String(word)
            if w.lowercased().hasPrefix("=?utf-8?b?"), w.hasSuffix("?="),
                let data = Data(base64Encoded: String(w.dropFirst(10).dropLast(2)))
            {
                out += String(decoding: data, as: UTF8.self)
            } else {
                out += (out.isEmpty ? "" : " ") + w
            }
        }
        return out
    }
}
