import BrowserLoginProtocol
import CommandLineKit
import Dispatch
import Foundation
import SQLiteSupport
import Synchronization
import SystemSupport

/// The `browser-login-server` command line: `serve` (the default) and the
/// admin subcommands. The executable is `exit(ServerCommand.main(args))`.
public enum ServerCommand {
    /// The flags of `serve`, over the configuration file.
    public static let command = Command(
        "browser-login-server",
        options: [
            .value("config", "FILE", "the JSON configuration file (docs/server.md)"),
            .value("listen", "ADDR", "IPv4 or IPv6 literal to listen on (default 127.0.0.1)"),
            .value("port", "N", "TCP port; 0 picks a free one (default 8080)"),
            .value("base-path", "PATH", "default /browser-login"),
            .value("public-origin", "ORIGIN", "the issuer, e.g. https://login.example.com"),
            .value("database", "PATH|URL", "the SQLite database file, or a postgresql:// URL"),
            .value("secret-key", "PATH", "the server secret file (default DATABASE.key; BROWSER_LOGIN_SERVER_SECRET wins)"),
            .value("outbox", "DIR", "where sign-in emails are written (default next to the database)"),
            .value("lifetime-ms", "N", "attempt lifetime, 1000-300000 (default 120000)"),
            .value("session-lifetime-ms", "N", "session lifetime (default 30 days)"),
            .value("access-token-lifetime-ms", "N", "access token lifetime (default 600000)"),
            .value("refresh-grace-ms", "N", "refresh grace window (default 60000)"),
            .value("tls-cert", "PATH", "serve https (GnuTLS), with --tls-key"),
            .value("tls-key", "PATH", "the key of --tls-cert"),
            .value("test-account", "EMAIL", "add a test account base address (repeatable)", repeatable: true),
            .value("ready-file", "PATH", "write the listening URL here once ready"),
            .value("test-exchange-delay-ms", "N", "FOR TESTS ONLY: delay exchange answers after commit"),
        ],
        description: "Commands:\n"
            + Command.table(
                commands.map { (([String($0.name.dropFirst(prefix.count))] + $0.arguments).joined(separator: " "), $0.summary) }
            ),
        synopsis: commands[0].usage + "\n       " + Command(prefix + "COMMAND", options: commands[1].options).usage,
        optionsTitle: "flags of serve (override the configuration file):")

    static let prefix = "browser-login-server "

    /// The commands, each with its words, arguments (`[EMAIL]`: optional)
    /// and options: `--help`'s usage lines and commands, and
    /// browser-login-server(1)'s, are made of these, and `main` runs the
    /// commands declared here.
    public static let commands: [Command] = {
        let store: [Option] = [
            .value("config", "FILE", "the configuration file that names the database"),
            .value("database", "PATH|URL", "the SQLite database file, or a postgresql:// URL"),
        ]
        func admin(_ words: String, _ summary: String, _ arguments: [String] = []) -> Command {
            Command(prefix + words, summary: summary, arguments: arguments, options: store)
        }
        return [
            Command(
                prefix + "serve",
                summary:
                    "serve until SIGTERM (the default command: 'browser-login-server [FLAGS]' serves too); SIGHUP re-reads the configuration, and its testAccounts take effect at once",
                arguments: ["[FLAGS]"]),
            admin("users list", "list the accounts"),
            admin("users disable", "disable an account: its sessions end at once", ["EMAIL"]),
            admin("users enable", "enable a disabled account again", ["EMAIL"]),
            admin("attempts list", "list the sign-in attempts and their states"),
            admin("members list", "list the members: addresses that may sign up in every sign-up mode"),
            admin("members add", "add a member", ["EMAIL"]),
            admin("members remove", "remove a member", ["EMAIL"]),
            admin(
                "invitations create",
                "create a single-use invitation (for any address, or only for EMAIL) and print its token once",
                ["[EMAIL]"]),
            admin("invitations list", "list the invitations and their states"),
            admin("invitations revoke", "revoke an unused invitation", ["ID"]),
            admin("waitlist list", "list the waitlist"),
            admin("waitlist approve", "approve a waitlist entry: the address becomes a member", ["EMAIL"]),
            admin("migrate", "bring the database's schema up to date and exit (the server also does it at start-up)"),
        ]
    }()

    /// `help --troff synopsis|commands|options`: the parts of
    /// browser-login-server(1) made from the declarations `--help` shows
    /// (scripts/man puts them in the page; ManualPageTests checks them).
    static func manualPart(_ words: [String]) -> String? {
        switch words {
        case ["--troff", "synopsis"]: return Command.manualSynopsis(commands)
        case ["--troff", "commands"]: return commands.map { $0.manualEntry(dropping: prefix) }.joined(separator: "\n")
        case ["--troff", "options"]: return command.manualOptions()
        default: return nil
        }
    }

