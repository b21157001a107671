import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// One line per finding, in the reader's words (issue 36): `--check-config`
/// prints each problem once, and journald's `<N>` priority prefixes appear
/// only where journald reads stderr — the real broker and server, on a
/// terminal, in a pipe, and on a stream named by `JOURNAL_STREAM`.
@Suite("Log lines for their reader", .dedicatedThread)
struct LogLinesTests {
    static func badClients(_ h: Harness) {
        h.serverOrigin = "https://login.example.com"
        h.writeClient(file: "good.conf")
        h.writeClient(
            file: "bad.conf", id: "com.example.bad", returnURL: "https://app.example.com/cb", extra: "Colour=blue")
    }

    @Test func checkConfigPrintsEachProblemOnce() throws {
        let h = try Harness()
        Self.badClients(h)
        let broker = binDirectory + "/browser-login-broker"
        let piped = try runProgram(broker, ["--check-config"], environment: h.environment())
        #expect(piped.status == 78)
        #expect(piped.err == "", "the problems are the answer, on standard output only: \(piped.err)")
        let lines = piped.out.split(separator: "\n")
        #expect(lines.count == 3, "two problems and the summary: \(piped.out)")
        #expect(lines.filter { $0.contains("bad.conf: ReturnUrl: error: ") }.count == 1)
        #expect(lines.filter { $0.contains("bad.conf: Colour: warning: unknown key") }.count == 1)

        let shown = try runInTerminal(broker, ["--check-config"], environment: h.environment())
        #expect(shown.status == 78)
        #expect(shown.output == piped.out, "a terminal shows the same lines, once")
    }

    @Test func theServerSpeaksPlainWordsOnATerminalAndInAPipe() throws {
        let h = try Harness()
        let server = binDirectory + "/browser-login-server"
        let arguments = ["serve", "--config", h.dir + "/nonexistent.json"]
        let shown = try runInTerminal(server, arguments, environment: h.environment())
        #expect(shown.status != 0)
        #expect(shown.output.contains("nonexistent.json"), "\(shown.output)")
        #expect(!shown.output.contains("<3>") && !shown.output.contains("<4>"), "\(shown.output)")
        let lines = shown.output.split(separator: "\n").filter { $0.contains("nonexistent.json") }
        #expect(lines.count == 1, "said once: \(shown.output)")
        #expect(lines.first?.hasPrefix("browser-login-server: ") == true, "\(shown.output)")
        let piped = try runProgram(server, arguments, environment: h.environment())
        #expect(!piped.err.contains("<3>") && piped.err.contains("nonexistent.json"), "\(piped.err)")
    }

    @Test func journaldsStreamGetsPriorityPrefixes() throws {
        let h = try Harness()
        let errors = h.dir + "/journal-stream"
        #expect(FileManager.default.createFile(atPath: errors, contents: nil))
        var info = stat()
        #expect(stat(errors, &info) == 0)
        var env = h.environment()
        env["JOURNAL_STREAM"] = "\(info.st_dev):\(info.st_ino)"
        let pid = try spawn(
            [binDirectory + "/browser-login-server", "serve", "--config", h.dir + "/nonexistent.json"],
            environment: env, output: "/dev/null", errors: errors)
        #expect(exitStatus(reap(pid)) != 0)
        let text = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(text.hasPrefix("<3>browser-login-server: "), "journald reads the priority: \(text)")
    }
}
