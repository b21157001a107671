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

let options: DaemonOptions
do {
    guard let parsed = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) else { exit(0) }
    options = parsed
} catch {
    StandardError.write("browser-login-broker: \(error.message)\n")
    exit(64)
}

// The daemon's tasks run on executors of its own (SystemSupport/Executors.swift), never on
// libdispatch's global queues, whose workqueue monitor would wake the process every second at rest.
// No `await` in this file: an async main would have started on the default executors.
Executors.runMain {
    exit(await BrokerDaemon.run(options, environment: ProcessEnvironment.current))
}
