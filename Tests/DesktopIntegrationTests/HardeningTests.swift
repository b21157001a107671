import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The exposure `systemd-analyze security --offline=true --user` gave the
/// installed broker unit when its hardening was last reviewed (systemd 252,
/// docs/desktop.md, "Hardening"). Lower is better; a change that raises it
/// must say why there.
let measuredBrokerExposure = 3.7

/// Whether this systemd-analyze can judge a unit file without a running
/// manager (`security --offline=`, systemd 252 and later).
let offlineSecurityAnalysisAvailable: Bool = {
    guard let help = try? runTool(["systemd-analyze", "--help"]) else { return false }
    return help.status == 0 && help.output.contains("--offline")
}()

/// Whether this process may create a user namespace with its own user mapped
/// to itself, as a user manager does for `PrivateUsers=yes`.
let userNamespacesAvailable: Bool = {
    guard let probe = try? runTool(["unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "true"])
    else { return false }
    return probe.status == 0
}()

/// Settings a user manager can apply only in a user namespace of the
/// service's own: `PrivateUsers=yes` itself, and those systemd 253 and later
/// turn it on for implicitly (systemd pull request 25233).
let settingsThatNeedAUserNamespace = [
    "PrivateUsers", "PrivateTmp", "PrivateDevices", "PrivateNetwork", "PrivateIPC", "PrivateMounts", "MountAPIVFS",
    "ProtectSystem", "ProtectHome", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectClock", "ProtectHostname", "ProtectProc", "ProcSubset", "ReadWritePaths",
    "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "TemporaryFileSystem", "BindPaths",
    "BindReadOnlyPaths", "RootDirectory", "RootImage", "NetworkNamespacePath", "IPCNamespacePath",
]

@Suite("The broker unit's hardening", .dedicatedThread)
struct HardeningTests {
    @Test(.enabled(if: offlineSecurityAnalysisAvailable, "systemd-analyze has no --offline mode here"))
    func theInstalledUnitScoresNoWorseThanTheMeasuredExposure() throws {
        let prefix = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let make = try runTool(
            ["make", "-s", "install", "PREFIX=\(prefix)", "BINDIR_SRC=\(binDirectory)"], directory: repositoryRoot)
        try #require(make.status == 0, "\(make.output)")
        // The analysis needs a runtime directory to stand for %t.
        try FileManager.default.createDirectory(atPath: prefix + "/run", withIntermediateDirectories: true)
        chmod(prefix + "/run", 0o700)
        let analysis = try runTool(
            [
                "systemd-analyze", "security", "--offline=true", "--user", "--no-pager",
                prefix + "/lib/systemd/user/browser-login-broker.service",
            ], environment: ["XDG_RUNTIME_DIR": prefix + "/run"])
        let marker = "Overall exposure level for browser-login-broker.service: "
        let line = try #require(
            analysis.output.split(separator: "\n").first { $0.contains(marker) }, "\(analysis.output.suffix(2000))")
        let value = line.components(separatedBy: marker)[1].split(separator: " ").first.flatMap { Double($0) }
        let exposure = try #require(value, "\(line)")
        #expect(exposure <= measuredBrokerExposure, "exposure \(exposure): \(analysis.output.suffix(3000))")
        // The settings a user manager does enforce are all in force.
        for setting in [
            "NoNewPrivileges=", "SystemCallFilter=~@privileged", "SystemCallFilter=~@mount",
            "SystemCallArchitectures=", "MemoryDenyWriteExecute=", "LockPersonality=", "RestrictRealtime=",
            "RestrictSUIDSGID=", "RestrictNamespaces=~user", "RestrictAddressFamilies=~AF_PACKET",
            "RestrictAddressFamilies=~AF_NETLINK", "KeyringMode=",
        ] {
            let row = analysis.output.split(separator: "\n").first { $0.dropFirst(2).hasPrefix(setting) }
            #expect(row?.hasPrefix("✓") == true, "\(setting): \(row ?? "missing")")
        }
    }

    @Test func theUnitSetsNothingThatPutsTheBrokerInAUserNamespace() throws {
        let service = try String(
            contentsOfFile: repositoryRoot + "/systemd/browser-login-broker.service", encoding: .utf8)
        let keys = service.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap {
            $0.split(separator: "=", maxSplits: 1).first.map(String.init)
        }
        for key in settingsThatNeedAUserNamespace { #expect(!keys.contains(key), "\(key)= would break Peers=") }
        for line in ["NoNewPrivileges=yes", "SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes"] {
            #expect(service.contains(line + "\n"), "\(line)")
        }
    }

    /// Why the unit has no namespace settings: Peers= reads a client's
    /// `/proc/PID/exe` and `/proc/PID/root`, and the kernel lets a process in
    /// a user namespace read neither for a process of the same user outside it.
    @Test(.enabled(if: userNamespacesAvailable, "user namespaces cannot be created here"))
    func aUserNamespaceHidesAPeersExecutable() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let peer = try SpawnedProcess(
            ["/usr/bin/sleep", "60"], environment: ProcessInfo.processInfo.environment, log: dir + "/log")
        defer { _ = peer.stop() }
        let path = "/proc/\(peer.pid)/exe"
        let outside = try runTool(["readlink", path])
        #expect(outside.status == 0 && outside.output.hasPrefix("/usr/bin/sleep"), "\(outside.output)")
        let inside = try runTool([
            "unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "readlink", path,
        ])
        #expect(inside.status != 0, "\(inside.output)")
        let root = try runTool([
            "unshare", "-U", "--map-user=\(getuid())", "--map-group=\(getgid())", "ls", "/proc/\(peer.pid)/root/",
        ])
        #expect(root.status != 0, "\(root.output)")
    }
}
