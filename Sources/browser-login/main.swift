import BrokerRPC
import CommandLineKit
import Foundation

let version = "0.1.0"

let program = Command(
    "browser-login",
    options: [
        .value(
            "socket", "PATH",
            "the broker's socket (default $XDG_RUNTIME_DIR/browser-login/broker.sock, or $BROWSER_LOGIN_SOCKET)"),
        .flag("version", "the version"),
    ],
    description: "Commands:\n" + Command.table(subcommands.map { ($0.name, $0.command.summary) }),
    epilogue: """
        Exit status follows sysexits(3): 0 ok, 64 usage, 65 bad callback, issuer or
        ID token, 66 unknown client or attempt, 69 broker, keyring, browser or
        device flow unavailable, 75 try again later, 77 not allowed, 1 refused.
        """,
    synopsis: "browser-login [--socket PATH] COMMAND [ARGS]\n       browser-login COMMAND --help",
    title: "browser-login — talk to the browser-login broker", optionsTitle: "Options:", stopsAtArgument: true)

func main() -> Int32 {
    do {
        guard case .run(let global) = try program.parse(Array(CommandLine.arguments.dropFirst())) else {
            print(program.help)
            return Exit.ok.rawValue
        }
        if global.has("version") {
            print("browser-login \(version)")
            return Exit.ok.rawValue
        }
        guard let name = global.rest.first else {
            FileHandle.standardError.write(Data((program.help + "\n").utf8))
            return Exit.usage.rawValue
        }
        if name == "help" {
            print(program.help)
            return Exit.ok.rawValue
        }
        guard let subcommand = subcommands.first(where: { $0.name == name }) else {
            throw CLIError("unknown command '\(name)'; run 'browser-login --help' for the list", .usage)
        }
        guard case .run(let args) = try subcommand.command.parse(Array(global.rest.dropFirst())) else {
            print(subcommand.command.help)
            return Exit.ok.rawValue
        }
        return try subcommand.run(args, RPCClientFactory(socketOption: global["socket"])).rawValue
    } catch let error as UsageError {
        writeError(error.message)
        return UsageError.exitStatus
    } catch let error as CLIError {
        writeError(error.message)
        return error.exit.rawValue
    } catch {
        writeError("\(error)")
        return Exit.software.rawValue
    }
}

exit(main())
