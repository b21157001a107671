import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The package's root directory (this file is `Tests/TestSupport/Paths.swift`).
public let repositoryRoot: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path

/// The built executables: `$BL_BIN_DIR`, else those of the build the running
/// program belongs to (its own directory, or one above it for a test bundle:
/// a `--scratch-path` or sanitizer build tests its own binaries), else
/// `.build/debug` of this package.
public let binDirectory: String = {
    if let dir = ProcessInfo.processInfo.environment["BL_BIN_DIR"], !dir.isEmpty { return dir }
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.isExecutableFile(atPath: dir.path + "/browser-login-broker") { return dir.path }
            dir = dir.deletingLastPathComponent()
        }
    }
    return repositoryRoot + "/.build/debug"
}()

/// Where tests keep their files: `$TMPDIR` (scripts/test gives every run a
/// directory of its own and fails the run if anything is left in it), else
/// /tmp when `$TMPDIR` is unset or too long for the Unix socket paths made
/// inside (108 bytes at most).
public let temporaryBase: String = {
    var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? ""
    while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
    return !base.isEmpty && base.utf8.count <= 48 ? base : "/tmp"
}()

/// A new private directory `temporaryBase/PREFIX-XXXXXX`.
public func makeTemporaryDirectory(_ prefix: String) throws -> String {
    var template = Array("\(temporaryBase)/\(prefix)-XXXXXX".utf8CString)
    guard mkdtemp(&template) != nil else { throw HarnessError("mkdtemp failed: errno \(errno)") }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Set `BL_KEEP_TEST_DIRS=1` to keep each harness's directory (logs, state) for a post-mortem.
public let keepTestDirectories = ProcessInfo.processInfo.environment["BL_KEEP_TEST_DIRS"] == "1"

/// A private temporary directory (`makeTemporaryDirectory`), removed with its
/// last reference unless `BL_KEEP_TEST_DIRS=1`.
public final class TemporaryDirectory: Sendable {
    public let path: String
    public var url: URL { URL(fileURLWithPath: path) }

    public init(_ prefix: String = "blt") throws {
        path = try makeTemporaryDirectory(prefix)
    }

    deinit { if !keepTestDirectories { try? FileManager.default.removeItem(atPath: path) } }
}

/// The error of the harness: a message, and whether it ends a `waitUntil` at once.
public struct HarnessError: Error, CustomStringConvertible {
    public var description: String
    /// Ends a `waitUntil` at once instead of counting as "not yet".
    public var fatal = false
    public init(_ d: String, fatal: Bool = false) {
        description = d
        self.fatal = fatal
    }
}

/// Monotonic nanoseconds.
@inline(__always)
public func nowNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Polls `condition` (every `interval` seconds) until it is true. A
/// `HarnessError.fatal` thrown by the condition ends the wait at once; other
/// errors count as "not yet", and the last one is part of the time-out message.
public func waitUntil(
    _ seconds: Double = 10, _ what: String, interval: Double = 0.02, _ condition: () throws -> Bool
) throws {
    let deadline = nowNanos() + UInt64(seconds * 1e9)
    var lastError: (any Error)?
    while nowNanos() < deadline {
        do {
            if try condition() { return }
        } catch let error as HarnessError where error.fatal {
            throw error
        } catch {
            lastError = error
        }
        usleep(UInt32(interval * 1e6))
    }
    throw HarnessError("timed out waiting for \(what)" + (lastError.map { " (last error: \($0))" } ?? ""))
}

/// Runs blocking code on a thread of its own and awaits its result, so that
/// it never occupies a thread of the cooperative pool (two on a 2-core
/// machine) that in-process servers and other tests running in parallel need.
public func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }
        thread.stackSize = 4 << 20
        thread.start()
    }
}
