import Broker
import CommandLineKit
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

// First of all (it may execute the broker again): see IdleTrim.reexecuteWithGLibSlicesOff.
IdleTrim.reexecuteWithGLibSlicesOff()
// Before any thread allocates: see IdleTrim.limitArenas and mapLargeBlocks.
IdleTrim.limitArenas()
IdleTrim.mapLargeBlocks()

// `help --troff options`: the option list of browser-login-broker(8), from the
// declarations --help is made of (scripts/man puts it in the page).
if Array(CommandLine.arguments.dropFirst()) == ["help", "--troff", "options"] {
    print(DaemonOptions.command.manualOptions())
    exit(0)
}

do {
    guard let options = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) else { exit(0) }
    exit(await BrokerDaemon.run(options, environment: ProcessEnvironment.current))
} catch {
    StandardError.write("browser-login-broker: \(error.message)\n")
    exit(64)
}
