import BrokerCore
import BrowserLoginProtocol
import Foundation
import SQLiteSupport
import Testing

@testable import BrokerStore

/// A directory in `$TMPDIR`, removed with its last reference (after each
/// test: a suite's instance lives for one test), whether the test passed or not.
final class ScratchDirectory: Sendable {
    let url: URL
    init(_ prefix: String) {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }
}

@Suite struct BrokerStoreTests {
    let scratch = ScratchDirectory("blstore")

    func tempPath() -> String {
        let dir = scratch.url.appendingPathComponent(UUID().uuidString)
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("state.sqlite").path
    }

    func sample(_ id: String, state: AttemptState = .starting, at ms: Int64 = 1000) -> AttemptRecord {
        AttemptRecord(
            id: id, client: "com.example.notes", state: state, returnURL: "com.example.notes:/callback",
            issuer: "http://127.0.0.1:1", createdAt: Timestamp(millisecondsSince1970: ms))
    }

    @Test func attemptsAndHistorySurviveReopening() throws {
        let path = tempPath()
        do {
            let store = try BrokerStore(path: path)
            var a = sample("a1")
            try store.insert(a)
            a.state = .waiting
            a.serverAttemptId = "srv-1"
            a.expiresAt = Timestamp(millisecondsSince1970: 5000)
            a.updatedAt = Timestamp(millisecondsSince1970: 2000)
            try store.update(a, previous: .starting)
            try store.close()
        }
        let store = try BrokerStore(path: path)
        let a = try #require(try store.attempt(id: "a1"))
        #expect(a.state == .waiting)
        #expect(a.expiresAt == Timestamp(millisecondsSince1970: 5000))
        #expect(try store.attempts(serverAttemptId: "srv-1").map(\.id) == ["a1"])
        let history = try store.history(attemptId: "a1")
        #expect(history.map(\.2) == [.starting, .waiting])
        #expect(history.last?.1 == .starting)
    }

    @Test func aQuietStoreGivesBackItsPageCacheAndReadsOnAfterwards() throws {
        let store = try BrokerStore(path: tempPath())
        for i in 0..<400 { try store.insert(sample("a\(i)", at: Int64(1000 + i))) }
        #expect(try store.list(limit: 1000).count == 400)
        let filled = store.db.cacheBytes
        #expect(filled > 64 * 1024)
        store.releaseMemory()
        #expect(store.db.cacheBytes < filled / 4)
        // The pages are read again when needed.
        #expect(try store.list(limit: 1000).count == 400)
    }

    @Test func aServerAttemptIdIsUniquePerClient() throws {
        let store = try BrokerStore(path: tempPath())
        var a = sample("a1")
        a.serverAttemptId = "same"
        try store.insert(a)
        var b = sample("a2")
        b.serverAttemptId = "same"
        #expect(throws: (any Error).self) { try store.insert(b) }
    }

    @Test func listFiltersByClientAndState() throws {
        let store = try BrokerStore(path: tempPath())
        try store.insert(sample("a1", state: .waiting, at: 1))
        try store.insert(sample("a2", state: .completed, at: 2))
        var other = sample("a3", state: .waiting, at: 3)
        other.client = "other"
        try store.insert(other)
        #expect(try store.list().map(\.id) == ["a3", "a2", "a1"])
        #expect(try store.list(client: "com.example.notes", states: [.waiting]).map(\.id) == ["a1"])
        #expect(try store.list(states: []).isEmpty)
        #expect(try store.count(states: [.waiting]) == 2)
    }

    @Test func sessionsUpsert() throws {
        let store = try BrokerStore(path: tempPath())
        let account = Account(userId: "u1", email: "ada@example.com", displayName: "Ada")
        var s = SessionRecord(
            client: "c", status: .signedIn, account: account, authMethod: "test",
            expiresAt: Timestamp(millisecondsSince1970: 9), updatedAt: Timestamp(millisecondsSince1970: 1))
        try store.save(s)
        s.status = .revoked
        s.reason = "AUTH_USER_DISABLED"
        try store.save(s)
        let loaded = try #require(try store.session(client: "c"))
        #expect(loaded == s)
        #expect(try store.sessions().count == 1)
    }

