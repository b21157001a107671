import BrokerRPC
import BrowserLoginClient
import Foundation

/// sysexits(3) exit codes, and curl's 22 for an HTTP error status.
enum Exit: Int32 {
    case ok = 0
    case failure = 1
    /// `request`: the API answered, with a status other than 2xx (as `curl -f`).
    case httpError = 22
    case usage = 64
    case dataError = 65
    case noInput = 66
    case unavailable = 69
    case software = 70
    case ioError = 74
    case tempFail = 75
    case noPermission = 77
    case config = 78
}

/// A failure the CLI reports on stderr with an exit code: `message` for
/// people, or with `--json` one object `{"code", "message", …data}`.
struct CLIError: Error {
    /// The broker's error code, or one of the CLI's own (`USAGE`, `NO_INPUT`, `HTTP_ERROR`, …).
    var code: String
    var message: String
    /// What people read, when it differs from `message` (the broker's code in front).
    var text: String?
    var exit: Exit
    /// More members of the JSON form (`attemptId`, `serverCode`, `status`, …).
    var data: [String: JSONValue] = [:]

    init(_ code: String, _ message: String, _ exit: Exit, data: [String: JSONValue] = [:]) {
        self.code = code
        self.message = message
        self.exit = exit
        self.data = data
    }

    /// A failed library call: the text says the broker's code where there is one, as it always has.
    /// A message that tells an API caller what to call is said in the CLI's
    /// words (`commandLineMessage`), naming `client` (the command's CLIENT);
    /// the code and data stay the broker's.
    init(_ error: BrowserLoginError, client: String? = nil) {
        var data: [String: JSONValue] = [:]
        if let v = error.data.attemptId { data["attemptId"] = .string(v) }
        if let v = error.data.serverCode { data["serverCode"] = .string(v) }
        if let v = error.data.providerError { data["providerError"] = .string(v) }
        if let v = error.data.retryAfterSeconds { data["retryAfterSeconds"] = .integer(Int64(v)) }
        let plain = error.isLocal || error.code == .invalidParams || error.code == .internalError
        var error = error
        if let words = commandLineMessage(error, client: client) { error.message = words }
        self.init(error.code.rawValue, error.message, exitCode(error), data: data)
        if !plain { text = error.description }
        if let advice = serverCodeAdvice(error.data.serverCode) { text = (text ?? message) + "\n  " + advice }
    }

    /// The JSON form: `code`, `message` and the data members.
    var json: JSONValue {
        var object = data
        object["code"] = .string(code)
        object["message"] = .string(message)
        return .object(object)
    }
}

/// The CLI's words for a broker error whose message is written for API
/// callers (it names `login.start`, `switchAccount=true`, `openBrowser=false`):
/// what happened, from the broker's message up to its advice, then the
/// command and flag to type. Nil when the broker's message does for people.
func commandLineMessage(_ error: BrowserLoginError, client: String?) -> String? {
    let happened = error.message.split(separator: ";", maxSplits: 1).first.map(String.init) ?? error.message
    let name = client ?? "CLIENT"
    switch error.code.brokerCode {
    case .alreadySignedIn?:
        return
            "\(happened); sign out first ('browser-login sign-out \(name)'), or sign in with another account with 'browser-login start \(name) --switch-account'"
    case .notSignedIn?:
        return "\(name) is not signed in; sign in with 'browser-login start \(name)'"
    case .browserFailed?:
        let attempt = error.data.attemptId ?? "ATTEMPT_ID"
        return
            "\(happened); open the sign-in link yourself ('browser-login resume \(attempt) --no-browser' prints it), or set Browser= in the client file"
    default:
        return nil
    }
}

/// Whether errors go to stderr as JSON: `--json` anywhere before `--`
/// (so that a mistake on the command line is JSON too).
let errorsAsJSON = CommandLine.arguments.dropFirst().prefix { $0 != "--" }.contains("--json")

/// The exit status of a failed call (sysexits(3), by the error's code).
func exitCode(_ error: BrowserLoginError) -> Exit {
    switch error.code {
    case .noSocket: return .config
    case .brokerNotRunning, .brokerUnreachable, .connectionLost: return .unavailable
    case .timedOut: return .tempFail
    case .protocolError, .internalError: return .software
    case .invalidParams: return .usage
    default: break
    }
    switch error.code.brokerCode {
    case .clientUnknown?, .attemptUnknown?: return .noInput
    case .callbackInvalid?, .callbackMismatch?, .issuerMismatch?, .idTokenInvalid?: return .dataError
    case .serverUnreachable?, .providerUnreachable?, .vaultLocked?, .exchangeUncertain?, .waitTimeout?, .busy?:
        return .tempFail
    case .vaultUnavailable?, .browserFailed?, .deviceFlowUnsupported?: return .unavailable
    case .clientForbidden?: return .noPermission
    default: return .failure
    }
}

/// A result as its API type (docs/rpc.md "Public views").
func decode<T: Decodable>(_ value: JSONValue, as type: T.Type = T.self) throws(CLIError) -> T {
    do { return try value.decode(type) } catch {
        throw CLIError("PROTOCOL_ERROR", "the broker's answer could not be read: \(error)", .software)
    }
}

func printJSON(_ value: JSONValue) {
    print(value.jsonText)
}

/// An error or warning on stderr: `browser-login: text`, or with `--json` the error's JSON object.
func writeError(_ error: CLIError) {
    let line = errorsAsJSON ? error.json.jsonText : "browser-login: " + (error.text ?? error.message)
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

func writeError(_ text: String) {
    writeError(CLIError("WARNING", text, .failure))
}
