import BrokerRPC
import BrowserLoginAPI
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
/// The raw result is what `--json` prints; `decode` gives its typed view.
func call(_ client: RPCClient, _ method: RPCMethod, _ params: (any Encodable)? = nil) throws -> JSONValue {
    do {
        return try client.call(method.rawValue, params: try params.map { try JSONValue(encoding: $0) })
    } catch let error as RPCError {
        throw CLIError(describe(error), exitCode(error))
    } catch let error as RPCClientError {
        throw CLIError("the broker connection failed: \(error)", .unavailable)
    }
}

/// A result as its API type (docs/rpc.md "Public views").
func decode<T: Decodable>(_ value: JSONValue, as type: T.Type = T.self) throws -> T {
    do { return try value.decode(type) } catch {
        throw CLIError("the broker's answer could not be read: \(error)", .software)
    }
}

func describe(_ error: RPCError) -> String {
    var text = error.message
    if let code = error.applicationCode { text = "\(code): \(text)" }
    if let server = error.data?["serverCode"]?.stringValue { text += " [server: \(server)]" }
    if let provider = error.data?["providerError"]?.stringValue { text += " [provider: \(provider)]" }
    if let attempt = error.data?["attemptId"]?.stringValue { text += " (attempt \(attempt))" }
    return text
}

func exitCode(_ error: RPCError) -> Exit {
    guard let code = error.applicationCode else { return error.code == .invalidParams ? .usage : .software }
    switch BrokerErrorCode(rawValue: code) {
    case .clientUnknown?, .attemptUnknown?: return .noInput
    case .callbackInvalid?, .callbackMismatch?, .issuerMismatch?, .idTokenInvalid?: return .dataError
    case .serverUnreachable?, .providerUnreachable?, .vaultLocked?, .exchangeUncertain?, .waitTimeout?, .busy?:
        return .tempFail
    case .vaultUnavailable?, .browserFailed?, .deviceFlowUnsupported?: return .unavailable
    case .clientForbidden?: return .noPermission
    default: return .failure
    }
}

func printJSON(_ value: JSONValue) {
    print(value.jsonText)
}

func writeError(_ text: String) {
    FileHandle.standardError.write(Data(("browser-login: " + text + "\n").utf8))
}
