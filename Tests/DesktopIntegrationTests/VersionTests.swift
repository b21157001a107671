import Broker
import BrowserLoginTestSupport
import Engine
import Foundation
import Testing

/// The version is written once, in VERSION at the repository's root (the
/// Makefile and the Debian packages read it); the programs carry it as Swift
/// constants, which these tests keep equal to it.
@Suite("One version: VERSION, the programs, the Debian changelog")
struct VersionTests {
    /// VERSION's one line.
    func fileVersion() throws -> String {
        try String(contentsOfFile: repositoryRoot + "/VERSION", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func theBrokerAndTheCommandSayVersionsVersion() throws {
        let version = try fileVersion()
        #expect(version.split(separator: ".").count == 3 && version.allSatisfy { $0.isNumber || $0 == "." })
        #expect(BrokerVersion.string == version)
        let command = try runTool([binDirectory + "/browser-login", "--version"])
        #expect(command.status == 0)
        #expect(command.output == "browser-login \(version)\n")
        let broker = try runTool([binDirectory + "/browser-login-broker", "--version"])
        #expect(broker.status == 0)
        #expect(broker.output == "browser-login-broker \(version)\n")
    }

    @Test func theDebianChangelogsNewestEntryIsForVersion() throws {
        let version = try fileVersion()
        let changelog = try String(contentsOfFile: repositoryRoot + "/packaging/deb/changelog", encoding: .utf8)
        let first = changelog.split(separator: "\n").first.map(String.init) ?? ""
        // "browser-login (0.1.0-1) unstable; urgency=medium": upstream version, a Debian revision.
        #expect(first.hasPrefix("browser-login (\(version)-"), "\(first)")
    }
}
