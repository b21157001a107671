import BrokerRPC
import CurlSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The test provider: django-oauth-toolkit, a standard OAuth 2.0 / OpenID
/// Connect server this project did not write, run by `scripts/provider` from
/// its pinned virtual environment (Tests/Provider/README.md). Seeded with the
/// users `alice` and `bob` (password NAME-password) and the public clients
/// `chat-desktop` (authorization code + PKCE; redirects
/// `http://127.0.0.1/callback`, `http://[::1]/callback` on any port, and
/// `com.example.chat:/callback`) and `chat-device` (device authorization grant).
///
/// One provider belongs to one test: its database, key and log are in the
/// test's directory, its port is its own, and `stop()` (or the last
/// reference going away) ends it.
public final class TestProvider: Sendable {
    /// The issuer, exactly as discovery, the ID token and the authorization
    /// response's `iss` write it: `http://127.0.0.1:PORT/o`.
    public let issuer: String
    public let port: Int
    /// `http://127.0.0.1:PORT` (the protected resource is `baseURL + "/api/me"`).
    public let baseURL: String
    /// The provider's database, RSA key and `provider.log`.
    public let directory: String
    private let process: SpawnedProcess

    /// The provider's virtual environment (`BL_PROVIDER_VENV`, as `scripts/provider` reads it).
    public static var virtualEnvironment: String {
        let env = ProcessInfo.processInfo.environment
        if let venv = env["BL_PROVIDER_VENV"], !venv.isEmpty { return venv }
        let home = env["HOME"] ?? getpwuid(getuid()).map { String(cString: $0.pointee.pw_dir) } ?? "/"
        return home + "/.cache/browser-login/provider-venv"
    }

    /// `scripts/provider install` has run (its interpreter and its record of the installed versions are there).
    public static var isInstalled: Bool {
        FileManager.default.isExecutableFile(atPath: virtualEnvironment + "/bin/python")
            && FileManager.default.fileExists(atPath: virtualEnvironment + "/.browser-login-requirements")
    }

    /// `BL_REQUIRE_PROVIDER` is set (CI): tests that need the provider never skip.
    public static var isRequired: Bool { !(ProcessInfo.processInfo.environment["BL_REQUIRE_PROVIDER"] ?? "").isEmpty }

    /// Whether tests that need the provider run: it is installed, or it is
    /// required (and a missing installation then fails them).
    public static var shouldRun: Bool { isInstalled || isRequired }

    private static var script: String { repositoryRoot + "/scripts/provider" }

    private init(process: SpawnedProcess, issuer: String, directory: String) throws {
        self.process = process
        self.issuer = issuer
        self.directory = directory
        guard issuer.hasPrefix("http://127.0.0.1:"), issuer.hasSuffix("/o"),
            let port = Int(issuer.dropFirst("http://127.0.0.1:".count).dropLast(2))
        else { throw HarnessError("the provider's ready line names an unexpected issuer: \(issuer)") }
        self.port = port
        baseURL = "http://127.0.0.1:\(port)"
    }

