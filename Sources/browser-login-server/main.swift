import Foundation
import LoginServer

// The reference login server of PROTOCOL.md, and its admin subcommands.
exit(ServerCommand.main(CommandLine.arguments))
