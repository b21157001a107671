import Testing

@testable import BrowserLoginProtocol

/// The bodies that write themselves (`ProtocolJSONWritable`) write what the
/// `Encodable` path writes for the same value, byte for byte.
@Suite struct ProtocolJSONWriterTests {
    /// Strings that need each kind of escape, non-ASCII text, DEL (written as
    /// it is in protocol bodies) and the empty string.
    static let strings = [
        "", "plain", "with \"quotes\" and \\backslash\\", "line\nbreak\r\ttab\u{08}\u{0C}", "\u{01}\u{1F}\u{7F}",
        "https://example.test/a/b?c=d&e=f", "Zoë Ünïcødé 名前 🙂", "at_0123456789abcdefABCDEF-_",
    ]

    static func string(_ n: Int) -> String { strings[n % strings.count] }

    static func timestamp(_ n: Int) -> Timestamp {
        Timestamp(millisecondsSince1970: [0, 1_796_055_638_123, -1, 253_402_300_799_999, 42][n % 5])
    }

    static func session(_ n: Int) -> IssuedSession {
        IssuedSession(
            sessionId: string(n), accessToken: string(n + 1),
            accessTokenExpiresAt: n % 2 == 0 ? timestamp(n) : nil, refreshToken: n % 3 == 0 ? nil : string(n + 2),
            expiresAt: n % 4 == 1 ? nil : timestamp(n + 1), authenticatedAt: timestamp(n + 2), authMethod: string(n + 3),
            account: Account(userId: string(n + 4), email: string(n + 5), displayName: string(n + 6)),
            dpopKey: n % 5 == 0 ? string(n + 7) : nil)
    }

    /// The `Encodable` path's bytes, which `ProtocolJSON.encode` used for every body before.
    static func encodable(_ value: some Encodable) throws -> [UInt8] { try JSONValueEncoder.serialize(value) }

    @Test(arguments: 0..<40)
    func anExchangeAnswerIsWrittenAsItsEncodableForm(_ n: Int) throws {
        let answer = ExchangeResponse(
            session: Self.session(n),
            receipt: Receipt(
                attemptId: Self.string(n + 3), sessionId: Self.string(n), issuedAt: Self.timestamp(n + 3),
                tokenDigest: Self.string(n + 4)))
        let written = try ProtocolJSON.encode(answer)
        #expect(written == (try Self.encodable(answer)))
        #expect(try JSONValue.parse(written).decode(ExchangeResponse.self) == answer)
    }

    @Test(arguments: 0..<16)
    func aCreateAnswerIsWrittenAsItsEncodableForm(_ n: Int) throws {
        let answer = CreateAttemptResponse(
            attemptId: Self.string(n), authorizeUrl: Self.string(n + 1), expiresAt: Self.timestamp(n),
            issuer: Self.string(n + 2))
        let written = try ProtocolJSON.encode(answer)
        #expect(written == (try Self.encodable(answer)))
        #expect(try JSONValue.parse(written).decode(CreateAttemptResponse.self) == answer)
    }

    /// A body without a writer of its own still goes the `Encodable` way.
    @Test func otherBodiesAreEncoded() throws {
        let status = ["state": "pending", "z": "last", "a": "first"]
        #expect(try ProtocolJSON.encode(status) == Array(#"{"a":"first","state":"pending","z":"last"}"#.utf8))
    }
}
