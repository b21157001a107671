import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// The Python and Node clients of docs/rpc.md (examples/) run for real
/// against a signed-in broker, and their account switchers against two
/// accounts of an `Accounts=multiple` client.
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

    @Test func thePythonClientSwitchesAccounts() throws {
        try switchAccounts(["/usr/bin/python3", Self.examples + "/rpc_client.py"])
    }

    @Test func theNodeClientSwitchesAccounts() throws {
        try switchAccounts(["/usr/bin/node", Self.examples + "/rpc_client.mjs"])
    }

    /// The account switcher of rpc_client.py and .mjs on an `Accounts=multiple`
    /// client: one more account signed in (`--add-account --login-hint`, the
    /// scripted user keeping the address), listed, switched, used by key.
    func switchAccounts(_ program: [String]) throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Accounts=multiple")
        h.useScriptedUserAgent()
        try h.startBroker()
        try h.signIn()
        let rpc = try h.rpc()
        let current = { try rpc.call("session.get", params: ["client": "com.example.notes"])["accountKey"]?.stringValue }
        let firstKey = try #require(try current())
        var env = h.environment()
        env["BROWSER_LOGIN_SOCKET"] = h.socketPath
        let run = { (arguments: [String]) in
            try runProgram(program[0], Array(program.dropFirst()) + ["com.example.notes"] + arguments, environment: env)
        }

        let other = h.testEmail.replacingOccurrences(of: "@", with: "work@")
        let added = try run(["--add-account", "--login-hint", other, "--me"])
        try #require(added.status == 0, "\(added.out)\(added.err)")
        let secondKey = try #require(try current())
        #expect(secondKey != firstKey)
        #expect(added.out.contains(secondKey) && added.out.contains("200 {"), "\(added.out)")
        #expect(added.out.contains("\"email\":\"\(other)\""), "\(added.out)")

        let listed = try run(["--accounts"])
        #expect(listed.out == "* \(secondKey) \(other) signedIn\n  \(firstKey) \(h.testEmail) signedIn\n", "\(listed)")
        let used = try run(["--use", firstKey, "--me"])
        #expect(used.status == 0 && used.out.contains("\"email\":\"\(h.testEmail)\""), "\(used)")
        #expect(try current() == firstKey)
        let asOther = try run(["--account", secondKey, "--me"])
        #expect(asOther.status == 0 && asOther.out.contains("\"email\":\"\(other)\""), "\(asOther)")
        #expect(try current() == firstKey, "naming an account does not make it current")

        let unknown = try run(["--account", "acct_" + String(repeating: "A", count: 22)])
        #expect(unknown.status == 1 && unknown.err.contains("ACCOUNT_UNKNOWN"), "\(unknown)")
    }
}
