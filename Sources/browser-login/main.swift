import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import Foundation

let version = "0.1.0"

let program = Command(
    "browser-login",
    options: [
        .value(
            "socket", "PATH",
            "the broker's socket (default $XDG_RUNTIME_DIR/browser-login/broker.sock, or $BROWSER_LOGIN_SOCKET)"),
        .flag("json", "print answers and errors as JSON (as each command's --json)"),
        .flag("version", "the version"),
    ],
    description: "Commands:\n" + Command.table(subcommands.map { ($0.name, $0.command.summary) }),
    epilogue: """
        Exit status follows sysexits(3): 0 ok, 1 refused (or not signed in, for
        session), 22 an HTTP status other than 2xx (request), 64 usage,
        65 bad callback, issuer or ID token, 66 unknown client or attempt,
        69 broker, keyring, browser or device flow unavailable, 70 internal
        error, 75 try again later (WAIT_TIMEOUT too), 77 not allowed,
        78 no socket path. With --json, an error is one JSON object on stderr:
        {"code": "...", "message": "...", ...}.
        """,
    synopsis: "browser-login [--socket PATH] COMMAND [ARGS]\n       browser-login COMMAND --help",
    title: "browser-login — talk to the browser-login broker", optionsTitle: "Options:", stopsAtArgument: true)

/// `help --troff usage|options [COMMAND]`: the parts of browser-login(1)
/// made from the declarations `--help` shows (scripts/man puts them in the
/// page; ManualPageTests checks that the page has them as they are now).
func manualPart(_ words: [String]) throws(CLIError) -> String {
    let usage = CLIError("USAGE", "help takes a command, or --troff usage|options [COMMAND]", .usage)
    if words.count == 1 && words[0] != "--troff" {
        throw CLIError("USAGE", "unknown command '\(words[0])'; run 'browser-login --help' for the list", .usage)
    }
    guard words.count <= 3, words.first == "--troff", words.count >= 2 else { throw usage }
    var command = program
    if words.count == 3 {
        guard let found = subcommands.first(where: { $0.name == words[2] }) else {
            throw CLIError("USAGE", "unknown command '\(words[2])'; run 'browser-login --help' for the list", .usage)
        }
        command = found.command
    }
    switch words[1] {
    case "usage": return command.manualUsage(dropping: "browser-login ")
    case "options": return command.manualOptions(nested: words.count == 3)
    default: throw usage
    }
}

func main() async -> Int32 {
    // The command's CLIENT, which error messages name in the commands they suggest.
    var client: String?
    do {
        guard case .run(let global) = try program.parse(Array(CommandLine.arguments.dropFirst())) else {
            print(program.help)
            return Exit.ok.rawValue
        }
        if global.has("version") {
            if global.has("json") { printJSON(["version": .string(version)]) } else { print("browser-login \(version)") }
            return Exit.ok.rawValue
        }
        guard let name = global.rest.first else {
            if errorsAsJSON {
                writeError(CLIError("USAGE", "no command given; run 'browser-login --help' for the list", .usage))
            } else {
                FileHandle.standardError.write(Data((program.help + "\n").utf8))
            }
            return Exit.usage.rawValue
        }
        if name == "help" {
            guard global.rest.count > 1 else {
                print(program.help)
                return Exit.ok.rawValue
            }
            let words = Array(global.rest.dropFirst())
            // `help COMMAND` is `COMMAND --help`.
            if words.count == 1, let named = subcommands.first(where: { $0.name == words[0] }) {
                print(named.command.help)
            } else {
                print(try manualPart(words))
            }
            return Exit.ok.rawValue
        }
        guard let subcommand = subcommands.first(where: { $0.name == name }) else {
            throw CLIError("USAGE", "unknown command '\(name)'; run 'browser-login --help' for the list", .usage)
        }
        guard case .run(var args) = try subcommand.command.parse(Array(global.rest.dropFirst())) else {
            print(subcommand.command.help)
            return Exit.ok.rawValue
        }
        if global.has("json") { args.flags.insert("json") }
        if subcommand.command.arguments.first == "CLIENT" { client = args.positionals.first }
        let broker = BrowserLoginClient(socketPath: global["socket"])
        return try await subcommand.run(args, broker).rawValue
    } catch let error as UsageError {
        writeError(CLIError("USAGE", error.message, .usage))
        return UsageError.exitStatus
    } catch let error as CLIError {
        writeError(error)
        return error.exit.rawValue
    } catch let error as BrowserLoginError {
        let failure = CLIError(error, client: client)
        writeError(failure)
        return failure.exit.rawValue
    } catch {
        writeError(CLIError("INTERNAL_ERROR", "\(error)", .software))
        return Exit.software.rawValue
    }
}

exit(await main())
