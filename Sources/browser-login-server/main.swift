import Foundation
import LoginServer

// The reference login server of docs/protocol.md, and its admin subcommands.
exit(ServerCommand.main(CommandLine.arguments))
