import BrowserLoginTestSupport
import Foundation
import LoginServer
import Testing

/// The sign-in email as Internet mail: what the outbox writes is what SMTP
/// sends, so a round trip through the outbox checks the MIME the server
/// builds (line lengths, quoted-printable, encoded words).
@Suite struct MailFormatTests {
    @Test func aMessageSurvivesTheRoundTripWithShortLinesAndEncodedHeaders() throws {
        let directory = try TemporaryDirectory("mail-format-test")
        let body =
            "Grüße, " + String(repeating: "long line ", count: 30) + "end\n.a line that starts with a dot\n"
            + "trailing spaces   \ntabs\tinside\n€ 😀 = equals\n\nlast"
        let html = "<p>" + String(repeating: "é", count: 120) + "</p>\n<a href=\"https://x.example/?a=1&amp;b=2\">x</a>"
        let message = MailMessage(
            to: "erin@example.org", subject: "Dein Anmeldecode für Österreich — " + String(repeating: "ä", count: 40),
            body: body, html: html, from: "login@example.com", fromName: "Sign-in \"Team\"")
        try OutboxMailSender(directory: directory.path).send(message)
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: directory.path).first)
        let raw = try String(contentsOfFile: directory.path + "/" + name, encoding: .utf8)
        // CRLF only, lines of at most 76 characters in the body, ASCII only.
        #expect(!raw.replacingOccurrences(of: "\r\n", with: "").contains("\n"))
        #expect(raw.utf8.allSatisfy { $0 < 0x80 })
        let lines = raw.components(separatedBy: "\r\n")
        #expect(lines.allSatisfy { $0.count <= 76 }, "\(lines.filter { $0.count > 76 })")
        #expect(!lines.contains { $0.hasPrefix(".") }, "a leading dot is encoded")
        #expect(lines.contains("From: \"Sign-in \\\"Team\\\"\" <login@example.com>"))
        #expect(lines.contains { $0.hasPrefix("Subject: =?utf-8?B?") })

        let read = try #require(OutboxMailSender.messages(in: directory.path, to: "erin@example.org").first)
        #expect(read.subject == message.subject)
        #expect(read.body == body)
        #expect(read.html == html)
    }
}
