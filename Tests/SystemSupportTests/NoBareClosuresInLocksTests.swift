import Foundation
import Testing

/// No closure is kept bare in a `Mutex` in Sources: Swift keeps a function
/// value inside a generic type in its most general form, and every
/// `withLock` converted it to the body's form and back, wrapping it in new
/// thunks each time. The kept closure grew without end and was called
/// through every link (docs/performance.md, round 21). A closure kept in a
/// lock goes in a `Hook` (SystemSupport), a class.
@Suite struct NoBareClosuresInLocksTests {
    /// The type between `Mutex<` and its matching `>` holds a function type (`->`).
    static func locksAClosure(_ line: Substring) -> Bool {
        let code = Array((line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? "").utf8)
        let opening = Array("Mutex<".utf8)
        var start = 0
        while start + opening.count <= code.count {
            guard code[start..<(start + opening.count)].elementsEqual(opening) else {
                start += 1
                continue
            }
            var depth = 1
            var index = start + opening.count
            while index < code.count && depth > 0 {
                if code[index] == UInt8(ascii: "-"), index + 1 < code.count, code[index + 1] == UInt8(ascii: ">") {
                    return true
                }
                if code[index] == UInt8(ascii: "<") { depth += 1 }
                if code[index] == UInt8(ascii: ">") { depth -= 1 }
                index += 1
            }
            start = index
        }
        return false
    }

    @Test func thePatternFindsAClosureInAnyLockedType() {
        for line in [
            "private let state = Mutex<(hook: (@Sendable () -> Void)?, deadline: Timestamp?)>((nil, nil))",
            "let handler = Mutex<(@Sendable ([[String: String]]) -> Void)?>(nil)",
            "let handlers = Mutex<[Int: @Sendable (Int) -> Void]>([:])", "let f = Mutex<() -> Void>({})",
        ] {
            #expect(Self.locksAClosure(line[...]), "\(line)")
        }
        for line in [
            "private let state = Mutex<(hook: Hook<Void>?, deadline: Timestamp?)>((nil, nil))",
            "let lost = Mutex<Hook<[[String: String]]>?>(nil)", "let table = Mutex<[String: Set<Int>]>([:])",
            "func take() -> Int { count.withLock { $0 } }", "let counts = Mutex<Int>(0)  // not a Mutex<() -> Void>",
        ] {
            #expect(!Self.locksAClosure(line[...]), "\(line)")
        }
    }

    @Test func noClosureIsKeptBareInALock() throws {
        let (checked, offenders) = try SourceFiles.lines { _, line in Self.locksAClosure(line) }
        #expect(checked > 150)
        #expect(offenders == [])
    }
}
