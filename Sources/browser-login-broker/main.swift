import Broker
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

// Before any thread allocates: see IdleTrim.limitArenas.
IdleTrim.limitArenas()

do {
    guard let options = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) else { exit(0) }
    exit(await BrokerDaemon.run(options, environment: ProcessEnvironment.current))
} catch {
    StandardError.write("browser-login-broker: \(error.message)\n")
    exit(64)
}
