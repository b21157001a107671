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

    /// Under a steady stream of transactions the WAL starts over from its
    /// first frame now and then. A passive checkpoint on the side never
    /// copies the frames committed while it runs, and SQLite restarts the WAL
    /// only when all were copied: the file grew with every commit, for good
    /// (800 MB in the bench's half minute). The WAL header's checkpoint
    /// sequence number counts the restarts. Sixteen threads write until it
    /// has counted three (at most a minute: the checkpoints run on a queue of
    /// their own, as slow as the disk's `fsync` on a busy machine), with the
    /// WAL started over past 64 frames (8,192 in the server).
    @Test func theWALStartsOverUnderASteadyStreamOfTransactions() throws {
        let directory = try TemporaryDirectory("group-commit")
        let path = directory.path + "/server.sqlite"
        let store = try Store(location: .sqlite(path: path), walRestartFrames: 64)
        defer { store.close() }
        func restarts() -> Int {
            guard let header = FileManager.default.contents(atPath: path + "-wal")?.prefix(16), header.count == 16 else {
                return 0
            }
            return header.suffix(4).reduce(0) { $0 << 8 | Int($1) }
        }
        let stop = Atomic<Bool>(false)
        let written = Atomic<Int>(0)
        let writers = DispatchGroup()
        for t in 0..<16 {
            writers.enter()
            Thread {
                var i = 0
                while !stop.load(ordering: .relaxed) {
                    let committed =
                        (try? store.perform { db in
                            try db.run(
                                "INSERT INTO members (email, added_at) VALUES (?, ?)",
                                "member-\(t)-\(i)-" + String(repeating: "x", count: 200), Int64(i))
                        }) != nil
                    if committed { written.add(1, ordering: .relaxed) }
                    i += 1
                }
                writers.leave()
            }.start()
        }
        let deadline = Date().addingTimeInterval(60)
        while restarts() < 3, Date() < deadline { usleep(10_000) }
        stop.store(true, ordering: .relaxed)
        writers.wait()
        let count = written.load(ordering: .relaxed)
        #expect(restarts() >= 3, "the WAL started over \(restarts()) times in \(count) transactions")
        let rows = try store.perform { db in try db.queryOne("SELECT count(*) AS n FROM members")?.int("n") }
        #expect(rows == Int64(count))
    }
}
