import BrokerRPC
import Foundation
import SystemSupport

/// sysexits(3) exit codes.
enum Exit: Int32 {
    case ok = 0
    case failure = 1
    case usage = 64
    case dataError = 65
    case noInput = 66
    case unavailable = 69
    case software = 70
    case tempFail = 75
    case noPermission = 77
    case config = 78
}

/// A failure the CLI reports on stderr with an exit code.
struct CLIError: Error {
    var message: String
    var exit: Exit
    init(_ message: String, _ exit: Exit) {
        self.message = message
        self.exit = exit
    }
}

/// Parsed arguments of one command: flags, options with values, positionals.
struct Arguments: Sendable {
    var flags: Set<String> = []
    var options: [String: String] = [:]
    /// Every value of each option, in order (for repeatable options).
    var repeated: [String: [String]] = [:]
    var positionals: [String] = []

    /// Parses `args` allowing these flags (no value) and options (one value).
    init(_ args: [String], flags allowedFlags: Set<String>, options allowedOptions: Set<String>) throws {
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let arg = args[i]
            i += 1
            if onlyPositionals || !arg.hasPrefix("--") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" {
                onlyPositionals = true
                continue
            }
            var name = String(arg.dropFirst(2))
            var inlineValue: String?
            if let eq = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if allowedFlags.contains(name) && inlineValue == nil {
                flags.insert(name)
            } else if allowedOptions.contains(name) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard i < args.count else { throw CLIError("--\(name) needs a value", .usage) }
                    value = args[i]
                    i += 1
                }
                options[name] = value
                repeated[name, default: []].append(value)
            } else {
                throw CLIError("unknown option --\(name); see --help", .usage)
            }
        }
    }
}

/// Where the broker's socket is: `--socket`, else `$BROWSER_LOGIN_SOCKET`,
/// else `$XDG_RUNTIME_DIR/browser-login/broker.sock`.
func socketPath(_ option: String?) throws -> String {
    guard let path = UserPaths(environment: ProcessInfo.processInfo.environment).brokerSocket(option: option) else {
        throw CLIError(
            "XDG_RUNTIME_DIR is not set, so the broker's socket cannot be found; pass --socket PATH", .config)
    }
    return path
}

/// Connects to the broker, turning transport errors into clear messages.
func connect(_ path: String, timeout: Duration = .seconds(130)) throws -> RPCClient {
    do {
        return try RPCClient(socketPath: path, timeout: timeout)
    } catch {
        if error.meansNotRunning {
            throw CLIError(
                "the broker is not running (no answer at \(path)); start it with 'systemctl --user start browser-login-broker.socket' or run 'browser-login-broker'",
                .unavailable)
        }
        throw CLIError("cannot reach the broker at \(path): \(error)", .unavailable)
    }
}

/// Calls a method, mapping an RPC error to a CLI error with an exit code.
func call(_ client: RPCClient, _ method: String, _ params: JSONValue? = nil) throws -> JSONValue {
    do {
        return try client.call(method, params: params)
    } catch let error as RPCError {
        throw CLIError(describe(error), exitCode(error))
    } catch let error as RPCClientError {
        throw CLIError("the broker connection failed: \(error)", .unavailable)
    }
}

func describe(_ error: RPCError) -> String {
    var text = error.message
    if let code = error.applicationCode { text = "\(code): \(text)" }
    if let server = error.data?["serverCode"]?.stringValue { text += " [server: \(server)]" }
    if let attempt = error.data?["attemptId"]?.stringValue { text += " (attempt \(attempt))" }
    return text
}

func exitCode(_ error: RPCError) -> Exit {
    switch error.applicationCode {
    case "CLIENT_UNKNOWN", "ATTEMPT_UNKNOWN": return .noInput
    case "CALLBACK_INVALID", "CALLBACK_MISMATCH", "ISSUER_MISMATCH": return .dataError
    case "SERVER_UNREACHABLE", "VAULT_LOCKED", "EXCHANGE_UNCERTAIN", "WAIT_TIMEOUT", "BUSY": return .tempFail
    case "VAULT_UNAVAILABLE", "BROWSER_FAILED": return .unavailable
    case "CLIENT_FORBIDDEN": return .noPermission
    case nil:
        return error.code == .invalidParams ? .usage : .software
    default: return .failure
    }
}

func printJSON(_ value: JSONValue) {
    print(value.jsonText)
}

func writeError(_ text: String) {
    FileHandle.standardError.write(Data(("browser-login: " + text + "\n").utf8))
}
