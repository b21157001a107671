#if canImport(Glibc)
    import Glibc
#endif

/// A point in time with millisecond precision, written on the wire as an
/// RFC 3339 UTC string with exactly three fraction digits
/// (`2026-11-30T16:20:38.123Z`). Parsing then formatting gives back the same
/// string, byte for byte.
public struct Timestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public var millisecondsSince1970: Int64

    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    /// The current wall-clock time, truncated to milliseconds.
    public static func now() -> Timestamp {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Timestamp(millisecondsSince1970: Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000)
    }

    public func adding(milliseconds: Int64) -> Timestamp {
        Timestamp(millisecondsSince1970: millisecondsSince1970 + milliseconds)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    /// The RFC 3339 form, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public var rfc3339: String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        writeRFC3339(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `rfc3339`'s bytes to `out` (`ProtocolJSONWriter`), without making a string.
    public func writeRFC3339(to out: inout [UInt8]) {
        let ms = millisecondsSince1970
        let seconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
        let millis = ms - seconds * 1000
        var parts = tm()
        var t = time_t(seconds)
        gmtime_r(&t, &parts)
        // `%0Nd`: zero-padded to `width` characters, the sign included.
        func padded(_ value: Int, _ width: Int) {
            if value < 0 {
                out.append(UInt8(ascii: "-"))
                return padded(-value, width - 1)
            }
            var digits = 1
            var rest = value / 10
            while rest > 0 {
                digits += 1
                rest /= 10
            }
            for _ in digits..<max(digits, width) { out.append(UInt8(ascii: "0")) }
            var divisor = 1
            for _ in 1..<digits { divisor *= 10 }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        padded(Int(parts.tm_year) + 1900, 4)
        out.append(UInt8(ascii: "-"))
        padded(Int(parts.tm_mon) + 1, 2)
        out.append(UInt8(ascii: "-"))
        padded(Int(parts.tm_mday), 2)
        out.append(UInt8(ascii: "T"))
        padded(Int(parts.tm_hour), 2)
        out.append(UInt8(ascii: ":"))
        padded(Int(parts.tm_min), 2)
        out.append(UInt8(ascii: ":"))
        padded(Int(parts.tm_sec), 2)
        out.append(UInt8(ascii: "."))
        padded(Int(millis), 3)
        out.append(UInt8(ascii: "Z"))
    }

    public var description: String { rfc3339 }

    /// Parses the strict wire form: `YYYY-MM-DDTHH:MM:SS.mmmZ`. Returns nil
    /// for anything else (other offsets, missing or extra fraction digits).
    public init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 24 else { return nil }
        func digits(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                let b = bytes[i]
                guard b >= 0x30, b <= 0x39 else { return nil }
                value = value * 10 + Int(b - 0x30)
            }
            return value
        }
        let separators: [(Int, UInt8)] = [(4, 0x2D), (7, 0x2D), (10, 0x54), (13, 0x3A), (16, 0x3A), (19, 0x2E), (23, 0x5A)]
        for (index, byte) in separators where bytes[index] != byte { return nil }
        guard let year = digits(0..<4), let month = digits(5..<7), let day = digits(8..<10),
            let hour = digits(11..<13), let minute = digits(14..<16), let second = digits(17..<19),
            let millis = digits(20..<23)
        else { return nil }
        guard (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        // timegm normalises 31 February into March: refuse dates that moved.
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        self.millisecondsSince1970 = Int64(seconds) * 1000 + Int64(millis)
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = Timestamp(rfc3339: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "not an RFC 3339 UTC timestamp with milliseconds")
        }
        self = value
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rfc3339)
    }
}
