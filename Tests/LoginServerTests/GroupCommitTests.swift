import BrowserLoginTestSupport
import Foundation
import Synchronization
import Testing

@testable import LoginServer

/// Runs `body(i)` for i in 0..<count, `threads` at a time, each on a thread of its own (not
/// dispatch's pool, which runs only as many blocking bodies at once as there are CPUs).
private func onThreads(_ count: Int, threads: Int = 32, _ body: @escaping @Sendable (Int) -> Void) {
    let next = Atomic<Int>(0)
    let done = DispatchGroup()
    for _ in 0..<threads {
        done.enter()
        Thread {
            while true {
                let i = next.add(1, ordering: .relaxed).oldValue
                guard i < count else { break }
                body(i)
            }
            done.leave()
        }.start()
    }
    done.wait()
}

/// The SQLite store's group commit: many transactions at once, batched into
/// one SQLite transaction, each in its own savepoint.
@Suite struct GroupCommitTests {
    @Test func theWriterIsIdleOnlyWithNoTransactionRunningOrQueued() throws {
        let directory = try TemporaryDirectory("group-commit")
        let store = try Store(path: directory.path + "/server.sqlite")
        defer { store.close() }
        #expect(store.writerIsIdle)
        // A transaction held open on another thread: the writer is busy until it commits.
        let inside = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        done.enter()
        Thread {
            _ = try? store.perform { db in
                try db.run("INSERT INTO members (email, added_at) VALUES ('held', 0)")
                inside.signal()
                release.wait()
            }
            done.leave()
        }.start()
        inside.wait()
        #expect(!store.writerIsIdle)
        release.signal()
        done.wait()
        #expect(store.writerIsIdle)
        let held = try store.perform { db in try db.queryOne("SELECT email FROM members WHERE email = 'held'") }
        #expect(held != nil)
    }

    @Test func concurrentReadThenWriteTransactionsStaySerial() throws {
        let directory = try TemporaryDirectory("group-commit")
        let store = try Store(path: directory.path + "/server.sqlite")
        defer { store.close() }
        try store.perform { db in try db.run("INSERT INTO members (email, added_at) VALUES ('counter', 0)") }
        // 1,000 increments read then written back: any interleaving would lose some.
        onThreads(1000) { _ in
            _ = try? store.perform { db in
                let value = try db.queryOne("SELECT added_at FROM members WHERE email = 'counter'")?.int("added_at") ?? -1
                try db.run("UPDATE members SET added_at = ? WHERE email = 'counter'", value + 1)
            }
        }
        let value = try store.perform { db in
            try db.queryOne("SELECT added_at FROM members WHERE email = 'counter'")?.int("added_at")
        }
        #expect(value == 1000)
    }

    @Test func aFailingTransactionLosesOnlyItsOwnChanges() throws {
        let directory = try TemporaryDirectory("group-commit")
        let store = try Store(path: directory.path + "/server.sqlite")
        defer { store.close() }
        try store.perform { db in try db.run("INSERT INTO members (email, added_at) VALUES ('taken', 0)") }
        // Every third transaction writes a row, then fails on a duplicate key (a database error);
        // every other one writes a row and an API error (which commits, as with a wrong code).
        let outcomes = Mutex<[Int: String]>([:])
        onThreads(300) { i in
            let outcome: String
            do {
                try store.perform { db in
                    try db.run("INSERT INTO members (email, added_at) VALUES (?, ?)", "m\(i)", Int64(i))
                    if i % 3 == 0 { try db.run("INSERT INTO members (email, added_at) VALUES ('taken', 1)") }
                    if i % 3 == 1 { throw APIError(.attemptUnknown, "no such attempt") }
                }
                outcome = "committed"
            } catch {
                outcome = (error as? APIError)?.code == .internalError ? "failed" : "api"
            }
            outcomes.withLock { $0[i] = outcome }
        }
        let kept = try store.perform { db in
            Set(try db.query("SELECT email FROM members").compactMap { $0.string("email") })
        }
        for i in 0..<300 {
            let outcome = outcomes.withLock { $0[i] }
            switch i % 3 {
            case 0:
                #expect(outcome == "failed")
                #expect(!kept.contains("m\(i)"), "a failed transaction's first write was kept")
            case 1:
                #expect(outcome == "api")
                #expect(kept.contains("m\(i)"), "an API error's writes were not committed")
            default:
                #expect(outcome == "committed")
                #expect(kept.contains("m\(i)"))
            }
        }
    }
}
