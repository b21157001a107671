import BrowserLoginTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The harness tells a daemon that crashed by itself (and says where, from
/// its log) from one a test stopped: a crash otherwise shows up far from its
/// cause, as "the broker closed the connection" in whatever test was running.
@Suite struct CrashReportTests {
    @Test func aChildThatCrashesIsToldApartFromOneStoppedOrExited() throws {
        let dir = try makeTemporaryDirectory("blcr")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let crashed = try Child("/bin/sh", ["-c", "echo working; kill -SEGV $$"], environment: [:], log: dir + "/a.log")
        try waitUntil(10, "the crash") { !crashed.isRunning }
        #expect(crashed.crashSignal == SIGSEGV)

        let stopped = try Child("/bin/sleep", ["30"], environment: [:], log: dir + "/b.log")
        stopped.stop(SIGKILL)
        #expect(stopped.crashSignal == nil)
        let terminated = try Child("/bin/sleep", ["30"], environment: [:], log: dir + "/c.log")
        terminated.stop()
        #expect(terminated.crashSignal == nil)
        let exited = try Child("/bin/sh", ["-c", "exit 3"], environment: [:], log: dir + "/d.log")
        try waitUntil(10, "the exit") { !exited.isRunning }
        #expect(exited.crashSignal == nil)
    }

    @Test func theExcerptIsTheBacktraceWithWhatCameBefore() {
        let before = (0..<100).map { "line \($0)" }
        let backtrace = [
            "", "*** Signal 4: Backtracing from 0x55971fe5f9e4... done ***", "",
            "*** Program crashed: Illegal instruction at 0x000055971fe5f9e4 ***", "Thread 0 crashed:",
            "  0  0x000055971fe5f9e4 main + 212 in c",
        ]
        let excerpt = crashExcerpt(ofLog: (before + backtrace).joined(separator: "\n"))
        #expect(excerpt.first == "line 81")
        #expect(excerpt.last == "  0  0x000055971fe5f9e4 main + 212 in c")
        #expect(excerpt.contains("*** Program crashed: Illegal instruction at 0x000055971fe5f9e4 ***"))
        // No backtrace: the end of the log.
        let plain = crashExcerpt(ofLog: before.joined(separator: "\n"))
        #expect(plain.count == 40)
        #expect(plain.last == "line 99")
    }
}
