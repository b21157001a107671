import Broker
import Foundation

// Before any thread allocates: see IdleTrim.limitArenas.
IdleTrim.limitArenas()

do {
    guard let options = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) else { exit(0) }
    exit(await BrokerDaemon.run(options, environment: ProcessInfo.processInfo.environment))
} catch {
    FileHandle.standardError.write(Data("browser-login-broker: \(error.message)\n".utf8))
    exit(64)
}
