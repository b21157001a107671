import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The broker's log in a real journald: a systemd-journald of the test's
/// own, in a private mount namespace (its sockets on a tmpfs over /run, its
/// runtime journal in the test's directory), and the broker started as
/// systemd starts a service: stderr connected to journald's stream socket
/// and `JOURNAL_STREAM` naming it.
@Suite("Journal", .dedicatedThread)
struct JournalTests {
    /// The catalog ids of docs/operations.md, Logs; they never change.
    static let signInCompleted = "02e84d8342294420a3ed5db5b3866722"
    static let exchangeUncertain = "0888a45bf7194fa7afbfabc5975cbe50"
    static let attemptReconciled = "d061b0f6de5f41cc985a298f39dd76c2"
    static let revokeOwed = "4dd91a2c85d043c6b7c95a95d778b90d"

    @Test(.enabled(if: JournalWorld.available, JournalWorld.unavailableReason))
    func aSignInIsFoundInTheJournalByItsAttemptIdAndNoSecretIsThere() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        let world = try JournalWorld(harness: h)
        defer { world.stop() }
        try world.startBroker()

        let rpc = try h.rpc()
        let (attempt, callback) = try h.startAndAuthorize(rpc: rpc)
        let id = try #require(attempt["attemptId"]?.stringValue)
        let authorizeURL = try #require(attempt["authorizeUrl"]?.stringValue)
        let finished = try h.cli(["finish", callback])
        #expect(finished.status == 0, "\(finished.err)")
        let session = try #require(h.keyringLookup(["kind": "session", "client": "com.example.notes"]))
        let sessionJSON = try JSONValue.parse(session)["session"]
        let accessToken = try #require(sessionJSON?["accessToken"]?.stringValue)
        let refreshToken = try #require(sessionJSON?["refreshToken"]?.stringValue)

        // `journalctl ATTEMPT_ID=…` finds the sign-in, with its fields, sent natively.
        var signedIn: [String: Any] = [:]
        try waitUntil(10, "the signed-in entry in the journal") {
            let entries = try world.entries(["ATTEMPT_ID=" + id])
            signedIn = entries.first { $0["MESSAGE"] as? String == "signed in" } ?? [:]
            return !signedIn.isEmpty
        }
        #expect(signedIn["CLIENT"] as? String == "com.example.notes")
        #expect(signedIn["ATTEMPT_ID"] as? String == id)
        #expect(signedIn["MESSAGE_ID"] as? String == Self.signInCompleted)
        #expect(signedIn["PRIORITY"] as? String == "6")
        #expect(signedIn["SYSLOG_IDENTIFIER"] as? String == "browser-login-broker")
        #expect(signedIn["_TRANSPORT"] as? String == "journal")
        #expect((signedIn["CODE_FILE"] as? String)?.hasSuffix("SessionKeeper.swift") == true)
        #expect(Int(signedIn["CODE_LINE"] as? String ?? "") != nil)
        // MESSAGE_ID= finds it too, and the attempt's transitions carry ATTEMPT_ID.
        let byMessageID = try world.entries(["MESSAGE_ID=" + Self.signInCompleted])
        #expect(byMessageID.contains { $0["ATTEMPT_ID"] as? String == id })
        let transitions = try world.entries(["ATTEMPT_ID=" + id]).filter { $0["MESSAGE"] as? String == "attempt changed" }
        #expect(transitions.map { $0["TO"] as? String } == ["waiting", "exchanging", "completed"])

        // Nothing went through the stream as text, and stderr stayed quiet.
        let all = try world.entries([])
        #expect(!all.contains { $0["_TRANSPORT"] as? String == "stdout" && "\($0["MESSAGE"] ?? "")".contains("signed in") })
        #expect(!h.brokerLogText.contains("signed in"), "the entry went to stderr too")

        // A sign-out whose revoke cannot reach the server: the revoke-owed event.
        h.server?.stop()
        _ = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        var owed: [String: Any] = [:]
        try waitUntil(10, "the revoke-owed entry in the journal") {
            owed = try world.entries(["MESSAGE_ID=" + Self.revokeOwed, "CLIENT=com.example.notes"]).first ?? [:]
            return !owed.isEmpty
        }
        #expect(owed["PRIORITY"] as? String == "5")
        #expect(owed["ERROR"] as? String != nil)