    /// A database written by the release before accounts (migrations 001–003,
    /// one session row per client) opens in place: the session becomes the
    /// client's current account, its key filled in at start-up.
    @Test func aDatabaseOfThePreviousReleaseMigratesInPlace() throws {
        let path = tempPath()
        do {
            let old = try Database(path: path)
            _ = try old.migrate(Array(BrokerStore.migrations.prefix(3)))
            try old.execute(
                """
                INSERT INTO sessions (client, status, user_id, email, display_name, auth_method, expires_at,
                    updated_at, revoke_pending, verified_at)
                VALUES ('com.example.notes', 'signedIn', 'u_1', 'ada@example.com', 'Ada', 'email', 9000, 1000, 1, 1500),
                    ('com.example.todo', 'signedOut', NULL, NULL, NULL, NULL, NULL, 2000, 0, NULL)
                """)
            try old.close()
        }
        let store = try BrokerStore(path: path)
        let notes = try #require(try store.session(client: "com.example.notes"))
        #expect(notes.status == .signedIn && notes.current && !notes.vaultKeyed && notes.revokePending)
        #expect(notes.accountKey.isEmpty && notes.account?.email == "ada@example.com")
        #expect(notes.usedAt == Timestamp(millisecondsSince1970: 1000))
        #expect(notes.expiresAt == Timestamp(millisecondsSince1970: 9000))
        let key = AccountKeys.key(issuer: "https://login.example.com", userId: "u_1")
        try store.fillAccountKey(client: "com.example.notes", key: key)
        #expect(try store.session(client: "com.example.notes", account: key)?.current == true)
        #expect(try store.session(client: "com.example.todo")?.status == .signedOut)
        #expect(try store.sessions().count == 2)
        // A second account: saved current, the first is current no more.
        var other = SessionRecord(
            client: "com.example.notes", accountKey: AccountKeys.key(issuer: "https://login.example.com", userId: "u_2"),
            status: .signedIn, updatedAt: Timestamp(millisecondsSince1970: 3000), current: true, vaultKeyed: true)
        try store.save(other)
        #expect(try store.session(client: "com.example.notes")?.accountKey == other.accountKey)
        #expect(try store.sessions(client: "com.example.notes").map(\.accountKey) == [other.accountKey, key])
        other.current = false
        try store.save(other)
        try store.deleteSession(client: "com.example.notes", account: other.accountKey)
        #expect(try store.sessions(client: "com.example.notes").map(\.accountKey) == [key])
        #expect(AccountKeys.isWellFormed(key) && key != other.accountKey)
    }

    // MARK: Retention

    /// An attempt inserted at `ms` and moved to `state` (with history).
    func ended(_ store: BrokerStore, _ id: String, _ state: AttemptState, at ms: Int64, followUp: ServerFollowUp = .none)
        throws
    {
        var a = sample(id, at: ms)
        try store.insert(a)
        a.state = state
        a.followUp = followUp
        a.updatedAt = Timestamp(millisecondsSince1970: ms + 10)
        try store.update(a, previous: .starting)
    }

    @Test func pruningDeletesOnlyEndedAttemptsPastTheCutoffWithNothingOwed() throws {
        let store = try BrokerStore(path: tempPath())
        for (i, state) in BrokerStore.prunableStates.enumerated() { try ended(store, "old-\(state)", state, at: 100 + Int64(i)) }
        try ended(store, "old-uncertain", .uncertain, at: 100)
        try ended(store, "old-waiting", .waiting, at: 100)
        try ended(store, "old-owed", .cancelled, at: 100, followUp: .cancel)
        try ended(store, "old-session", .completed, at: 100)
        try store.save(
            SessionRecord(
                client: "com.example.notes", status: .signedIn, attemptId: "old-session",
                updatedAt: Timestamp(millisecondsSince1970: 1)))
        try ended(store, "new-denied", .denied, at: 5_000)
        // Ended after the cutoff although created before it: kept.
        var late = sample("late-ack", at: 100)
        try store.insert(late)
        late.state = .acknowledged
        late.updatedAt = Timestamp(millisecondsSince1970: 6_000)
        try store.update(late, previous: .starting)

        let deleted = try store.prune(endedBefore: Timestamp(millisecondsSince1970: 1_000), limit: 100)
        #expect(deleted == BrokerStore.prunableStates.count)
        let left = Set(try store.list().map(\.id))
        #expect(left == ["old-uncertain", "old-waiting", "old-owed", "old-session", "new-denied", "late-ack"])
        #expect(try store.history(attemptId: "old-expired").isEmpty)
        #expect(try store.history(attemptId: "old-uncertain").count == 2)
        #expect(try store.prune(endedBefore: Timestamp(millisecondsSince1970: 1_000), limit: 100) == 0)
    }

    @Test func pruningGoesInBatchesOldestFirst() throws {
        let store = try BrokerStore(path: tempPath())
        for i in 0..<25 { try ended(store, "a\(i)", .acknowledged, at: 100 + Int64(i)) }
        let cutoff = Timestamp(millisecondsSince1970: 10_000)
        #expect(try store.prune(endedBefore: cutoff, limit: 10) == 10)
        #expect(try store.attempt(id: "a9") == nil)
        #expect(try store.attempt(id: "a10") != nil)
        #expect(try store.prune(endedBefore: cutoff, limit: 10) == 10)
        #expect(try store.prune(endedBefore: cutoff, limit: 10) == 5)
        #expect(try store.count() == 0)
    }

    @Test func aNewStateFileGivesPrunedPagesBack() throws {
        let path = tempPath()
        let store = try BrokerStore(path: path)
        for i in 0..<3_000 { try ended(store, "attempt-\(i)-" + String(repeating: "x", count: 40), .acknowledged, at: Int64(i)) }
        func size() throws -> Int {
            // The WAL is folded into the file first, so the size is the file's own.
            try store.checkpoint()
            return try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        }
        let full = try size()
        while try store.prune(endedBefore: Timestamp(millisecondsSince1970: 1_000_000), limit: 500) > 0 {
            try store.compact(pages: 10_000)
        }
        let pruned = try size()
        #expect(pruned * 4 < full, "the file stays \(pruned) bytes after pruning (it held \(full))")
    }
}
