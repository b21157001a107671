import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon reaches servers through its HTTP helper: it maps no libcurl itself, the helper lives while
/// there is work and a little after, and the next request starts another.
@Suite("The HTTP helper", .dedicatedThread)
struct HTTPHelperTests {
    func helpers(of broker: pid_t) -> [pid_t] {
        childProcesses(of: broker).filter { ProcFS.executable(pid: $0)?.hasSuffix("/browser-login-http") == true }
    }

    @Test func theDaemonSignsInWithoutLibcurlAndTheIdleHelperIsGone() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--http-idle", "1"])
        let broker = try #require(h.broker?.pid)
        _ = try h.signIn()
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")

        // The daemon itself has no HTTP or TLS stack mapped; its helper has.
        let maps = try #require(ProcFS.read("maps", pid: broker))
        #expect(!maps.contains("libcurl"))
        #expect(!maps.contains("libssl"))
        // Nor libmicrohttpd and GnuTLS: only an OAuth loopback listener loads them (ProviderSignInTests).
        #expect(!maps.contains("libmicrohttpd"))
        #expect(!maps.contains("libgnutls"))
        // Nor libcrypto: a Browser Login sign-in hashes with GLib and takes its randomness from the kernel;
        // only an ID token's signature or the file vault loads it (ProviderSignInTests, FileVaultTests).
        #expect(!maps.contains("libcrypto"))

        // Idle for a second: the helper exits and is reaped (no process, not even a zombie, is left).
        try waitUntil(15, "the idle HTTP helper to be gone") { helpers(of: broker).isEmpty }

        // The next request starts a helper again: signing out revokes at the server.
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
        _ = try h.signIn()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
    }

    @Test func aKilledHelperIsReplacedAndTheDaemonKeepsServing() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--http-idle", "60"])
        let broker = try #require(h.broker?.pid)
        _ = try h.signIn()
        let first = try #require(helpers(of: broker).first)
        kill(first, SIGKILL)
        try waitUntil(15, "the killed helper to be reaped") { !helpers(of: broker).contains(first) }
        let rpc = try h.rpc()
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        _ = try h.signIn()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
        let second = try #require(helpers(of: broker).first)
        #expect(second != first)
    }
}
