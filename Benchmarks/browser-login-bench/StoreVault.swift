// The broker's two persistence layers against what they are built on,
// measured in the same run (issue 19, item 4): the state store's commits
// against a bare SQLite insert loop, and the vault's store against
// `secret-tool store`.
import BrokerCore
import BrokerStore
import BrokerVault
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import SQLiteSupport

#if canImport(Glibc)
    import Glibc
#endif

extension Figures {
    /// One attempt as the broker records it: insert (with its first history
    /// row), then three state changes (each an update with a history row),
    /// each its own transaction, on a file made as the broker makes it. The
    /// baseline is a bare loop of single-row INSERT transactions into a table
    /// of one integer and one text, with the same journal settings.
    static func store(world: World, attempts: Int, reps: Int) throws {
        let directory = world.dir + "/store-figure"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var broker: [Double] = []
        var bare: [Double] = []
        for rep in 0..<reps {
            let path = directory + "/state-\(rep).sqlite"
            let store = try BrokerStore(path: path)
            var t0 = nowNanos()
            for i in 0..<attempts {
                let created = Timestamp(millisecondsSince1970: 1_000_000 + Int64(i))
                var attempt = AttemptRecord(
                    id: "at_bench\(rep)_\(i)", client: world.clientIds[0], state: .starting,
                    returnURL: world.returnURL(world.clientIds[0]), issuer: world.serverOrigin, createdAt: created)
                try store.insert(attempt)
                for (previous, next) in [
                    (AttemptState.starting, AttemptState.waiting), (.waiting, .exchanging), (.exchanging, .completed),
                ] {
                    attempt.state = next
                    attempt.updatedAt = Timestamp(millisecondsSince1970: created.millisecondsSince1970 + 1)
                    try store.update(attempt, previous: previous)
                }
            }
            broker.append(Double(nowNanos() - t0) / Double(attempts * 4))
            try store.close()

            let db = try Database(path: directory + "/bare-\(rep).sqlite")
            try db.execute("CREATE TABLE t (n INTEGER NOT NULL, s TEXT NOT NULL)")
            t0 = nowNanos()
            for i in 0..<(attempts * 4) {
                try db.transaction { _ = try db.run("INSERT INTO t (n, s) VALUES (?, ?)", Int64(i), "at_bench\(i)") }
            }
            bare.append(Double(nowNanos() - t0) / Double(attempts * 4))
            try db.close()
        }
        let b = median(broker)
        let s = median(bare)
        record(
            Row(
                figure: "state store: one commit of an attempt (with its history row)", value: us(b),
                baseline: us(s) + " (bare SQLite insert)", ratio: String(format: "%.2f×", b / s), target: "(info)",
                met: nil))
    }

    /// The vault's `store` of a session-sized secret through libsecret, and
    /// `secret-tool store` of the same secret (a process per item, as a
    /// script would), interleaved; the items are removed afterwards.
    static func vault(world: World, items: Int) async throws {
        let vault = SecretServiceVault()
        let secret = Array(String(repeating: "s", count: 600).utf8)
        var broker: [Double] = []
        var tool: [Double] = []
        for i in 0..<items {
            let attributes = ["kind": "bench-vault", "client": "com.example.benchvault", "attempt": "a\(i)"]
            var t0 = nowNanos()
            try await vault.store(secret, label: "bench", attributes: attributes)
            broker.append(Double(nowNanos() - t0))

            t0 = nowNanos()
            let result = try runWithInput(
                ["/usr/bin/secret-tool", "store", "--label=bench", "kind", "bench-tool", "n", "\(i)"], input: secret,
                world: world)
            guard result == 0 else { throw BenchError("secret-tool store failed (\(result))") }
            tool.append(Double(nowNanos() - t0))
        }
        for i in 0..<items {
            try? await vault.remove(attributes: ["kind": "bench-vault", "client": "com.example.benchvault", "attempt": "a\(i)"])
            _ = try? runWithInput(["/usr/bin/secret-tool", "clear", "kind", "bench-tool", "n", "\(i)"], input: [], world: world)
        }
        let b = median(broker)
        let t = median(tool)
        record(
            Row(
                figure: "vault: store one item (Secret Service)", value: ms(b), baseline: ms(t) + " (secret-tool store)",
                ratio: String(format: "%.2f×", b / t), target: "(info)", met: nil))
    }

    /// Runs `argv` in the world's environment (its bus) with `input` on its
    /// standard input; answers its exit status.
    static func runWithInput(_ argv: [String], input: [UInt8], world: World) throws -> Int32 {
        let (read, write) = try closeOnExecPipe()
        let pid: pid_t
        do {
            pid = try spawn(argv, environment: world.environment(), output: "/dev/null", input: read)
        } catch {
            close(read)
            close(write)
            throw error
        }
        close(read)
        _ = input.withUnsafeBytes { Glibc.write(write, $0.baseAddress, $0.count) }
        close(write)
        return exitStatus(reap(pid))
    }
}
