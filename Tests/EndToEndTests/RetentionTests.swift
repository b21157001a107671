import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Bounded growth (docs/operations.md, retention): the real broker prunes
/// attempts that ended longer ago than `--retain-ended`, on its own timer,
/// and keeps the rest.
@Suite("Retention of ended attempts", .dedicatedThread)
struct RetentionTests {
    func attemptIds(_ rpc: RPCClient) throws -> [String] {
        let listed = try rpc.call("login.list", params: ["client": "com.example.notes"])
        return (listed.arrayValue ?? []).compactMap { $0["attemptId"]?.stringValue }
    }

    @Test func anEndedAttemptIsPrunedAfterTheRetentionTimeAndALiveOneIsKept() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--retain-ended", "2s"])
        let rpc = try h.rpc()
        let first = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let ended = try #require(first["attemptId"]?.stringValue)
        _ = try rpc.call("login.cancel", params: ["attemptId": .string(ended)])
        let second = try rpc.call("login.start", params: ["client": "com.example.notes", "openBrowser": false])
        let live = try #require(second["attemptId"]?.stringValue)
        #expect(Set(try attemptIds(rpc)) == [ended, live])

        let deadline = Date().addingTimeInterval(20)
        while try attemptIds(rpc).contains(ended), Date() < deadline { Thread.sleep(forTimeInterval: 0.2) }
        #expect(try attemptIds(rpc) == [live], "the cancelled attempt is pruned, the waiting one kept")
        let log = (try? String(contentsOfFile: h.brokerLog, encoding: .utf8)) ?? ""
        #expect(log.contains("pruned ended attempts"))
        _ = try rpc.call("login.cancel", params: ["attemptId": .string(live)])
    }

    @Test func aMalformedRetentionIsAUsageError() throws {
        for bad in ["0", "-1d", "3w", "d", "99999d", "1.5h"] {
            let result = try runProgram(binDirectory + "/browser-login-broker", ["--retain-ended", bad])
            #expect(result.status == 64, "--retain-ended \(bad)")
            #expect(result.err.contains("--retain-ended takes a time"), "--retain-ended \(bad)")
        }
    }
}
