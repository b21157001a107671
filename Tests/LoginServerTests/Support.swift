import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import LoginServer
import ScriptedBrowser
import Synchronization
import Testing

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let now = Mutex<Int64>(Timestamp.now().millisecondsSince1970)
    var clock: ServerClock { { [self] in now.withLock { $0 } } }
    func advance(_ milliseconds: Int64) { now.withLock { $0 += milliseconds } }
}

/// Every log line of every in-process server, to prove secrets never appear.
enum CapturedLogs {
    static let lines = Mutex<[String]>([])
    static let installed: Bool = {
        Log.configure(level: .debug) { line in lines.withLock { $0.append(line) } }
        return true
    }()
    static var all: String { lines.withLock { $0.joined(separator: "\n") } }
}

let confirmClient = "com.example.notes"
let confirmReturn = "com.example.notes:/callback"
let httpsClient = "web.example"
let httpsReturn = "https://app.example.com/auth/callback"
let autoCustomClient = "com.example.auto"
let autoCustomReturn = "com.example.auto:/done"
/// The configured test account base address: it signs in with an emailed code, like anyone.
let testBaseAddress = "dev@example.com"
/// A derived test address of `testBaseAddress`: it signs in with the fixed code `000000`.
let testBase = "dev+bltest@example.com"

func baseConfiguration(directory: String) -> ServerConfiguration {
    var c = ServerConfiguration()
    c.port = 0
    c.databasePath = directory + "/server.sqlite"
    c.outboxPath = directory + "/outbox"
    c.testAccounts = [testBaseAddress]
    c.clients = [
        ClientRegistration(
            clientId: confirmClient, appName: "Notes", returnUrls: [try! ReturnURL(confirmReturn)], policy: .confirm),
        ClientRegistration(
            clientId: httpsClient, appName: "Web App", returnUrls: [try! ReturnURL(httpsReturn)], policy: .automatic),
        ClientRegistration(
            clientId: autoCustomClient, appName: "Auto", returnUrls: [try! ReturnURL(autoCustomReturn)],
            policy: .automatic),
    ]
    return c
}

/// `BL_TEST_STORE=postgres`: the server tests run on a database of their own
/// on the test process's PostgreSQL cluster instead of an SQLite file.
func usePostgres(_ c: inout ServerConfiguration, directory: String) throws {
    c.databasePath = try PostgresCluster.shared().createDatabase()
    c.secretKeyPath = directory + "/server.key"
}

/// An in-process server on a free loopback port, with its own database and a manual clock.
final class TestServer: Sendable {
    let directory: TemporaryDirectory
    let time = ManualClock()
    let server: LoginServer

    init(_ adjust: (inout ServerConfiguration) -> Void = { _ in }) throws {
        _ = CapturedLogs.installed
        directory = try TemporaryDirectory("login-server-test")
        var c = baseConfiguration(directory: directory.path)
        if PostgresCluster.selectedForTests { try usePostgres(&c, directory: directory.path) }
        adjust(&c)
        server = try LoginServer(configuration: c, clock: time.clock)
    }

    deinit { server.stop() }

    /// A server whose configuration names its own port (its origin, a
    /// provider's redirect URI): `adjust` gets the port, taken by
    /// `freeLoopbackPort()`; a port another process took before the server
    /// bound it is replaced by another (`onAFreeLoopbackPort`).
    static func onAFreePort(_ adjust: (inout ServerConfiguration, Int) -> Void) throws -> TestServer {
        try onAFreeLoopbackPort { port in
            try TestServer { c in
                c.port = port
                adjust(&c, port)
            }
        }
    }

    var origin: String { server.origin }
    var base: String { server.origin + server.configuration.basePath }
    var outbox: String { server.configuration.resolvedOutboxPath }
    /// The self-signed certificate to trust when the server speaks TLS.
    var caFile: String? { server.configuration.tlsCertificatePath }

    func browser() throws -> ScriptedBrowser { try ScriptedBrowser(serverOrigin: origin) }

    /// A native host's request: JSON, no cookies.
    func native(_ path: String, _ json: String, headers: [(String, String)] = []) throws -> HTTPAnswer {
        try RawHTTP.postJSON(base + "/native" + path, json, headers: headers, caFile: caFile)
    }

    func get(_ url: String, headers: [(String, String)] = []) throws -> HTTPAnswer {
        try RawHTTP.send("GET", url, headers: headers, caFile: caFile)
    }
}

