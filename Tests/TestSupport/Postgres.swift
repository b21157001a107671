import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A throw-away PostgreSQL server for the tests (scripts/postgres): a
/// cluster in a temporary directory, on a Unix socket there, run as an
/// unprivileged user when the tests run as root. The server is stopped and
/// its directory removed by `stop()`, at the last reference, and — should
/// the test process die first — by the watchdog scripts/postgres leaves
/// behind, which waits for this process to end.
public final class PostgresCluster: Sendable {
    /// The cluster's directory (its data, its socket, its log).
    public let directory: String
    /// The URL of the `postgres` database: `postgresql://USER@/postgres?host=DIR`.
    public let adminURL: String
    private let user: String
    private let counter = Mutex(0)
    private let stopped = Mutex(false)

    static let script = repositoryRoot + "/scripts/postgres"

    /// Starts a new cluster (a few seconds).
    public init() throws {
        // Directly in the base directory (which other users may traverse, unlike a
        // mkdtemp'd parent): the server's user owns this one.
        directory = try makeTemporaryDirectory("pg")
        let run = try runProgram(
            Self.script, ["start", directory, "--owner", "\(getpid())"], timeout: 120)
        guard run.status == 0, let url = run.out.split(separator: "\n").last.map(String.init), url.hasPrefix("postgresql://")
        else {
            try? FileManager.default.removeItem(atPath: directory)
            throw HarnessError("scripts/postgres start failed (status \(run.status)): \(run.err)")
        }
        adminURL = url
        user = String(url.dropFirst("postgresql://".count).prefix { $0 != "@" })
    }

    deinit { stop() }

    /// The URL of database `name` on this cluster.
    public func url(database name: String) -> String {
        "postgresql://\(user)@/\(name)?host=\(directory)"
    }

    /// Creates a new empty database; answers its URL.
    public func createDatabase() throws -> String {
        let name =
            "t\(getpid())_"
            + String(
                counter.withLock {
                    $0 += 1; return $0
                })
        try psql(adminURL, "CREATE DATABASE \(name)")
        return url(database: name)
    }

    /// Runs `sql` with psql against `url`; answers its output (unaligned, tuples only).
    @discardableResult
    public func psql(_ url: String, _ sql: String) throws -> String {
        let run = try runProgram("/usr/bin/psql", [url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql], timeout: 60)
        guard run.status == 0 else { throw HarnessError("psql failed (status \(run.status)): \(run.err)") }
        return run.out
    }

    /// Stops the server, keeping its data (`startAgain()` brings it back).
    public func halt() throws {
        let run = try runProgram(Self.script, ["halt", directory], timeout: 120)
        guard run.status == 0 else { throw HarnessError("scripts/postgres halt failed: \(run.err)") }
    }

    public func startAgain() throws {
        let run = try runProgram(Self.script, ["start-again", directory], timeout: 120)
        guard run.status == 0 else { throw HarnessError("scripts/postgres start-again failed: \(run.err)") }
    }

    /// Stops the server and removes its directory (once).
    public func stop() {
        guard
            !stopped.withLock({
                let was = $0; $0 = true; return was
            })
        else { return }
        _ = try? runProgram(Self.script, ["stop", directory], timeout: 120)
    }

    // MARK: The shared cluster

    /// Why PostgreSQL cannot be used here, or nil when it can.
    public static let unavailableReason: String? = {
        let run = try? runProgram(script, ["check"], timeout: 30)
        guard let run else { return "scripts/postgres could not run" }
        return run.status == 0 ? nil : run.err.trimmingCharacters(in: .whitespacesAndNewlines)
    }()

    /// `BL_REQUIRE_POSTGRES` is set (CI): a test that needs PostgreSQL fails instead of skipping.
    public static var required: Bool { ProcessInfo.processInfo.environment["BL_REQUIRE_POSTGRES"].map { !$0.isEmpty } ?? false }

    /// The tests' store: `BL_TEST_STORE=postgres` runs the server tests on PostgreSQL.
    public static var selectedForTests: Bool { ProcessInfo.processInfo.environment["BL_TEST_STORE"] == "postgres" }

    private static let sharedCluster: (cluster: PostgresCluster?, failure: String) = {
        if let reason = unavailableReason { return (nil, reason) }
        do {
            let cluster = try PostgresCluster()
            // Stopped when the test process exits (the watchdog is the fallback).
            atexit { PostgresCluster.stopShared() }
            return (cluster, "")
        } catch {
            return (nil, "\(error)")
        }
    }()

    /// One cluster for the whole test process, started on first use; each test makes a database of its own on it.
    public static func shared() throws -> PostgresCluster {
        guard let cluster = sharedCluster.cluster else { throw HarnessError(sharedCluster.failure) }
        return cluster
    }

    static func stopShared() { sharedCluster.cluster?.stop() }
}