        // No secret anywhere in the whole journal, in any field.
        let journal = try world.journalText()
        let parsed = try Callback(parsing: callback)
        guard case .code(let code) = parsed.outcome else { throw HarnessError("no code") }
        let secrets: [(String, String)] = [
            ("access token", accessToken), ("refresh token", refreshToken), ("code", code),
            ("callback URL", callback), ("authorize URL", authorizeURL), ("server attempt id", parsed.attempt),
        ]
        #expect(journal.contains(id))
        for (name, secret) in secrets {
            #expect(!journal.contains(secret), "the \(name) is in the journal")
        }
    }

    @Test(.enabled(if: JournalWorld.available, JournalWorld.unavailableReason))
    func anUncertainExchangeAndItsReconcileHaveTheirMessageIDs() throws {
        // The reference server behind a hostile proxy (as ServerFaultTests), the broker in the journal world.
        let h = try Harness()
        try h.startServer(clients: FaultClient.clients)
        let proxy = try HostileProxy(dir: h.dir + "/proxy", upstreamPort: h.serverPort)
        defer { proxy.stop() }
        h.stopServer()
        h.serverArguments += ["--public-origin", proxy.origin]
        try h.launchServer()
        h.serverOrigin = proxy.origin
        h.writeClient(file: "faults.conf", id: FaultClient.id, appName: "Fault Notes", returnURL: FaultClient.returnURL)
        let world = try JournalWorld(harness: h)
        defer { world.stop() }
        try world.startBroker()

        let rpc = try h.rpc()
        let (id, callback) = try h.authorizeFaultClient(rpc)
        proxy.fault(["exchange": "500"])
        let error = try rpcFailure(rpc, "login.finish", ["url": .string(callback)])
        #expect(error.applicationCode == "EXCHANGE_UNCERTAIN")
        try waitUntil(20, "the attempt to be reconciled") { try attemptState(rpc, id) == "acknowledged" }
        proxy.fault([:])

        var uncertain: [[String: Any]] = []
        var reconciled: [[String: Any]] = []
        try waitUntil(10, "both entries in the journal") {
            uncertain = try world.entries(["MESSAGE_ID=" + Self.exchangeUncertain, "ATTEMPT_ID=" + id])
            reconciled = try world.entries(["MESSAGE_ID=" + Self.attemptReconciled, "ATTEMPT_ID=" + id])
            return !uncertain.isEmpty && !reconciled.isEmpty
        }
        #expect(uncertain.count == 1)
        #expect(uncertain.first?["TO"] as? String == "uncertain")
        #expect(uncertain.first?["CLIENT"] as? String == FaultClient.id)
        #expect(uncertain.first?["CODE"] as? String == "EXCHANGE_UNCERTAIN")
        #expect(reconciled.count == 1)
        #expect(reconciled.first?["RESOLUTION"] as? String == "cancelledAtServer")
        #expect(reconciled.first?["CLIENT"] as? String == FaultClient.id)
        #expect(reconciled.first?["PRIORITY"] as? String == "5")
        let journal = try world.journalText()
        #expect(!journal.contains(callback))
        #expect(!journal.contains(try Callback(parsing: callback).attempt))
    }

    /// The native protocol's two less common forms, as a real journald reads them: a value with a newline
    /// (the binary form) and an entry too large for a datagram (a sealed memfd passed over the socket).
    @Test(.enabled(if: JournalWorld.available, JournalWorld.unavailableReason))
    func journaldTakesAMultiLineValueAndAnEntryPassedInAMemfd() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        let world = try JournalWorld(harness: h)
        defer { world.stop() }
        try world.startBroker()
        // journald's socket in the broker's mount namespace, reached through journald's root.
        let pid = try #require(
            Int32(try String(contentsOfFile: world.pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        let socket = "/proc/\(pid)/root/run/systemd/journal/socket"
        let test = UUID().uuidString
        let multiLine = "first line\nsecond line\n\tindented"
        #expect(JournalWriter(socketPath: socket).send(["MESSAGE=" + multiLine, "BL_TEST=" + test, "KIND=lines"]))
        // A 64 KiB send buffer asked for: the 300 KiB entry cannot be a datagram.
        let big = String(repeating: "x", count: 300 << 10) + "\nend"
        let small = JournalWriter(socketPath: socket, sendBufferSize: 64 << 10)
        #expect(small.sendBufferSize < 300 << 10)
        #expect(small.send(["MESSAGE=a large entry", "BL_TEST=" + test, "KIND=big", "BIG=" + big]))

        var entries: [[String: Any]] = []
        try waitUntil(10, "both entries in the journal") {
            entries = try world.entries(["BL_TEST=" + test], all: true)
            return entries.count == 2
        }
        let lines = try #require(entries.first { $0["KIND"] as? String == "lines" })
        #expect(journalString(lines["MESSAGE"]) == multiLine)
        #expect(lines["_TRANSPORT"] as? String == "journal")
        let large = try #require(entries.first { $0["KIND"] as? String == "big" })
        #expect(large["MESSAGE"] as? String == "a large entry")
        #expect(journalString(large["BIG"]) == big)
    }

    @Test func withoutTheJournalStreamTheLinesGoToStderrInPlainWords() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        // An inherited JOURNAL_STREAM that is not this stderr does not count (sd-daemon's rule).
        h.brokerEnvironment["JOURNAL_STREAM"] = "1:1"
        try h.startBroker()
        let attempt = try h.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        // A file is not journald: no priority prefixes (they are for journald alone).
        try waitUntil(10, "the signed-in line") {
            h.brokerLogText.contains("\nbrowser-login-broker: signed in attempt.id=\(id) client=com.example.notes\n")
        }
        #expect(!h.brokerLogText.contains("<6>") && !h.brokerLogText.contains("<7>"))
        #expect(!h.brokerLogText.contains("message.id"))
        #expect(!h.brokerLogText.contains(Self.signInCompleted))
    }

    @Test func aForcedJournalTargetWithoutJournaldFallsBackToStderrLines() throws {
        // Only where no journald listens (the test must not write to the machine's journal).
        guard access("/run/systemd/journal/socket", F_OK) != 0 else { return }
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug", "--log-target", "journal"])
        let attempt = try h.signIn()
        let id = try #require(attempt["attemptId"]?.stringValue)
        try waitUntil(10, "the signed-in line") {
            h.brokerLogText.contains("<6>browser-login-broker: signed in attempt.id=\(id) client=com.example.notes\n")
        }
    }

    @Test func anUnknownLogTargetIsAUsageError() throws {
        let result = try runProgram(binDirectory + "/browser-login-broker", ["--log-target", "syslog"])
        #expect(result.status == 64)
        #expect(result.err.contains("--log-target takes journal, stderr or auto"))
        let help = try runProgram(binDirectory + "/browser-login-broker", ["--help"])
        #expect(help.out.contains("--log-target TARGET"))
    }
}

