import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The real `browser-login-server` binary, started with a configuration
/// file in its own temporary directory; its standard output and error (the
/// log) go to `server.log` there, for the tests that grep it for secrets.
final class BinaryServer {
    let directory: TemporaryDirectory
    let process: SpawnedProcess
    let port: Int
    var origin: String { "http://127.0.0.1:\(port)" }
    var base: String { origin + "/browser-login" }
    var outbox: String { directory.path + "/outbox" }
    var logPath: String { directory.path + "/server.log" }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// `extra`: members added to the configuration file (e.g. `emailRedirectUris`, `smtp`);
    /// `origin` in a string value stands for the server's own origin.
    init(
        _ extra: [String: Any] = [:], environment: [String: String] = [:], files: [String: String] = [:],
        directory: TemporaryDirectory? = nil
    ) throws {
        let directory = try directory ?? TemporaryDirectory("mail-server-test")
        self.directory = directory
        for (name, text) in files {
            try Data(text.utf8).write(to: URL(fileURLWithPath: directory.path + "/" + name))
        }
        (port, process) = try onAFreeLoopbackPort { port in
            let origin = "http://127.0.0.1:\(port)"
            func substitute(_ value: Any) -> Any {
                if let text = value as? String { return text.replacingOccurrences(of: "{origin}", with: origin) }
                if let list = value as? [Any] { return list.map(substitute) }
                if let object = value as? [String: Any] { return object.mapValues(substitute) }
                return value
            }
            var config: [String: Any] = [
                "listen": "127.0.0.1", "port": port, "database": "server.sqlite", "outbox": "outbox",
                "testAccounts": [testBaseAddress],
                "clients": [
                    ["clientId": confirmClient, "appName": "Notes", "returnUrls": [confirmReturn], "policy": "confirm"],
                    ["clientId": httpsClient, "appName": "Web App", "returnUrls": [httpsReturn], "policy": "automatic"],
                ],
            ]
            for (key, value) in extra { config[key] = substitute(value) }
            let data = try JSONSerialization.data(withJSONObject: config, options: [.sortedKeys])
            try data.write(to: URL(fileURLWithPath: directory.path + "/server.json"))
            let ready = directory.path + "/ready"
            let process = try SpawnedProcess(
                [ServerBinary.path, "serve", "--config", directory.path + "/server.json", "--ready-file", ready],
                environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                log: directory.path + "/server.log", name: "browser-login-server")
            do {
                try waitUntil(30, "the server to be ready") {
                    if process.hasExited { throw HarnessError("the server exited:\n\(process.output)", fatal: true) }
                    return FileManager.default.fileExists(atPath: ready)
                }
            } catch {
                _ = process.stop()
                throw error
            }
            return (port, process)
        }
    }

    deinit { _ = process.stop() }

    func browser() throws -> ScriptedBrowser { try ScriptedBrowser(serverOrigin: origin) }

    /// A native host's new attempt (`POST native/attempts`).
    func attempt(client: String = confirmClient, returnUrl: String = confirmReturn) throws -> NativeAttempt {
        let verifier = try ProofSecret.generate()
        let recovery = try ProofSecret.generate()
        let body = try JSONEncoder().encode(
            CreateAttemptRequest(
                clientId: client, returnUrl: returnUrl, codeChallenge: verifier.challenge,
                recoveryChallenge: recovery.challenge))
        let answer = try RawHTTP.postJSON(base + "/native/attempts", String(decoding: body, as: UTF8.self))
        try #require(answer.status == 201, "\(answer.text)")
        return NativeAttempt(verifier: verifier, recovery: recovery, created: try answer.decode(CreateAttemptResponse.self))
    }

    /// `POST native/attempts/{id}/exchange` with the callback's code.
    func exchange(_ attempt: NativeAttempt, callback: String) throws -> ExchangeResponse {
        let code = try LoginServerTests.code(of: callback, attempt: attempt, issuer: origin)
        let answer = try RawHTTP.postJSON(
            base + "/native/attempts/\(attempt.id)/exchange", attempt.exchangeJSON(code: code))
        try #require(answer.status == 200, "\(answer.text)")
        return try answer.decode(ExchangeResponse.self)
    }

    /// The messages the outbox holds for `email`.
    func mail(to email: String) -> [MailMessage] { OutboxMailSender.messages(in: outbox, to: email) }

    /// Asserts that none of `secrets` appears in the server's log (and that there is a log).
    func expectLogHasNone(of secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let log = self.log
        #expect(log.contains("request"), "the server logged nothing", sourceLocation: sourceLocation)
        for secret in secrets where !secret.isEmpty {
            #expect(!log.contains(secret), "a secret reached the server log", sourceLocation: sourceLocation)
        }
    }
}

extension ScriptedBrowser {
    /// `POST browser/signin/start` with an optional redirect target: the answer as it is.
    func start(_ email: String, redirectUri: String? = nil) throws -> HTTPAnswer {
        var body: [String: String] = ["email": email]
        if let redirectUri { body["redirectUri"] = redirectUri }
        return try post("/browser/signin/start", body)
    }

    /// `POST browser/signin/link` with the token of `link` (and the attempt the page was opened for).
    func openLink(_ link: String, attemptId: String?) throws -> HTTPAnswer {
        var body = ["token": EmailLinkParts(link)?.token ?? ""]
        if let attemptId { body["attemptId"] = attemptId }
        return try post("/browser/signin/link", body)
    }

    func verify(_ email: String, code: String) throws -> HTTPAnswer {
        try post("/browser/signin/verify", ["email": email, "code": code])
    }

    func post(_ path: String, _ json: [String: String]) throws -> HTTPAnswer {
        try request(
            "POST", serverOrigin + basePath + path, headers: [("Content-Type", "application/json")],
            body: Array(try JSONSerialization.data(withJSONObject: json)))
    }
}

/// A sign-in link: the target and the token of its `#signin_token=` fragment.
struct EmailLinkParts {
    var target: String
    var token: String
    var selector: String { String(token.split(separator: ".").first ?? "") }
    var verifier: String { String(token.split(separator: ".").last ?? "") }

    init?(_ link: String) {
        guard let hash = link.range(of: "#signin_token=") else { return nil }
        target = String(link[..<hash.lowerBound])
        token = String(link[hash.upperBound...])
    }
}

/// Expects an error answer with this code (and its status), no cache.
func expectRefusal(_ answer: HTTPAnswer, _ code: ServerErrorCode, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(answer.status == code.httpStatus, "\(answer.text)", sourceLocation: sourceLocation)
    #expect(answer.errorCode == code.rawValue, "\(answer.text)", sourceLocation: sourceLocation)
}