    /// The declared command `args` starts with: its words and arguments,
    /// taken out of `args`. `serve` when `args` names no command.
    static func take(_ args: inout [String]) throws -> [String] {
        let declared = commands.map { $0.name.dropFirst(prefix.count).split(separator: " ").map(String.init) }
        guard let first = args.first, first != "serve" else {
            if args.first == "serve" { args.removeFirst() }
            return ["serve"]
        }
        let group = declared.filter { $0[0] == first }
        guard !group.isEmpty else { return ["serve"] }
        guard let index = declared.firstIndex(where: { $0 == Array(args.prefix($0.count)) }) else {
            let choices = group.indices.map { commands[declared.firstIndex(of: group[$0])!].usage }
            throw UsageError(
                "unknown command '\(args.prefix(2).joined(separator: " "))'; the \(first) commands are:\n  "
                    + choices.joined(separator: "\n  "))
        }
        var words = declared[index]
        args.removeFirst(words.count)
        for placeholder in commands[index].arguments {
            if let next = args.first, !next.hasPrefix("-") {
                words.append(next)
                args.removeFirst()
            } else if !placeholder.hasPrefix("[") {
                throw UsageError("'\(words.joined(separator: " "))' needs \(placeholder)")
            }
        }
        return words
    }

    /// Runs the command; answers the exit status (0 ok, 64 usage, 78 configuration, 1 other).
    public static func main(_ arguments: [String]) -> Int32 {
        var args = Array(arguments.dropFirst())
        if args.first == "help" {
            guard args.count > 1 else {
                print(command.help)
                return 0
            }
            guard let part = manualPart(Array(args.dropFirst())) else {
                return usageError("help takes no arguments, or --troff synopsis|commands|options")
            }
            print(part)
            return 0
        }
        let configuration: ServerConfiguration
        let parsed: Arguments
        let words: [String]
        do {
            words = try take(&args)
            guard case .run(let p) = try command.parse(args) else {
                print(command.help)
                return 0
            }
            parsed = p
            configuration = try configure(parsed)
        } catch let error as UsageError {
            return usageError(error.message)
        } catch let error as ConfigurationError {
            return configurationError(error)
        } catch {
            return usageError("\(error)")
        }
        if words == ["serve"] { return serve(configuration, flags: parsed) }
        if configuration.databasePath.isEmpty {
            return configurationError(
                ConfigurationError(field: "database", rule: "required", message: "set --database or --config"))
        }
        if SignupAdmin.groups.contains(words[0]) { return SignupAdmin.run(words, configuration: configuration) }
        return admin(words, databasePath: configuration.databasePath)
    }

    /// One line (the commands of a group after it): the mistake, and where the usage is.
    private static func usageError(_ message: String) -> Int32 {
        let line = message.contains("--help") || message.contains("\n") ? message : message + "; see --help"
        FileHandle.standardError.write(Data("browser-login-server: \(line)\n".utf8))
        return UsageError.exitStatus
    }

    private static func configurationError(_ error: ConfigurationError) -> Int32 {
        // One line, with journald's priority prefix only where journald reads it.
        StderrLogHandler().handle(
            LogEntry(level: .error, label: "browser-login-server", message: "invalid configuration: \(error)", metadata: [:]))
        return 78
    }

