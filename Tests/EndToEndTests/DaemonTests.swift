import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon as a process: hostile input, framing, shutdown, configuration
/// errors, and the CLI's help.
@Suite("The daemon process", .dedicatedThread)
struct DaemonTests {
    @Test func malformedAndOversizedMessagesNeverStopTheDaemon() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let bad = try h.rpc(timeout: .seconds(10))
        try bad.sendRaw(Array("{not json\n".utf8))
        #expect(try JSONValue.parse(bad.nextBody())["error"]?["code"] == -32700)
        try bad.sendRaw(Array("[]\n".utf8))
        #expect(try JSONValue.parse(bad.nextBody())["error"]?["code"] == -32600)
        try bad.sendRaw(Array(#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#.utf8) + [10])
        #expect(try JSONValue.parse(bad.nextBody())["error"]?["code"] == -32601)
        try bad.sendRaw(Array(#"{"jsonrpc":"2.0","id":2,"method":"session.get","params":["x"]}"#.utf8) + [10])
        #expect(try JSONValue.parse(bad.nextBody())["error"]?["code"] == -32602)
        try bad.sendRaw(Array(#"{"jsonrpc":"2.0","id":3,"method":"session.get","params":{"client":"c","extra":1}}"#.utf8) + [10])
        #expect(try JSONValue.parse(bad.nextBody())["error"]?["code"] == -32602)
        // A batch: a good call, a notification, an invalid element.
        try bad.sendRaw(
            Array(
                #"[{"jsonrpc":"2.0","id":4,"method":"broker.info"},{"jsonrpc":"2.0","method":"broker.info"},5]"#.utf8)
                + [10])
        let batch = try JSONValue.parse(bad.nextBody()).arrayValue ?? []
        #expect(batch.count == 2)
        // Over 1 MiB: one -32600, and that connection is closed.
        let huge = try h.rpc(timeout: .seconds(10))
        try? huge.sendRaw(Array(repeating: UInt8(ascii: "a"), count: 1_100_000))
        #expect(try JSONValue.parse(huge.nextBody())["error"]?["code"] == -32600)
        // Others are still served, in both framings (jsonrpc-glib sends "params": null).
        #expect(try h.rpc().call("broker.info")["protocol"] == 1)
        let lsp = try RPCClient(socketPath: h.socketPath, framing: .contentLength)
        #expect(try lsp.call("clients.list", params: .null).arrayValue?.count == 1)
        #expect(h.broker?.isRunning == true)
    }

    @Test func sigtermStopsGracefullyAndRemovesTheSocket() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        h.broker?.stop(SIGTERM)
        #expect(h.broker?.process.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: h.socketPath))
        #expect(h.broker?.output.contains("stopping") == true)
        // A restart serves again.
        try h.startBroker()
        #expect(try h.rpc().call("broker.info")["protocol"] == 1)
    }

    @Test func checkConfigNamesTheFileAndTheKey() throws {
        let h = try Harness()
        h.serverOrigin = "https://login.example.com"
        h.writeClient(file: "good.conf")
        h.writeClient(
            file: "bad.conf", id: "com.example.bad", returnURL: "https://app.example.com/cb", extra: "Colour=blue")
        let check = try runProgram(binDirectory + "/browser-login-broker", ["--check-config"], environment: h.environment())
        let text = check.out
        #expect(check.status == 78)
        #expect(text.contains("bad.conf: ReturnUrl: error: https return URLs cannot be used on Linux"))
        #expect(text.contains("bad.conf: Colour: warning: unknown key"))
        #expect(text.contains("1 client(s) valid"))
    }

    @Test func everyCommandHasHelp() throws {
        let h = try Harness()
        let main = try h.cli(["--help"])
        #expect(main.status == 0)
        let commands = [
            "status", "start", "finish", "cancel", "resume", "acknowledge", "session", "sign-out", "clients", "watch",
        ]
        for command in commands {
            #expect(main.out.contains(command))
            let help = try h.cli([command, "--help"])
            #expect(help.status == 0, "\(command)")
            #expect(help.out.hasPrefix("Usage: browser-login \(command)"), "\(command)")
        }
        #expect(try h.cli(["frobnicate"]).status == 64)
        #expect(try h.cli(["cancel"]).status == 64)
    }
}
