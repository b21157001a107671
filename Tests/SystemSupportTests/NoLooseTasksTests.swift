import Foundation
import Testing

/// Every task in Sources has an owner that bounds it, cancels it and waits for it (docs/architecture.md,
/// "Background work"): tasks are started only by the lifecycle code (Services.swift: task groups) and by
/// `TaskSet`/`WorkGroup` (WorkGroup.swift). Anything else submits a work item to one of those, or to the
/// engine's `WorkService`; a `Task {`, `Task(…)` or `Task.detached` anywhere else is a loose task.
@Suite struct NoLooseTasksTests {
    static let allowed: Set = [
        "SystemSupport/Services.swift", "SystemSupport/WorkGroup.swift",
        // The program's one top-level task, started by `Executors.runMain` (the daemon's main.swift).
        "SystemSupport/Executors.swift",
    ]

    /// `Task {`, `Task(`, `Task<T, E> {` and `Task.detached`, outside `//` comments.
    static let starts = try! NSRegularExpression(pattern: #"\bTask\s*(<[^>]*>)?\s*(\{|\(|\.detached\b)"#)

    static func startsTask(_ line: Substring) -> Bool {
        let code = String(line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        return starts.firstMatch(in: code, range: NSRange(code.startIndex..., in: code)) != nil
    }

    @Test func thePatternFindsEveryWayOfStartingATask() {
        for line in [
            "let t = Task { await x() }", "Task {", "tasks[id] = Task.detached {", "Task(priority: .low) {",
            "return Task<Void, Never> { [self] in", "Task(operation: body)",
        ] {
            #expect(Self.startsTask(line[...]), "\(line)")
        }
        for line in [
            "try await Task.sleep(for: .seconds(1))", "while !Task.isCancelled {", "var t: Task<Void, Never>?",
            "[UInt64: Task<Void, Never>]", "var items = TaskSet<ID>()", "await withTaskGroup(of: Void.self) {",
            "// a comment about Task { }", "group.addTask {",
        ] {
            #expect(!Self.startsTask(line[...]), "\(line)")
        }
    }

    @Test func noTaskIsStartedOutsideItsOwners() throws {
        let (checked, offenders) = try SourceFiles.lines { file, line in
            Self.startsTask(line) && !Self.allowed.contains(file)
        }
        #expect(checked > 150)
        #expect(offenders == [])
    }
}