extension Harness {
    /// The broker's stderr so far.
    var brokerLogText: String { (try? String(contentsOfFile: brokerLog, encoding: .utf8)) ?? "" }
}

/// A field of `journalctl -o json`: a string, or an array of its bytes when it is not printable text.
private func journalString(_ value: Any?) -> String? {
    if let text = value as? String { return text }
    guard let numbers = value as? [NSNumber] else { return nil }
    return String(decoding: numbers.map { $0.uint8Value }, as: UTF8.self)
}

/// A real systemd-journald in a private mount namespace, and the broker
/// started in that namespace with its stderr on journald's stream.
final class JournalWorld: Sendable {
    let harness: Harness
    let journalDirectory: String
    let pidFile: String

    init(harness: Harness) throws {
        self.harness = harness
        journalDirectory = harness.dir + "/journal"
        pidFile = harness.dir + "/journald.pid"
        try FileManager.default.createDirectory(atPath: journalDirectory, withIntermediateDirectories: true)
    }

    static let tools = [
        "/lib/systemd/systemd-journald", "/usr/bin/journalctl", "/usr/bin/systemd-cat", "/usr/bin/unshare",
        "/usr/bin/setpriv", "/usr/bin/stat",
    ]

    /// Root, the tools, and mount namespaces allowed.
    static let available: Bool = {
        guard getuid() == 0, tools.allSatisfy({ access($0, X_OK) == 0 }) else { return false }
        return (try? spawnAndWait(["/usr/bin/unshare", "--mount", "/bin/true"]).status) == 0
    }()

