import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The broker's wall clock jumping (an NTP step, a suspended laptop, a
/// wrong RTC): the broker runs under libfaketime, whose offset the test
/// rewrites while it runs. Only `CLOCK_REALTIME` is faked, as in a real
/// step; the server keeps the true time.
///
/// libfaketime 0.9.10 also shifts absolute `timerfd_settime` deadlines of
/// `CLOCK_MONOTONIC` timers by its offset (even with
/// `FAKETIME_DONT_FAKE_MONOTONIC`), which a real clock step never does: with
/// a negative offset the broker's Dispatch timers (its 250 ms tick) stall for
/// that long. So after a backward jump these tests check only what RPC calls
/// show, never timer work.
///
/// Alone (no other blocking test runs meanwhile): the checks right after a
/// jump hold only when the broker is not slowed down by other tests' load.
@Suite("Faults of the outside world: the clock", .serialized, .alone)
struct ClockFaultTests {
    static let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
    static let available = FileManager.default.fileExists(atPath: library)
    static let client: JSONValue = .string(FaultClient.id)

    /// The broker behind the hostile proxy (for its request counts), with a
    /// clock whose offset `jump` sets.
    static func world(sessionMs: Int? = nil) throws -> (Harness, HostileProxy, (String) -> Void) {
        let h = try Harness()
        let offsetFile = h.dir + "/faketime"
        let jump: (String) -> Void = { offset in
            _ = FileManager.default.createFile(atPath: offsetFile + ".tmp", contents: Data((offset + "\n").utf8))
            rename(offsetFile + ".tmp", offsetFile)
        }
        jump("+0")
        let proxy = try h.startBehindProxy(
            sessionMs: sessionMs,
            brokerEnvironment: [
                "LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": offsetFile, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            ])
        return (h, proxy, jump)
    }

    /// The broker's idea of now, from the `updatedAt` of an attempt it just wrote.
    static func brokerNow(_ rpc: RPCClient, _ id: String) throws -> Timestamp? {
        try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": false])["updatedAt"]?.stringValue
            .flatMap { Timestamp(rfc3339: $0) }
    }

    @Test(.enabled(if: available, "needs libfaketime (Debian package faketime)"))
    func aForwardJumpExpiresAWaitingAttemptAndABackwardJumpDoesNotRevive() throws {
        let (h, proxy, jump) = try Self.world()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (id, callback) = try h.authorizeFaultClient(rpc)
        // libfaketime reaches the Swift runtime: the broker stamps its records with the faked time.
        jump("+1h")
        _ = try rpc.call("login.resume", params: ["attemptId": .string(id), "openBrowser": false])
        try waitUntil(10, "the attempt to expire locally") { try attemptState(rpc, id) == "expired" }
        let stamped = try #require(try Self.brokerNow(rpc, id))
        #expect(stamped.millisecondsSince1970 - Timestamp.now().millisecondsSince1970 > 3_000_000)
        // A late callback is refused; nothing is exchanged; the server attempt is cancelled once.
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "ATTEMPT_EXPIRED")
        try waitUntil(10, "the server attempt to be cancelled") { proxy.count("cancel") == 1 }
        // The clock goes back: the attempt stays expired, nothing is sent again.
        jump("-1h")
        usleep(2_000_000)
        #expect(try attemptState(rpc, id) == "expired")
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "ATTEMPT_EXPIRED")
        #expect(proxy.count("exchange") == 0)
        #expect(proxy.count("cancel") == 1)
        #expect(proxy.count("create") == 1)
        // A new sign-in works on the skewed clock.
        let (_, second) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(second)])["state"] == "completed")
        #expect(h.broker?.isRunning == true)
    }

    @Test(.enabled(if: available, "needs libfaketime (Debian package faketime)"))
    func aForwardJumpWhileSignedInRefreshesAndExpiresOnlyAtTheAbsoluteExpiry() throws {
        // Access tokens live 10 minutes (the default), the session 2 hours.
        let (h, proxy, jump) = try Self.world(sessionMs: 7_200_000)
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (_, callback) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
        usleep(1_000_000)
        #expect(proxy.count("refresh") == 0)

        // Twelve minutes later on the broker's clock: the access token looks expired; it is refreshed.
        jump("+12m")
        try waitUntil(10, "the access token to be refreshed") { proxy.count("refresh") >= 1 }
        usleep(3_000_000)
        let burst = proxy.count("refresh")
        #expect(burst <= 2, "the broker refreshed \(burst) times in 3 s")
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedIn")
        let request: JSONValue = ["client": Self.client, "method": "GET", "path": "/api/me"]
        #expect(try rpc.call("http.request", params: request)["status"] == 200)

        // Past the session's absolute expiry on the broker's clock: expired, never refreshed for it.
        jump("+3h")
        try waitUntil(10, "the session to expire") {
            try rpc.call("session.get", params: ["client": Self.client])["status"] == "expired"
        }
        #expect(try errorCode(rpc, "http.request", request) == "NOT_SIGNED_IN")
        let refreshes = proxy.count("refresh")

        // The clock goes back: the session does not come back to life, nothing is sent for it.
        jump("-1h")
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "expired")
        #expect(try errorCode(rpc, "http.request", request) == "NOT_SIGNED_IN")
        #expect(proxy.count("refresh") == refreshes)
        #expect(h.broker?.isRunning == true)
    }

    /// A backward jump while signed in: the access token looks younger, so
    /// nothing is refreshed early and the app's requests keep working (the
    /// server's own `401 TOKEN_EXPIRED` would still trigger a refresh).
    @Test(.enabled(if: available, "needs libfaketime (Debian package faketime)"))
    func aBackwardJumpWhileSignedInChangesNothing() throws {
        let (h, proxy, jump) = try Self.world()
        defer {
            proxy.stop()
            h.removeAll()
        }
        let rpc = try h.rpc()
        let (_, callback) = try h.authorizeFaultClient(rpc)
        #expect(try rpc.call("login.finish", params: ["url": .string(callback)])["state"] == "completed")
        jump("-1h")
        let request: JSONValue = ["client": Self.client, "method": "GET", "path": "/api/me"]
        for _ in 0..<3 { #expect(try rpc.call("http.request", params: request)["status"] == 200) }
        #expect(proxy.count("refresh") == 0)
        #expect(proxy.count("exchange") == 1)
        #expect(try rpc.call("session.get", params: ["client": Self.client])["status"] == "signedIn")
        #expect(try rpc.call("session.signOut", params: ["client": Self.client])["status"] == "signedOut")
        #expect(proxy.count("revoke") == 1)
    }
}
