import Foundation
import Testing

@testable import BrowserLoginProtocol

/// `Base64` and `Hex` write and read what Foundation's `Data` and `%02x` do.
@Suite struct Base64Tests {
    @Test func encodingIsFoundations() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + length) }
            let foundation = Data(bytes).base64EncodedString()
            #expect(Base64.encode(bytes) == foundation)
            #expect(Base64.decode(foundation) == bytes)
            #expect(Hex.encode(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
        }
    }

    @Test(arguments: [
        "", "QQ==", "QUI=", "QUJD", "QQ", "QQ=", "Q===", "QQ==QUJD", "QUJD\n", " QUJD", "QUJ*", "QR==", "////",
        "++++", "-_-_", "QUJDRA==", "=QUJ",
    ])
    func decodingAcceptsAndRefusesAsFoundation(_ text: String) {
        #expect(Base64.decode(text) == Data(base64Encoded: text).map { Array($0) })
    }

    /// Foundation reads a `=` before the last data character (`QU=D` as `[65, 3]`); RFC 4648 §3.3 does not.
    @Test func paddingInsideTheTextIsRefused() {
        #expect(Base64.decode("QU=D") == nil)
        #expect(Base64.decode("QUJD") == Array("ABC".utf8))
    }
}
