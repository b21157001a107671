import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The exposure `systemd-analyze security --offline=true` gives
/// systemd/browser-login-server.service (systemd 252; docs/server.md,
/// "Running it with systemd"). Lower is better; a change that raises it must
/// say why there.
let measuredServerExposure = 1.1

/// The server's system unit: `Type=notify` (the server sends READY=1, tested
/// in EmailLinkTests) and its hardening, as systemd itself rates it.
@Suite(.dedicatedThread) struct ServerUnitTests {
    static let analyze = "/usr/bin/systemd-analyze"
    static var unit: String { repositoryRoot + "/systemd/browser-login-server.service" }

    @Test func theUnitWaitsForReadinessFromTheServerItself() throws {
        let text = try String(contentsOfFile: Self.unit, encoding: .utf8)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.contains("Type=notify"))
        #expect(lines.contains("NotifyAccess=main"))
        #expect(lines.contains { $0.hasPrefix("ExecStart=@bindir@/browser-login-server serve") })
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: analyze)))
    func theUnitScoresNoWorseThanTheMeasuredExposure() throws {
        let directory = try TemporaryDirectory("unit-test")
        let path = directory.path + "/browser-login-server.service"
        let text = try String(contentsOfFile: Self.unit, encoding: .utf8).replacingOccurrences(of: "@bindir@", with: "/usr/bin")
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        let run = try runProgram(Self.analyze, ["security", "--offline=true", "--no-pager", path])
        let marker = "Overall exposure level for browser-login-server.service: "
        let line = try #require(run.out.split(separator: "\n").first { $0.contains(marker) }, "\(run.out)\(run.err)")
        let exposure = try #require(line.components(separatedBy: marker)[1].split(separator: " ").first.flatMap { Double($0) })
        #expect(exposure <= measuredServerExposure, "exposure \(exposure): \(run.out.suffix(3000))")
        for setting in [
            "NoNewPrivileges=", "PrivateUsers=", "PrivateMounts=", "ProtectSystem=", "ProtectHome=", "PrivateTmp=",
            "PrivateDevices=", "SystemCallFilter=~@privileged", "MemoryDenyWriteExecute=", "CapabilityBoundingSet=~CAP_SYS_ADMIN",
            "RestrictAddressFamilies=~AF_PACKET", "RestrictNamespaces=~user",
        ] {
            let row = run.out.split(separator: "\n").first { $0.dropFirst(2).hasPrefix(setting) }
            #expect(row?.hasPrefix("✓") == true, "\(setting): \(row ?? "missing")")
        }
    }
}
