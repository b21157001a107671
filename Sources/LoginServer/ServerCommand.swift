import BrowserLoginProtocol
import Dispatch
import Foundation
import SQLiteSupport
import SystemSupport

/// The `browser-login-server` command line: `serve` (the default) and the
/// admin subcommands. The executable is `exit(ServerCommand.main(args))`.
public enum ServerCommand {
    public static let usage = """
        usage: browser-login-server [serve] [--config FILE] [flags]
               browser-login-server users list [--config FILE | --database PATH]
               browser-login-server users disable EMAIL [--config FILE | --database PATH]
               browser-login-server users enable EMAIL [--config FILE | --database PATH]
               browser-login-server attempts list [--config FILE | --database PATH]

        flags (override the configuration file):
          --config FILE                 the JSON configuration file (docs/server.md)
          --listen ADDR                 IPv4 or IPv6 literal to listen on (default 127.0.0.1)
          --port N                      TCP port; 0 picks a free one (default 8080)
          --base-path PATH              default /browser-login
          --public-origin ORIGIN        the issuer, e.g. https://login.example.com
          --database PATH               the SQLite database
          --secret-key PATH             the server secret file (default DATABASE.key)
          --outbox DIR                  where sign-in emails are written (default next to the database)
          --lifetime-ms N               attempt lifetime, 1000-300000 (default 120000)
          --session-lifetime-ms N       session lifetime (default 30 days)
          --access-token-lifetime-ms N  access token lifetime (default 600000)
          --refresh-grace-ms N          refresh grace window (default 60000)
          --tls-cert PATH --tls-key PATH  serve https (GnuTLS)
          --test-account EMAIL          add a test account base address (repeatable)
          --ready-file PATH             write the listening URL here once ready
          --test-exchange-delay-ms N    FOR TESTS ONLY: delay exchange answers after commit
        """

    /// Runs the command; answers the exit status (0 ok, 64 usage, 78 configuration, 1 other).
    public static func main(_ arguments: [String]) -> Int32 {
        var args = Array(arguments.dropFirst())
        if args.first == "--help" || args.first == "-h" || args.first == "help" {
            print(usage)
            return 0
        }
        let command: [String]
        switch args.first {
        case "users", "attempts":
            let count = args.count >= 2 && (args[1] == "disable" || args[1] == "enable") ? 3 : 2
            guard args.count >= count else { return usageError("missing arguments") }
            command = Array(args.prefix(count))
            args.removeFirst(count)
        case "serve":
            command = ["serve"]
            args.removeFirst()
        default:
            command = ["serve"]
        }
        let configuration: ServerConfiguration
        var readyFile: String?
        do {
            (configuration, readyFile) = try parse(args)
        } catch let error as UsageError {
            return usageError(error.message)
        } catch let error as ConfigurationError {
            return configurationError(error)
        } catch {
            return usageError("\(error)")
        }
        if command == ["serve"] { return serve(configuration, readyFile: readyFile) }
        if configuration.databasePath.isEmpty {
            return configurationError(
                ConfigurationError(field: "database", rule: "required", message: "set --database or --config"))
        }
        return admin(command, databasePath: configuration.databasePath)
    }

    struct UsageError: Error {
        var message: String
    }

