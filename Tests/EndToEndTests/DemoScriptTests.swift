import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// `path` with its symbolic links resolved (`.build/debug` is one).
private func resolvedPath(_ path: String) -> String { URL(fileURLWithPath: path).resolvingSymlinksInPath().path }

/// `make demo` leaves nothing behind (issue 36): the run's files and the
/// build tool's temporaries are removed when it succeeds, and kept in one
/// directory it names (less SwiftPM's own) when it fails — the real script,
/// with a temporary directory of the test's own as its `$TMPDIR`.
@Suite(
    "scripts/demo cleans up after itself", .dedicatedThread,
    // It builds the debug products: only where the tests run those (not a sanitizer's --scratch-path build).
    .enabled(if: resolvedPath(binDirectory) == resolvedPath(repositoryRoot + "/.build/debug")))
struct DemoScriptTests {

    static func demo(_ tmp: String, binaries: String? = nil) throws -> (status: Int32, out: String, err: String) {
        var env = ProcessInfo.processInfo.environment
        env["TMPDIR"] = tmp
        env["BL_DEMO_BIN"] = binaries
        return try runProgram(repositoryRoot + "/scripts/demo", [], environment: env, timeout: 600)
    }

    static func entries(_ dir: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
    }

    @Test func aDemoThatSucceedsLeavesNothing() throws {
        let tmp = try TemporaryDirectory("bld")
        let run = try Self.demo(tmp.path)
        #expect(run.status == 0, "\(run.out)\n\(run.err)")
        #expect(run.out.contains("demo: done"), "\(run.out)")
        #expect(Self.entries(tmp.path) == [], "left behind: \(Self.entries(tmp.path))")
    }

    @Test func aDemoThatFailsKeepsItsFilesInOneDirectoryItNames() throws {
        let tmp = try TemporaryDirectory("bld")
        // Programs that are not there: the demo fails at its first step that runs one.
        let run = try Self.demo(tmp.path, binaries: tmp.path + "/no-such-bin")
        #expect(run.status == 1, "\(run.out)\n\(run.err)")
        let left = Self.entries(tmp.path)
        #expect(left.count == 1 && left.first?.hasPrefix("bl-demo.") == true, "\(left)")
        let kept = tmp.path + "/" + (left.first ?? "")
        #expect(run.err.contains("this run's files are kept in \(kept)"), "\(run.err)")
        let inside = Self.entries(kept)
        #expect(inside.contains("server.log"), "the failed step's log is kept: \(inside)")
        #expect(!inside.contains { $0.hasPrefix("TemporaryDirectory.") || $0.hasPrefix("bl-demo") }, "\(inside)")
        #expect(!inside.contains("swift-generated-sources"), "\(inside)")
    }
}
