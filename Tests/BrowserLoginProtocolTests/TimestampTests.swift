import Testing

@testable import BrowserLoginProtocol

@Suite struct TimestampTests {
    @Test func roundTripsExactly() throws {
        for text in ["2026-11-30T16:20:38.123Z", "1970-01-01T00:00:00.000Z", "2000-02-29T23:59:59.999Z"] {
            let t = try #require(Timestamp(rfc3339: text))
            #expect(t.rfc3339 == text)
        }
    }

    @Test(arguments: [
        "2026-11-30T16:20:38Z", "2026-11-30T16:20:38.12Z", "2026-11-30T16:20:38.123+00:00",
        "2026-02-30T00:00:00.000Z", "2026-13-01T00:00:00.000Z", "2026-11-30 16:20:38.123Z",
    ])
    func refusesOtherForms(_ text: String) {
        #expect(Timestamp(rfc3339: text) == nil)
    }
}
