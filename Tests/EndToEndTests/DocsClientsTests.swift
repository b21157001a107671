import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The Python and Node clients of docs/rpc.md (examples/) run for real
/// against a signed-in broker.
@Suite("Documented clients", .dedicatedThread)
struct DocsClientsTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples").path

    func run(_ argv: [String], socket: String) throws -> String {
        var env = ProcessInfo.processInfo.environment
        env["BROWSER_LOGIN_SOCKET"] = socket
        return try spawnAndWait(argv, environment: env).stdout
    }

    @Test func thePythonClientReadsTheSessionAndCallsTheAPI() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        try h.signIn()
        let out = try run(
            ["/usr/bin/python3", Self.examples + "/rpc_client.py", "com.example.notes", "--me"], socket: h.socketPath)
        #expect(out.contains("\"status\": \"signedIn\""))
        #expect(out.contains("200 "))
        #expect(out.contains(h.testEmail))
        #expect(out.contains("201 "))
    }

    @Test func theNodeClientReadsTheSessionAndCallsTheAPI() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        try h.signIn()
        let out = try run(
            ["/usr/bin/node", Self.examples + "/rpc_client.mjs", "com.example.notes", "--me"], socket: h.socketPath)
        #expect(out.contains("\"status\":\"signedIn\""))
        #expect(out.contains(h.testEmail))
        #expect(out.contains("200 {\"notes\""))
    }
}
