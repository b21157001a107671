import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// `login.start` answers as soon as the browser is started, whatever the
/// browser command does next (issue 33, item 4): a command that stays in the
/// foreground does not hold the answer, and one that fails after the answer
/// is reported through the attempt (`error.code` BROWSER_FAILED, still
/// waiting, its link still there), a `login.changed` notification and the log.
/// How soon is never asserted here (no timed tests).
@Suite("Browser launch end to end", .dedicatedThread)
struct BrowserLaunchTests {
    @Test func aForegroundBrowserDoesNotHoldLoginStart() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        let marker = h.dir + "/browser-ended"
        let gate = h.dir + "/end-now"
        // A browser in the foreground: it runs until the test ends (at most 30 s).
        h.writeClient(
            extra:
                "Browser=/bin/sh -c 'i=0; while [ ! -e \(gate) ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; touch \(marker)' %u"
        )
        defer { _ = FileManager.default.createFile(atPath: gate, contents: nil) }
        try h.startBroker()
        let attempt = try h.rpc().call("login.start", params: ["client": "com.example.notes"])
        #expect(attempt["state"] == "waiting", "\(attempt)")
        // Answered while the browser command still runs.
        #expect(!FileManager.default.fileExists(atPath: marker))
        #expect(attempt["error"] == nil || attempt["error"] == .null, "\(attempt)")
    }

    @Test func aBrowserThatFailsAfterTheAnswerIsReportedThroughTheAttempt() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        // Fails 0.3 s after it starts: always after login.start's answer was decided (the launcher
        // watches a command for 40 ms before answering), within the 2 s in which a failure counts.
        h.writeClient(extra: "Browser=/bin/sh -c 'sleep 0.3; exit 3' %u")
        try h.startBroker()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: ["clients": ["com.example.notes"]])
        let attempt = try h.rpc().call("login.start", params: ["client": "com.example.notes"])
        let id = try #require(attempt["attemptId"]?.stringValue)
        #expect(attempt["state"] == "waiting", "\(attempt)")

        var failed: JSONValue?
        let deadline = Date().addingTimeInterval(20)
        while failed == nil, Date() < deadline {
            guard let message = try? watcher.nextMessage(timeout: .seconds(20)) else {
                Issue.record("no login.changed with BROWSER_FAILED; broker log:\n\(h.broker?.output ?? "")")
                return
            }
            if case .notification("login.changed", let params) = message,
                params?["attempt"]?["attemptId"]?.stringValue == id,
                params?["attempt"]?["error"]?["code"] == "BROWSER_FAILED"
            {
                failed = params?["attempt"]
            }
        }
        #expect(failed?["state"] == "waiting", "\(String(describing: failed))")
        #expect(failed?["error"]?["message"]?.stringValue?.contains("exit status 3") == true)
        let status = try h.rpc().call("login.status", params: ["attemptId": .string(id)])
        #expect(status["error"]?["code"] == "BROWSER_FAILED" && status["state"] == "waiting", "\(status)")
        let resumed = try h.rpc().call("login.resume", params: ["attemptId": .string(id), "openBrowser": false])
        #expect(resumed["authorizeUrl"]?.stringValue?.hasPrefix(h.serverOrigin) == true)
        try waitUntil(10, "the broker to log the browser's failure") {
            h.broker?.output.contains("the browser failed to open after the sign-in started") == true
        }
        #expect(h.broker?.output.contains("BROWSER_FAILED") == true)
    }
}