    static let unavailableReason: Comment =
        "needs root, mount namespaces (unshare --mount) and \(tools.joined(separator: ", "))"

    /// In the new namespace: a tmpfs over /run (journald's sockets, nothing of
    /// the machine's), the runtime journal bound to the test's directory, a
    /// tmpfs over /var/log/journal so nothing is written there; journald dies
    /// with the broker (PR_SET_PDEATHSIG: the shell becomes the broker by
    /// exec). The broker's stderr is journald's stream, named in JOURNAL_STREAM
    /// as systemd does (`st_dev:st_ino`).
    static let script = """
        set -eu
        journal=$1; pidfile=$2; shift 2
        mount -t tmpfs -o mode=0755 tmpfs /run
        mkdir -p /run/systemd/journal /run/log/journal
        mount --bind "$journal" /run/log/journal
        if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; fi
        setpriv --pdeathsig KILL /lib/systemd/systemd-journald </dev/null >"$journal.log" 2>&1 &
        echo $! >"$pidfile"
        i=0
        while [ ! -S /run/systemd/journal/stdout ] || [ ! -S /run/systemd/journal/socket ]; do
            i=$((i + 1)); [ $i -lt 200 ] || { echo "journald did not start" >&2; exit 1; }
            sleep 0.05
        done
        exec systemd-cat --identifier=browser-login-broker -- /bin/sh -c \\
            'JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2); export JOURNAL_STREAM; exec "$@"' sh "$@"
        """

    func startBroker() throws {
        let h = harness
        try h.startKeyringIfNeeded()
        let scriptPath = h.dir + "/journal-world.sh"
        try Self.script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        h.broker = try Child(
            "/usr/bin/unshare",
            ["--mount", "--propagation", "private", "/bin/sh", scriptPath, journalDirectory, pidFile]
                + [binDirectory + "/browser-login-broker", "--log-level", "debug"],
            environment: h.environment(), log: h.brokerLog)
        try waitUntil(20, "the broker socket") {
            guard h.broker?.isRunning == true else {
                throw HarnessError(
                    "broker exited:\n\(h.broker?.output ?? "")\njournald:\n\(journaldLog)", fatal: true)
            }
            _ = try RPCClient(socketPath: h.socketPath, timeout: .seconds(2)).call("broker.info")
            return true
        }
    }

    var journaldLog: String { (try? String(contentsOfFile: journalDirectory + ".log", encoding: .utf8)) ?? "" }

    /// Stops the broker, then journald (it also dies with the broker).
    func stop() {
        harness.broker?.stop()
        if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
            let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
        {
            kill(pid, SIGKILL)
        }
    }

    /// `journalctl --directory … -o json MATCHES…`, one object per entry; `all`: fields of more than
    /// 4,096 bytes too (`--all`), which journalctl otherwise leaves out.
    func entries(_ matches: [String], all: Bool = false) throws -> [[String: Any]] {
        let result = try runProgram(
            "/usr/bin/journalctl",
            ["--directory", journalDirectory, "--no-pager", "-o", "json"] + (all ? ["--all"] : []) + matches)
        guard result.status == 0 else { throw HarnessError("journalctl failed: \(result.err)") }
        return result.out.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Every entry with every field, as journalctl exports them (`-o export`).
    func journalText() throws -> String {
        // Binary fields make the export invalid UTF-8: read the bytes, decode leniently.
        let path = harness.dir + "/journal.export"
        let result = try spawnAndWait(
            ["/usr/bin/journalctl", "--directory", journalDirectory, "--no-pager", "-o", "export"], output: path)
        guard result.status == 0 else { throw HarnessError("journalctl failed with status \(result.status)") }
        let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
        guard !text.isEmpty else { throw HarnessError("journalctl exported nothing") }
        return text
    }
}
