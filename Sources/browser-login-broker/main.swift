import Broker
import Foundation

switch DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) {
case .failure(let message):
    FileHandle.standardError.write(Data("browser-login-broker: \(message)\n".utf8))
    exit(64)
case .success(nil):
    exit(0)
case .success(let options?):
    exit(await BrokerDaemon.run(options, environment: ProcessInfo.processInfo.environment))
}
