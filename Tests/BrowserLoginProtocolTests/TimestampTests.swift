import Foundation
import Testing

@testable import BrowserLoginProtocol

@Suite struct TimestampTests {
    @Test(arguments: [
        ("2026-11-30T16:20:38.123Z", Int64(1_796_055_638_123)),
        ("1970-01-01T00:00:00.000Z", 0),
        ("1970-01-01T00:00:00.001Z", 1),
        ("1969-12-31T23:59:59.999Z", -1),
        ("1969-12-31T23:59:59.000Z", -1000),
        ("2000-02-29T23:59:59.999Z", 951_868_799_999),
        ("2024-02-29T12:00:00.500Z", 1_709_208_000_500),
        ("2038-01-19T03:14:08.000Z", 2_147_483_648_000),
        ("0001-01-01T00:00:00.000Z", -62_135_596_800_000),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ])
    func roundTripsExactly(_ text: String, _ millis: Int64) throws {
        let t = try #require(Timestamp(rfc3339: text))
        #expect(t.millisecondsSince1970 == millis)
        #expect(t.rfc3339 == text)
        #expect(Timestamp(millisecondsSince1970: millis).rfc3339 == text)
        #expect(t.description == text)
    }

    @Test(arguments: [
        "2026-11-30T16:20:38Z", "2026-11-30T16:20:38.12Z", "2026-11-30T16:20:38.1234Z", "2026-11-30T16:20:38.123+00:00",
        "2026-11-30T16:20:38.123-01:00", "2026-11-30T16:20:38.123", "2026-02-30T00:00:00.000Z",
        "2023-02-29T00:00:00.000Z", "1900-02-29T00:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
        "2026-00-01T00:00:00.000Z", "2026-01-00T00:00:00.000Z", "2026-11-30 16:20:38.123Z", "2026-11-30t16:20:38.123z",
        "2026-11-30T24:00:00.000Z", "2026-11-30T23:60:00.000Z", "2016-12-31T23:59:60.000Z", "2026-11-30T16:20:38,123Z",
        "+2026-11-30T16:20:38.123Z", "2026-1-30T16:20:38.123Z", "２026-11-30T16:20:38.123Z", "", "2026-11-30T16:20:38.12aZ",
        " 2026-11-30T16:20:38.123Z",
    ])
    func refusesOtherForms(_ text: String) {
        #expect(Timestamp(rfc3339: text) == nil)
    }

    @Test func arithmeticAndOrder() throws {
        let t = try #require(Timestamp(rfc3339: "2026-11-30T16:20:38.123Z"))
        #expect(t.adding(milliseconds: 120_000).rfc3339 == "2026-11-30T16:22:38.123Z")
        #expect(t.adding(milliseconds: 877).rfc3339 == "2026-11-30T16:20:39.000Z")
        #expect(t.adding(milliseconds: -123).rfc3339 == "2026-11-30T16:20:38.000Z")
        #expect(t < t.adding(milliseconds: 1))
        #expect(!(t < t))
        // "Past expiresAt" means now >= expiresAt.
        #expect(t >= t)
    }

    /// The form is C's `%04d-%02d-%02dT%02d:%02d:%02d.%03dZ` of the UTC date,
    /// also for years of five digits and before year 0 (wider, and signed).
    @Test func theFormIsPrintfsForAnyMillisecond() {
        var generator = SystemRandomNumberGenerator()
        var values: [Int64] = [0, -1, 999, 1000, -62_167_219_200_001, 253_402_300_800_000, 3_000_000_000_000_000]
        values += (0..<2000).map { _ in Int64.random(in: -80_000_000_000_000...400_000_000_000_000, using: &generator) }
        for ms in values {
            let seconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
            var t = time_t(seconds)
            var parts = tm()
            gmtime_r(&t, &parts)
            let expected = String(
                format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(ms - seconds * 1000))
            #expect(Timestamp(millisecondsSince1970: ms).rfc3339 == expected, "\(ms)")
        }
    }

    @Test func nowHasMillisecondPrecisionAndRoundTrips() throws {
        let now = Timestamp.now()
        #expect(Timestamp(rfc3339: now.rfc3339) == now)
        #expect(now.millisecondsSince1970 > 1_700_000_000_000)
    }

    @Test func codableIsTheStringForm() throws {
        let t = Timestamp(millisecondsSince1970: 1_796_055_638_123)
        let data = try JSONEncoder().encode([t])
        #expect(String(decoding: data, as: UTF8.self) == #"["2026-11-30T16:20:38.123Z"]"#)
        #expect(try JSONDecoder().decode([Timestamp].self, from: data) == [t])
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode([Timestamp].self, from: Data(#"["2026-11-30T16:20:38Z"]"#.utf8))
        }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([Timestamp].self, from: Data("[1796055638123]".utf8)) }
    }
}
