import Broker
import Foundation

// Before any thread allocates: see IdleTrim.limitArenas.
IdleTrim.limitArenas()

switch DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) {
case .usage(let message):
    FileHandle.standardError.write(Data("browser-login-broker: \(message)\n".utf8))
    exit(64)
case .done:
    exit(0)
case .run(let options):
    exit(await BrokerDaemon.run(options, environment: ProcessInfo.processInfo.environment))
}