    /// Starts the provider with its files in `directory` (made if missing) on
    /// `port` (0: a free port, chosen by the provider binding port 0), and
    /// waits until it accepts connections (its `ready ISSUER` line). Fails
    /// with the provider's output when it exits or is not ready in 60 s.
    /// `accessTokenTTL`: the access token lifetime in seconds.
    public static func start(in directory: String, accessTokenTTL: Int = 300, port: Int = 0) throws -> TestProvider {
        guard isInstalled else {
            throw HarnessError(
                "the test provider is not installed (run scripts/provider install; virtual environment \(virtualEnvironment))")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let log = directory + "/provider.log"
        // A restart appends to the log: only what this start writes counts.
        let offset = (try? FileManager.default.attributesOfItem(atPath: log)[.size] as? Int) ?? 0
        let process = try SpawnedProcess(
            [script, "serve", "--dir", directory, "--port", "\(port)", "--access-ttl", "\(accessTokenTTL)"],
            environment: ProcessInfo.processInfo.environment, log: log, name: "test-provider")
        var issuer: String?
        do {
            try waitUntil(60, "the test provider to be ready", interval: 0.05) {
                let output = String(decoding: process.output.utf8.dropFirst(offset), as: UTF8.self)
                if let line = output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }) {
                    issuer = String(line.dropFirst("ready ".count))
                    return true
                }
                if process.hasExited {
                    throw HarnessError("the test provider exited:\n\(process.output)", fatal: true)
                }
                return false
            }
        } catch {
            process.stop()
            if let error = error as? HarnessError, error.fatal { throw error }
            throw HarnessError("\(error)\nthe test provider's output:\n\(process.output)")
        }
        do {
            return try TestProvider(process: process, issuer: issuer ?? "", directory: directory)
        } catch {
            process.stop()
            throw error
        }
    }

    /// SIGTERM, then waits for it to exit (SIGKILL after 10 s) and reaps it. Idempotent.
    public func stop() { process.stop() }

    deinit { process.stop() }

    /// The provider's process id (the Python interpreter: `scripts/provider serve` execs it).
    public var pid: Int32 { process.pid }

    /// Whether the provider is still running.
    public var isRunning: Bool { !process.hasExited }

    /// The provider's output so far (Django's warnings and errors).
    public var output: String { process.output }

    // MARK: The scripted browser

    /// Plays `user` on the provider's real pages for an authorize URL (sign-in
    /// form, then consent: approved, or denied with `deny`) and answers the
    /// Location of the redirect to the app. With `deliver`, an http loopback
    /// redirect is also fetched, as a browser would.
    public func authorize(_ url: String, user: String = "alice", deny: Bool = false, deliver: Bool = false) throws
        -> String
    {
        try authorizeDelivering(url, user: user, deny: deny, deliver: deliver).redirect
    }

    /// As `authorize`, also answering the status line of the loopback
    /// listener's answer when `deliver` fetched it (nil otherwise).
    public func authorizeDelivering(_ url: String, user: String = "alice", deny: Bool = false, deliver: Bool = true)
        throws -> (redirect: String, deliveryStatus: String?)
    {
        var arguments = ["browser", "authorize", url, "--user", user]
        if deny { arguments.append("--deny") }
        if deliver { arguments.append("--deliver") }
        let result = try runProgram(Self.script, arguments, timeout: 90)
        guard result.status == 0 else {
            throw HarnessError("the scripted browser failed (\(result.status)): \(result.err)")
        }
        let redirect = result.out.trimmingCharacters(in: .whitespacesAndNewlines)
        let status = result.err.split(separator: "\n").last { $0.hasPrefix("HTTP/") }.map(String.init)
        return (redirect, status)
    }

    /// Signs `user` in on the device pages at `verificationURI`, enters
    /// `userCode` and approves (or denies) the device; answers the final
    /// page's heading ("Device Authorized" or "Device Denied").
    @discardableResult
    public func approveDevice(verificationURI: String, userCode: String, user: String = "alice", deny: Bool = false)
        throws -> String
    {
        var arguments = ["browser", "device", verificationURI, userCode, "--user", user]
        if deny { arguments.append("--deny") }
        let result = try runProgram(Self.script, arguments, timeout: 90)
        guard result.status == 0 else {
            throw HarnessError("the scripted browser failed on the device pages (\(result.status)): \(result.err)")
        }
        return result.out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Inspection

    /// The user's live tokens at the provider: access tokens not expired or
    /// revoked, refresh tokens not revoked (the test-only `/test/tokens`).
    public func tokenCounts(user: String = "alice") throws -> (access: Int, refresh: Int) {
        let answer = try get(baseURL + "/test/tokens?user=" + user)
        guard answer.status == 200, let json = try? JSONValue.parse(answer.body),
            let access = json["access"]?.intValue, let refresh = json["refresh"]?.intValue
        else { throw HarnessError("/test/tokens answered \(answer.status)") }
        return (Int(access), Int(refresh))
    }

    /// `GET /api/me` with the access token: the status, the body and the
    /// `WWW-Authenticate` header.
    public func apiMe(accessToken: String) throws -> (status: Int, body: String, wwwAuthenticate: String?) {
        let answer = try get(baseURL + "/api/me", headers: [("Authorization", "Bearer " + accessToken)])
        return (answer.status, String(decoding: answer.body, as: UTF8.self), answer.header("www-authenticate"))
    }

    /// One request to the provider (no redirect followed).
    public func request(
        _ method: String, _ url: String, headers: [(name: String, value: String)] = [], form: [(String, String)]? = nil
    ) throws -> ProviderAnswer {
        guard let session = CurlSession() else { throw HarnessError("libcurl could not start") }
        var allHeaders = headers
        var body: [UInt8]?
        if let form {
            body = Array(Self.formEncode(form).utf8)
            allHeaders.append(("Content-Type", "application/x-www-form-urlencoded"))
        }
        let request = CurlRequest(method: method, url: url, headers: allHeaders, body: body, timeoutMilliseconds: 30_000)
        switch session.perform(request) {
        case .answered(let status, let headers, let body): return ProviderAnswer(status: status, headers: headers, body: body)
        case .tooLarge: throw HarnessError("the provider's answer is too large")
        case .failed(let code, _, _): throw HarnessError("the provider did not answer: \(curlText(code))")
        }
    }

    public func get(_ url: String, headers: [(name: String, value: String)] = []) throws -> ProviderAnswer {
        try request("GET", url, headers: headers)
    }

    /// A form POST (`application/x-www-form-urlencoded`) to the provider.
    public func post(_ url: String, form: [(String, String)], headers: [(name: String, value: String)] = []) throws
        -> ProviderAnswer
    {
        try request("POST", url, headers: headers, form: form)
    }
}

/// An answer of the test provider.
public struct ProviderAnswer: Sendable {
    public let status: Int
    public let headers: [CurlHeader]
    public let body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.last { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The body as JSON (nil when it is not JSON).
    public var json: JSONValue? { try? JSONValue.parse(body) }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

extension TestProvider {
    /// `application/x-www-form-urlencoded`, every byte outside RFC 3986's unreserved set percent-encoded.
    public static func formEncode(_ fields: [(String, String)]) -> String {
        func encode(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                    UInt8(ascii: "~"):
                    out.append(Character(UnicodeScalar(byte)))
                default:
                    let hex = Array("0123456789ABCDEF")
                    out += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
                }
            }
            return out
        }
        return fields.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&")
    }
}
