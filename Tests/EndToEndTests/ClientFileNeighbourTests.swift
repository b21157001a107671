import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Client files that would hang or mislead the broker (docs/operations.md, client files): the real
/// daemon and `--check-config` over a clients.d holding a FIFO, a directory, a device, an oversized
/// file, a NUL byte, two [Client] groups, one id in two files and a thousand unknown keys, next to two
/// good files. Each bad one is refused with its path and why; the good ones are served.
@Suite(.dedicatedThread) struct ClientFileNeighbourTests {
    @Test func hostileFilesAreRefusedByNameAndTheRestIsServed() throws {
        let h = try Harness()
        try h.startServer()
        let directory = h.dir + "/config/browser-login/clients.d/"
        h.writeClient(file: "good.conf")
        h.writeClient(
            file: "unknown.conf", id: "com.example.wordy", returnURL: "com.example.wordy:/cb",
            extra: (0..<1000).map { "Colour\($0)=blue" }.joined(separator: "\n"))
        #expect(mkfifo(directory + "x.conf", 0o600) == 0)
        #expect(mkdir(directory + "dir.conf", 0o700) == 0)
        #expect(symlink("/dev/zero", directory + "zero.conf") == 0)
        h.writeClient(
            file: "big.conf", id: "com.example.big", returnURL: "com.example.big:/cb",
            extra: String(repeating: "# filler\n", count: 8000))
        h.writeClient(file: "nul.conf", id: "com.example.nul\u{0}.evil", returnURL: "com.example.nul:/cb")
        h.writeClient(
            file: "twice.conf", id: "com.example.twice", returnURL: "com.example.twice:/cb",
            extra: "[Client]\nReturnUrl=com.example.elsewhere:/cb")
        h.writeClient(file: "dupe-a.conf", id: "com.example.dupe", returnURL: "com.example.dupea:/cb")
        h.writeClient(file: "dupe-b.conf", id: "com.example.dupe", returnURL: "com.example.dupeb:/cb")

        // --check-config ends (a FIFO no longer holds it in open()) and names each file and why.
        let check = try runProgram(
            binDirectory + "/browser-login-broker", ["--check-config"], environment: h.environment(), timeout: 30)
        #expect(check.status == 78, "\(check.out)\(check.err)")
        let expected = [
            "x.conf: error: is a FIFO (named pipe), not a regular file; only regular files are read",
            "dir.conf: error: is a directory, not a regular file",
            "zero.conf: error: is a character device, not a regular file",
            "big.conf: error: is larger than 64 KiB",
            "nul.conf: error: has a NUL byte on line 2",
            "twice.conf: error: has a second [Client] group on line 6 (the first is on line 1)",
            "dupe-a.conf: Id: error: the client id 'com.example.dupe' is also used by \(directory)dupe-b.conf",
            "dupe-b.conf: Id: error: the client id 'com.example.dupe' is also used by \(directory)dupe-a.conf",
            "unknown.conf: warning: 1000 unknown keys, ignored: Colour0, Colour1, Colour10, Colour100, Colour101 and 995 more",
            "2 client(s) valid in 10 file(s)",
        ]
        for line in expected { #expect(check.out.contains(line), "\(line)\n\(check.out)") }
        // One warning for the thousand keys, not one line each.
        #expect(check.out.split(separator: "\n").count { $0.contains("Colour") } == 1, "\(check.out)")

        // The daemon starts, logs the same refusals, and serves the two good clients.
        try h.startBroker()
        let rpc = try h.rpc()
        let clock = ContinuousClock()
        var latencies: [Duration] = []
        for _ in 0..<20 {
            let started = clock.now
            #expect(try rpc.call("broker.info")["protocol"] == 1)
            latencies.append(clock.now - started)
        }
        let ids = try rpc.call("clients.list").arrayValue?.compactMap { $0["id"]?.stringValue }
        #expect(ids?.sorted() == ["com.example.notes", "com.example.wordy"])
        let log = h.broker?.output ?? ""
        for file in ["x.conf", "dir.conf", "zero.conf", "big.conf", "nul.conf", "twice.conf", "dupe-a.conf", "dupe-b.conf"] {
            #expect(log.contains(directory + file), "\(file) in the log")
        }
        print("broker.info beside hostile client files: \(latencies.map { $0.components.attoseconds / 1_000_000_000_000 }) µs")
    }
}