    private static func usageError(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("browser-login-server: \(message)\n\(usage)\n".utf8))
        return 64
    }

    private static func configurationError(_ error: ConfigurationError) -> Int32 {
        FileHandle.standardError.write(Data("<3>browser-login-server: invalid configuration: \(error)\n".utf8))
        return 78
    }

    /// Reads `--config` first, then applies the other flags over it.
    static func parse(_ args: [String]) throws -> (ServerConfiguration, String?) {
        var flags: [(String, String)] = []
        var i = 0
        while i < args.count {
            let flag = args[i]
            guard flag.hasPrefix("--") else { throw UsageError(message: "unexpected argument '\(flag)'") }
            var name = flag
            var value: String
            if let eq = flag.firstIndex(of: "=") {
                name = String(flag[..<eq])
                value = String(flag[flag.index(after: eq)...])
            } else {
                guard i + 1 < args.count else { throw UsageError(message: "\(flag) needs a value") }
                value = args[i + 1]
                i += 1
            }
            flags.append((name, value))
            i += 1
        }
        var configuration = ServerConfiguration()
        if let path = flags.last(where: { $0.0 == "--config" })?.1 {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(field: "--config", rule: "readable", message: "cannot read \(path)")
            }
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            configuration = try ServerConfiguration.load(json: data, relativeTo: directory)
        }
        var readyFile: String?
        func number(_ name: String, _ value: String) throws -> Int64 {
            guard let n = Int64(value) else {
                throw ConfigurationError(field: name, rule: "integer", message: "'\(value)' is not a whole number")
            }
            return n
        }
        for (name, value) in flags {
            switch name {
            case "--config": break
            case "--listen": configuration.listenAddress = value
            case "--port": configuration.port = Int(try number(name, value))
            case "--base-path": configuration.basePath = value
            case "--public-origin": configuration.publicOrigin = value
            case "--database": configuration.databasePath = value
            case "--secret-key": configuration.secretKeyPath = value
            case "--outbox": configuration.outboxPath = value
            case "--lifetime-ms": configuration.lifetimeMillis = try number(name, value)
            case "--session-lifetime-ms": configuration.sessionLifetimeMillis = try number(name, value)
            case "--access-token-lifetime-ms": configuration.accessTokenLifetimeMillis = try number(name, value)
            case "--refresh-grace-ms": configuration.refreshGraceMillis = try number(name, value)
            case "--tls-cert": configuration.tlsCertificatePath = value
            case "--tls-key": configuration.tlsKeyPath = value
            case "--test-account": configuration.testAccounts.append(value)
            case "--ready-file": readyFile = value
            case "--test-exchange-delay-ms": configuration.testExchangeDelayMillis = try number(name, value)
            default: throw UsageError(message: "unknown flag \(name)")
            }
        }
        return (configuration, readyFile)
    }

    // MARK: serve

    private static func serve(_ configuration: ServerConfiguration, readyFile: String?) -> Int32 {
        let server: LoginServer
        do {
            server = try LoginServer(configuration: configuration)
        } catch let error as ConfigurationError {
            return configurationError(error)
        } catch {
            FileHandle.standardError.write(Data("<3>browser-login-server: cannot start: \(error)\n".utf8))
            return 1
        }
        if configuration.testExchangeDelayMillis > 0 {
            Log.warning("TEST-ONLY exchange delay is on", ["delay.ms": "\(configuration.testExchangeDelayMillis)"])
        }
        if let readyFile {
            _ = FileManager.default.createFile(atPath: readyFile, contents: Data((server.listenURL + "\n").utf8))
        }
        print("browser-login-server: listening on \(server.listenURL)")
        fflush(nil)

        let done = DispatchSemaphore(value: 0)
        let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { _ in done.signal() }
        done.wait()
        Log.info("stopping")
        server.stop()
        signals.cancel()
        return 0
    }

    // MARK: Admin

    private static func admin(_ command: [String], databasePath: String) -> Int32 {
        do {
            guard FileManager.default.fileExists(atPath: databasePath) else {
                FileHandle.standardError.write(Data("browser-login-server: no database at \(databasePath)\n".utf8))
                return 1
            }
            let db = try Database(path: databasePath)
            try db.migrate(Schema.migrations)
            let now = Timestamp.now().millisecondsSince1970
            func time(_ ms: Int64?) -> String { ms.map { Timestamp(millisecondsSince1970: $0).rfc3339 } ?? "-" }
            switch command {
            case ["users", "list"]:
                print(["USER_ID", "EMAIL", "STATE", "CREATED", "LIVE_SESSIONS"].joined(separator: "\t"))
                for row in try db.query(
                    """
                    SELECT u.*, (SELECT COUNT(*) FROM sessions s WHERE s.user_id = u.id AND s.revoked_at IS NULL
                        AND s.expires_at > ?) AS live FROM users u ORDER BY u.created_at, u.email
                    """, now)
                {
                    print(
                        [
                            row.text("id"), row.text("email"), row.bool("disabled") ? "disabled" : "enabled",
                            time(row.int("created_at")), "\(row.int("live") ?? 0)",
                        ].joined(separator: "\t"))
                }
                return 0
            case let c where c.count == 3 && c[0] == "users":
                guard let email = EmailAddress(c[2]) else {
                    FileHandle.standardError.write(Data("browser-login-server: '\(c[2])' is not an email address\n".utf8))
                    return 1
                }
                let disable = c[1] == "disable"
                let found = try db.transaction { try Records.setDisabled(db, email: email.text, disabled: disable, now: now) }
                guard found else {
                    FileHandle.standardError.write(Data("browser-login-server: no user \(email.text)\n".utf8))
                    return 1
                }
                print("\(email.text): \(disable ? "disabled; their sessions are revoked" : "enabled")")
                return 0
            case ["attempts", "list"]:
                // Attempt ids are never stored; the reference is a prefix of their digest.
                print(["REF", "CLIENT", "STATE", "CREATED", "EXPIRES", "SESSION"].joined(separator: "\t"))
                for row in try db.query("SELECT * FROM attempts ORDER BY created_at") {
                    var state = row.text("state")
                    if (state == "pending" || state == "authorized") && now >= row.millis("expires_at") { state = "expired" }
                    print(
                        [
                            String(row.text("id_hash").prefix(10)), row.text("client_id"), state,
                            time(row.int("created_at")), time(row.int("expires_at")), row.string("session_id") ?? "-",
                        ].joined(separator: "\t"))
                }
                return 0
            default:
                return usageError("unknown command '\(command.joined(separator: " "))'")
            }
        } catch {
            FileHandle.standardError.write(Data("browser-login-server: \(error)\n".utf8))
            return 1
        }
    }
}