    /// Reads `--config` first, then applies the other flags over it.
    static func configure(_ flags: Arguments) throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        if let path = flags["config"] {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(field: "--config", rule: "readable", message: "cannot read \(path)")
            }
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            configuration = try ServerConfiguration.load(json: data, relativeTo: directory)
        }
        func text(_ name: String, _ apply: (String) -> Void) { flags[name].map(apply) }
        func number(_ name: String, _ apply: (Int64) -> Void) throws {
            guard let value = flags[name] else { return }
            guard let n = Int64(value) else {
                throw ConfigurationError(field: "--" + name, rule: "integer", message: "'\(value)' is not a whole number")
            }
            apply(n)
        }
        text("listen") { configuration.listenAddress = $0 }
        try number("port") { configuration.port = Int($0) }
        text("base-path") { configuration.basePath = $0 }
        text("public-origin") { configuration.publicOrigin = $0 }
        text("database") { configuration.databasePath = $0 }
        text("secret-key") { configuration.secretKeyPath = $0 }
        text("outbox") { configuration.outboxPath = $0 }
        try number("lifetime-ms") { configuration.lifetimeMillis = $0 }
        try number("session-lifetime-ms") { configuration.sessionLifetimeMillis = $0 }
        try number("access-token-lifetime-ms") { configuration.accessTokenLifetimeMillis = $0 }
        try number("refresh-grace-ms") { configuration.refreshGraceMillis = $0 }
        text("tls-cert") { configuration.tlsCertificatePath = $0 }
        text("tls-key") { configuration.tlsKeyPath = $0 }
        configuration.testAccounts += flags.all("test-account")
        try number("test-exchange-delay-ms") { configuration.testExchangeDelayMillis = $0 }
        return configuration
    }

    // MARK: serve

    private static func serve(_ configuration: ServerConfiguration, flags: Arguments) -> Int32 {
        let server: LoginServer
        let readyFile = flags["ready-file"]
        // Watching SIGTERM before anything starts, so a stop that comes at
        // any time after READY=1 ends the server gracefully. SIGHUP reloads
        // the configuration; the signals are handled here, in order.
        let arrived = DispatchSemaphore(value: 0)
        let pending = PendingSignals()
        let signals = SignalWatcher(signals: [SIGTERM, SIGINT, SIGHUP]) { number in
            pending.numbers.withLock { $0.append(number) }
            arrived.signal()
        }
        do {
            server = try LoginServer(configuration: configuration)
        } catch let error as ConfigurationError {
            return configurationError(error)
        } catch {
            StderrLogHandler().handle(
                LogEntry(level: .error, label: "browser-login-server", message: "cannot start: \(error)", metadata: [:]))
            return 1
        }
        if configuration.testExchangeDelayMillis > 0 {
            Log.warning("TEST-ONLY exchange delay is on", ["delay.ms": "\(configuration.testExchangeDelayMillis)"])
        }
        if let readyFile { _ = FileManager.default.createFile(atPath: readyFile, contents: Data((server.listenURL + "\n").utf8)) }
        print("browser-login-server: listening on \(server.listenURL)")
        fflush(nil)
        ServiceManager.notify("READY=1\nSTATUS=listening on \(server.listenURL)")

        while true {
            arrived.wait()
            guard pending.numbers.withLock({ $0.removeFirst() }) == SIGHUP else { break }
            ServiceManager.notify("RELOADING=1")
            do {
                try server.reload(try configure(flags))
            } catch {
                Log.error("the reloaded configuration is refused; the previous one stays", ["error": "\(error)"])
            }
            ServiceManager.notify("READY=1")
        }
        Log.info("stopping")
        ServiceManager.notify("STOPPING=1")
        server.stop()
        signals.cancel()
        return 0
    }

    // MARK: Admin

    private static func admin(_ command: [String], databasePath: String) -> Int32 {
        do {
            // The admin commands use either store (a file path or a postgresql:// URL); opening it migrates.
            let location = DatabaseLocation(databasePath)
            if case .sqlite(let path) = location, command != ["migrate"], !FileManager.default.fileExists(atPath: path) {
                return failure("no database at \(path)")
            }
            let store = try Store(location: location, poolSize: 1)
            defer { store.close() }
            func transaction<T>(_ body: (Database) throws -> T) throws -> T { try store.transaction(body).get() }
            let now = Timestamp.now().millisecondsSince1970
            func time(_ ms: Int64?) -> String { ms.map { Timestamp(millisecondsSince1970: $0).rfc3339 } ?? "-" }
            switch command {
            case ["users", "list"]:
                print(["USER_ID", "EMAIL", "STATE", "CREATED", "LIVE_SESSIONS"].joined(separator: "\t"))
                for row in try transaction({ db in
                    try db.query(
                        """
                        SELECT u.*, (SELECT COUNT(*) FROM sessions s WHERE s.user_id = u.id AND s.revoked_at IS NULL
                            AND s.expires_at > ?) AS live FROM users u ORDER BY u.created_at, u.email
                        """, now)
                }) {
                    print(
                        [
                            row.text("id"), row.text("email"), row.bool("disabled") ? "disabled" : "enabled",
                            time(row.int("created_at")), "\(row.int("live") ?? 0)",
                        ].joined(separator: "\t"))
                }
                return 0
            case let c where c.count == 3 && c[0] == "users":
                guard let email = EmailAddress(c[2]) else { return failure("'\(c[2])' is not an email address") }
                let disable = c[1] == "disable"
                let found = try transaction { db in try Records.setDisabled(db, email: email.text, disabled: disable, now: now) }
                guard found else { return failure("no user \(email.text)") }
                print("\(email.text): \(disable ? "disabled; their sessions are revoked" : "enabled")")
                return 0
            case ["attempts", "list"]:
                // Attempt ids are never stored; the reference is a prefix of their digest.
                print(["REF", "CLIENT", "STATE", "CREATED", "EXPIRES", "SESSION"].joined(separator: "\t"))
                for row in try transaction({ db in try db.query("SELECT * FROM attempts ORDER BY created_at") }) {
                    var state = row.text("state")
                    if (state == "pending" || state == "authorized") && now >= row.millis("expires_at") { state = "expired" }
                    print(
                        [
                            String(row.text("id_hash").prefix(10)), row.text("client_id"), state,
                            time(row.int("created_at")), time(row.int("expires_at")), row.string("session_id") ?? "-",
                        ].joined(separator: "\t"))
                }
                return 0
            case ["migrate"]:
                print(
                    "browser-login-server: the schema of \(location.redacted) is up to date (\(Schema.migrations.count) migrations)"
                )
                return 0
            default:
                return usageError("unknown command '\(command.joined(separator: " "))'")
            }
        } catch {
            return failure("\(error)")
        }
    }

    /// Prints `message` on stderr; exit status 1.
    private static func failure(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("browser-login-server: \(message)\n".utf8))
        return 1
    }
}

/// The signals the serve loop has yet to handle, in arrival order.
private final class PendingSignals: Sendable {
    let numbers = Mutex<[Int32]>([])
}
