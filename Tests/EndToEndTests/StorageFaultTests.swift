import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A small tmpfs mounted over the harness's state directory, which the test
/// can fill up and free again.
final class SmallStateDisk: @unchecked Sendable {
    // Safe: used by one test from one task.
    let path: String
    var filler: String { path + "/../disk-filler" }

    init(over path: String, size: String = "4m") throws {
        self.path = path
        let out = try PrivateKeyring.run(
            "/bin/sh", ["-c", "mount -t tmpfs -o size=\(size),mode=0700 tmpfs '\(path)' 2>&1 && echo mounted"], env: [:])
        guard out.contains("mounted") else { throw HarnessError("cannot mount a tmpfs: \(out)") }
    }

    /// Fills the disk: every further block the broker needs fails with ENOSPC.
    func fill() throws {
        try PrivateKeyring.run(
            "/bin/sh", ["-c", "dd if=/dev/zero of='\(path)/.filler' bs=4k >/dev/null 2>&1; sync; true"], env: [:])
    }

    func free() { unlink(path + "/.filler") }

    func unmount() {
        _ = try? PrivateKeyring.run("/bin/sh", ["-c", "umount -l '\(path)'"], env: [:])
    }
}

/// A full state directory (issue 14, item 9): a clear `STORAGE_UNAVAILABLE`
/// naming the directory, nothing lost, and recovery without a restart once
/// space is back — also for an exchange whose answer could not be recorded.
@Suite("Storage faults end to end", .dedicatedThread)
struct StorageFaultTests {
    static let canMount = getuid() == 0

    @Test(.enabled(if: canMount, "needs root to mount a small tmpfs"))
    func aFullDiskDuringAnExchangeIsReportedAndRecoveredWithoutARestart() throws {
        let h = try Harness()
        let disk = try SmallStateDisk(over: h.dir + "/state")
        defer {
            h.stopAll()
            disk.unmount()
        }
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "pause:after-session-in-vault"
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT_DIR"] = h.dir
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let attemptId = try #require(attempt["attemptId"]?.stringValue)

        // The exchange is answered and its session is in the vault; then the disk fills up.
        let answer = Mutex<Result<JSONValue, any Error>?>(nil)
        let socket = h.socketPath
        let finisher = Thread {
            let result = Result {
                try RPCClient(socketPath: socket, timeout: .seconds(60)).call("login.finish", params: ["url": .string(callback)])
            }
            answer.withLock { $0 = result }
        }
        finisher.start()
        let marker = h.dir + "/after-session-in-vault.paused"
        try waitUntil(15, "the exchange to pause") { FileManager.default.fileExists(atPath: marker) }
        try disk.fill()
        unlink(marker)
        try waitUntil(15, "login.finish to answer") { answer.withLock { $0 != nil } }
        guard case .failure(let error as RPCError)? = answer.withLock({ $0 }) else {
            Issue.record("login.finish should fail: \(String(describing: answer.withLock { $0 }))")
            return
        }
        #expect(error.applicationCode == "STORAGE_UNAVAILABLE")
        #expect(error.message.contains(h.dir + "/state"))
        #expect(error.message.lowercased().contains("no space"))

        // While the disk is full the broker keeps serving; nothing is lost.
        let rpc = try h.rpc()
        #expect(try rpc.call("broker.info")["protocol"] == 1)
        #expect(h.keyringLookup(["kind": "attempt", "client": "com.example.notes", "attempt": attemptId]) != nil)

        // Space is back: the attempt is reconciled and its session adopted, with no restart and no second exchange.
        disk.free()
        try waitUntil(20, "the session to be adopted") {
            try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn"
        }
        let settled = try rpc.call("login.status", params: ["attemptId": .string(attemptId), "reconcile": false])
        #expect(settled["state"] == "completed")
        #expect(
            try rpc.call("http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/api/me"])[
                "status"] == 200)
        let log = h.broker?.output ?? ""
        #expect(log.contains("the state directory cannot be written"))
        // Adopted by reconciliation, never exchanged a second time.
        #expect(log.contains("uncertain attempt adopted"))
        #expect(h.broker?.isRunning == true)
    }

    @Test(.enabled(if: canMount, "needs root to mount a small tmpfs"))
    func aFullDiskBeforeAnExchangeRefusesTheCallbackAndChangesNothing() throws {
        let h = try Harness()
        let disk = try SmallStateDisk(over: h.dir + "/state")
        defer {
            h.stopAll()
            disk.unmount()
        }
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let (attempt, callback) = try h.startAndAuthorize()
        let attemptId = try #require(attempt["attemptId"]?.stringValue)
        try disk.fill()
        let rpc = try h.rpc()
        #expect(try errorCode(rpc, "login.finish", ["url": .string(callback)]) == "STORAGE_UNAVAILABLE")
        #expect(
            try rpc.call("login.status", params: ["attemptId": .string(attemptId), "reconcile": false])["state"]
                == "waiting")
        disk.free()
        // The same callback, delivered again, completes the sign-in.
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        #expect(done["state"] == "completed")
        #expect(done["session"]?["status"] == "signedIn")
    }
}
