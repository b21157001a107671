import BrokerRPC
import Foundation

let version = "0.1.0"

func usage() -> String {
    var text = """
        browser-login — talk to the browser-login broker

        Usage: browser-login [--socket PATH] COMMAND [ARGS]
               browser-login COMMAND --help

        Commands:

        """
    for c in subcommands { text += "  " + c.name.padding(toLength: 12, withPad: " ", startingAt: 0) + c.summary + "\n" }
    text += """

        Options:
          --socket PATH  the broker's socket (default $XDG_RUNTIME_DIR/browser-login/broker.sock,
                         or $BROWSER_LOGIN_SOCKET)
          --help         this help;  --version  the version

        Exit status follows sysexits(3): 0 ok, 64 usage, 65 bad callback, 66 unknown
        client or attempt, 69 broker or keyring unavailable, 75 try again later,
        77 not allowed, 1 refused.
        """
    return text
}

func main() -> Int32 {
    var args = Array(CommandLine.arguments.dropFirst())
    var socketOption: String?
    while let first = args.first, first.hasPrefix("--") {
        if first == "--help" || first == "-h" {
            print(usage())
            return Exit.ok.rawValue
        }
        if first == "--version" {
            print("browser-login \(version)")
            return Exit.ok.rawValue
        }
        if first == "--socket", args.count >= 2 {
            socketOption = args[1]
            args.removeFirst(2)
        } else if first.hasPrefix("--socket=") {
            socketOption = String(first.dropFirst("--socket=".count))
            args.removeFirst()
        } else {
            writeError("unknown option \(first); see --help")
            return Exit.usage.rawValue
        }
    }
    guard let name = args.first else {
        FileHandle.standardError.write(Data((usage() + "\n").utf8))
        return Exit.usage.rawValue
    }
    if name == "help" {
        print(usage())
        return Exit.ok.rawValue
    }
    guard let command = subcommands.first(where: { $0.name == name }) else {
        writeError("unknown command '\(name)'; run 'browser-login --help' for the list")
        return Exit.usage.rawValue
    }
    let rest = Array(args.dropFirst())
    if rest.contains("--help") || rest.contains("-h") {
        print("Usage: \(command.usage)\n\n\(command.help)")
        return Exit.ok.rawValue
    }
    do {
        let parsed = try Arguments(rest, flags: command.flags, options: command.options)
        return try command.run(parsed, RPCClientFactory(socketOption: socketOption)).rawValue
    } catch let error as CLIError {
        writeError(error.message)
        return error.exit.rawValue
    } catch {
        writeError("\(error)")
        return Exit.software.rawValue
    }
}

exit(main())
