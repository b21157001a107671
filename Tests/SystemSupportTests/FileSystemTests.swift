import Foundation
import Testing

@testable import SystemSupport

/// The Foundation-free file, environment, thread and string helpers, each next to what Foundation answers.
@Suite struct FileSystemTests {
    func scratch() throws -> String {
        let path = NSTemporaryDirectory() + "/fs-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func filesAreWrittenReadListedAndRemoved() throws {
        let base = try scratch()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let nested = base + "/a/b/c"
        try FileSystem.createDirectories(nested, mode: 0o700)
        try FileSystem.createDirectories(nested)
        #expect(FileSystem.isDirectory(nested))
        let file = nested + "/text"
        #expect(FileSystem.read(file) == nil)
        try FileSystem.writeAtomically(Array("café\n".utf8), to: file)
        #expect(FileSystem.readText(file) == "café\n")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "café\n")
        try FileSystem.writeAtomically([0xFF, 0xFE], to: file)
        #expect(FileSystem.read(file) == [0xFF, 0xFE])
        #expect(FileSystem.readText(file) == nil)
        let big = [UInt8](repeating: 0x61, count: 100_000)
        try FileSystem.writeAtomically(big, to: file)
        #expect(FileSystem.read(file) == big)
        #expect(FileSystem.directoryEntries(nested) == ["text"])
        #expect(FileSystem.directoryEntries(base + "/missing") == nil)
        symlink(file, nested + "/link")
        #expect(FileSystem.symbolicLinkTarget(nested + "/link") == file)
        #expect(FileSystem.symbolicLinkTarget(file) == nil)
        try FileSystem.remove(nested + "/link")
        try FileSystem.remove(file)
        try FileSystem.remove(file)
        #expect(!FileSystem.exists(file))
        #expect(throws: FileSystemError.self) { try FileSystem.writeAtomically([1], to: base + "/missing/x") }
    }

    /// What `NSString.deletingLastPathComponent` answered (the broker used it for the state directory).
    @Test func parentIsTheDirectoryPart() {
        let cases = [
            "/a/b/c": "/a/b", "/a/b/c/": "/a/b", "/a": "/", "/": "/", "c": "", "a/b": "a",
            "/state/broker/state.db": "/state/broker",
        ]
        for (path, parent) in cases { #expect(FileSystem.parent(of: path) == parent, "\(path)") }
    }

    @Test func environmentIsProcessInfos() {
        #expect(ProcessEnvironment.current == ProcessInfo.processInfo.environment)
        #expect(ProcessEnvironment.get("PATH") == ProcessInfo.processInfo.environment["PATH"])
        #expect(ProcessEnvironment.get("BL_SURELY_UNSET_VARIABLE") == nil)
    }

    @Test(arguments: ["", "  ", " a b ", "\ta\t", "x", " \n x \n "])
    func trimmingBlanksIsTrimmingWhitespaces(_ text: String) {
        #expect(text.trimmingBlanks() == text.trimmingCharacters(in: .whitespaces))
        #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func aDetachedThreadRunsAndIsNamed() async {
        let name = await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
            let started = PosixThread.detach(name: "bl-test-thread-name") {
                continuation.resume(returning: FileSystem.readText("/proc/thread-self/comm"))
            }
            #expect(started)
        }
        #expect(name == "bl-test-thread-\n")
    }
}