/// One native host attempt: its proofs and the create answer.
struct NativeAttempt {
    let verifier: ProofSecret
    let recovery: ProofSecret
    let created: CreateAttemptResponse
    var id: String { created.attemptId }
    var recoveryJSON: String { #"{"recoveryKey":"\#(recovery.value)"}"# }

    static func create(
        _ server: TestServer, client: String = confirmClient, returnUrl: String = confirmReturn, prompt: String? = nil,
        loginHint: String? = nil
    ) throws -> NativeAttempt {
        let verifier = try ProofSecret.generate()
        let recovery = try ProofSecret.generate()
        let body = try JSONEncoder().encode(
            CreateAttemptRequest(
                clientId: client, returnUrl: returnUrl, codeChallenge: verifier.challenge,
                recoveryChallenge: recovery.challenge, prompt: prompt, loginHint: loginHint))
        let answer = try server.native("/attempts", String(decoding: body, as: UTF8.self))
        #expect(answer.status == 201, "\(answer.text)")
        return NativeAttempt(verifier: verifier, recovery: recovery, created: try answer.decode(CreateAttemptResponse.self))
    }

    func exchangeJSON(code: String, verifier: String? = nil) -> String {
        #"{"code":"\#(code)","codeVerifier":"\#(verifier ?? self.verifier.value)"}"#
    }

    func exchange(_ server: TestServer, code: String, verifier: String? = nil) throws -> HTTPAnswer {
        try server.native("/attempts/\(id)/exchange", exchangeJSON(code: code, verifier: verifier))
    }

    func status(_ server: TestServer) throws -> HTTPAnswer { try server.native("/attempts/\(id)/status", recoveryJSON) }
}

/// The code of a callback URL (and checks its attempt and issuer).
func code(of callbackURL: String, attempt: NativeAttempt, issuer: String) throws -> String {
    let callback = try Callback(parsing: callbackURL)
    #expect(callback.attempt == attempt.id)
    #expect(callback.issuer == issuer)
    guard case .code(let code) = callback.outcome else {
        Issue.record("not a code callback")
        return ""
    }
    return code
}

/// Runs the whole login: create, the browser signs in and authorizes, exchange.
func login(_ server: TestServer, email: String = testBase, browser: ScriptedBrowser? = nil) throws -> (
    NativeAttempt, ExchangeResponse
) {
    let attempt = try NativeAttempt.create(server)
    let b = try browser ?? server.browser()
    let callback = try b.signInAndAuthorize(authorizeURL: attempt.created.authorizeUrl, email: email, code: "000000")
    let answer = try attempt.exchange(server, code: try code(of: callback, attempt: attempt, issuer: server.origin))
    #expect(answer.status == 200, "\(answer.text)")
    return (attempt, try answer.decode(ExchangeResponse.self))
}

func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer " + token)] }

/// Expects an error answer with this code (and its status).
func expectError(
    _ answer: HTTPAnswer, _ code: ServerErrorCode, sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(answer.status == code.httpStatus, "\(answer.text)", sourceLocation: sourceLocation)
    #expect(answer.errorCode == code.rawValue, "\(answer.text)", sourceLocation: sourceLocation)
    #expect(answer.header("cache-control") == "no-store", sourceLocation: sourceLocation)
}

/// The built `browser-login-server`.
enum ServerBinary {
    static var path: String { binDirectory + "/browser-login-server" }

    /// Runs the binary to completion: exit status, stdout, stderr. A run that
    /// should end but starts serving instead is killed after 20 s.
    static func run(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
        try runProgram(path, arguments, timeout: 20)
    }

    /// For each case, a configuration file of one client and the case's
    /// members (in `directory`) stops `serve` with exit status 78 and an
    /// error line that contains `expected` (`field: rule…`).
    static func expectRefusals(
        _ cases: [([String: Any], String)], in directory: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        for (extra, expected) in cases {
            var config: [String: Any] = [
                "database": "server.sqlite",
                "clients": [["clientId": confirmClient, "appName": "Notes", "returnUrls": [confirmReturn], "policy": "confirm"]],
            ]
            for (key, value) in extra { config[key] = value }
            let file = directory + "/server.json"
            try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
            let run = try run(["serve", "--config", file, "--port", "0"])
            #expect(run.status == 78, "\(expected): \(run.err)", sourceLocation: sourceLocation)
            #expect(
                run.err.contains("invalid configuration: \(expected)"), "\(expected): \(run.err)", sourceLocation: sourceLocation)
        }
    }
}

/// A `browser-login-server` process; reads the ready line to find its URL.
final class ServerProcess {
    let process: SpawnedProcess
    let listenURL: String
    /// The read end of its standard output (kept open while it runs, as a write to a closed pipe would kill it).
    private let output: Int32

    init(_ arguments: [String]) throws {
        // Standard output to a pipe (the ready line), standard error to /dev/null.
        let pipe = try closeOnExecPipe()
        do {
            defer { close(pipe.write) }
            process = try SpawnedProcess(
                [ServerBinary.path] + arguments, environment: ProcessInfo.processInfo.environment, log: "/dev/null",
                dup2: [(pipe.write, 1)])
        } catch {
            close(pipe.read)
            throw error
        }
        output = pipe.read
        let text = readLine(pipe.read)
        let prefix = "browser-login-server: listening on "
        guard text.hasPrefix(prefix) else {
            process.stop()
            close(pipe.read)
            throw ScriptedBrowserError.transport("no ready line: \(text)")
        }
        listenURL = String(text.dropFirst(prefix.count))
    }

    /// SIGTERM, then waits; answers the exit status.
    func stop() -> Int32 {
        exitStatus(process.stop())
    }

    deinit {
        _ = stop()
        close(output)
    }
}
