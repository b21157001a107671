import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// An app in a Flatpak sandbox reaches the D-Bus API and is bound by its app id (issue 35, item 2):
/// a real sandbox (bubblewrap, the tool Flatpak itself runs apps in) with a `/.flatpak-info` naming the
/// app, as Flatpak writes it. The broker reads the caller's `/proc/PID/root/.flatpak-info`: the app a
/// client file's `Peers=` lists is answered; another app, and a program outside any sandbox, get
/// `CLIENT_FORBIDDEN`, and the bound client is not even listed to them.
@Suite(.dedicatedThread)
struct FlatpakSandboxTests {
    static let bwrap = "/usr/bin/bwrap"

    /// `gdbus call` on the broker from inside a sandbox whose `/.flatpak-info` names `appId`: only /usr,
    /// /etc and the test's own directory (the session bus's socket is in it) are visible.
    static func callFromSandbox(_ h: Harness, appId: String, _ method: String, _ arguments: String...) throws -> (
        status: Int32, out: String, err: String
    ) {
        let info = h.dir + "/flatpak-info-\(appId)"
        try "[Application]\nname=\(appId)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n"
            .write(toFile: info, atomically: true, encoding: .utf8)
        let sandbox = [
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
            "--proc", "/proc", "--dev", "/dev", "--bind", h.dir, h.dir, "--ro-bind", info, "/.flatpak-info",
            "--die-with-parent", "--",
        ]
        return try runProgram(
            bwrap,
            sandbox + [
                "/usr/bin/gdbus", "call", "--session", "--timeout", "25", "--dest", DBusAPITests.name,
                "--object-path", "/org/browserlogin/Broker1", "--method", "\(DBusAPITests.name).\(method)",
            ] + arguments, environment: h.environment())
    }

    @Test func theListedAppIsAnsweredAndAnotherAppIsForbidden() throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.bwrap), "bubblewrap is missing: run scripts/install-deps")
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer(clients: [("com.example.notes", "Example Notes", "com.example.notes:/callback")])
        h.writeClient(extra: "Peers=org.example.Notes")
        try DBusAPITests.start(h)

        // The listed app, from its sandbox: answered (signed out, nothing yet), and the client is listed.
        let listed = try Self.callFromSandbox(h, appId: "org.example.Notes", "GetSession", "com.example.notes")
        #expect(listed.status == 0, "\(listed.err)")
        #expect(listed.out.contains("signedOut"), "\(listed.out)")
        let listedClients = try Self.callFromSandbox(h, appId: "org.example.Notes", "ListClients")
        #expect(listedClients.out.contains("com.example.notes"), "\(listedClients.out) \(listedClients.err)")

        // Another app, from a sandbox of its own: refused, and the client is not listed.
        let other = try Self.callFromSandbox(h, appId: "org.example.Other", "GetSession", "com.example.notes")
        #expect(other.status != 0)
        #expect(other.err.contains("org.browserlogin.Error.CLIENT_FORBIDDEN"), "\(other.err)")
        let otherClients = try Self.callFromSandbox(h, appId: "org.example.Other", "ListClients")
        #expect(otherClients.status == 0, "\(otherClients.err)")
        #expect(!otherClients.out.contains("com.example.notes"), "\(otherClients.out)")

        // A program outside any sandbox is not the app either.
        let outside = try DBusAPITests.call(h, "GetSession", "com.example.notes")
        #expect(outside.err.contains("org.browserlogin.Error.CLIENT_FORBIDDEN"), "\(outside.err)")
    }
}
