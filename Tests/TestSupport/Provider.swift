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
    /// Which real provider: django-oauth-toolkit (`scripts/provider`), or
    /// Glewlwyd 2.7.5 from Debian (`scripts/glewlwyd`, Tests/Provider/README.md
    /// "Glewlwyd"). The provider suites run against both.
    public enum Kind: String, Sendable, CaseIterable, CustomStringConvertible {
        case djangoOAuthToolkit = "django-oauth-toolkit"
        case glewlwyd = "glewlwyd"

        public var description: String { rawValue }

        /// Installed: the virtual environment (DOT) or Debian's package (Glewlwyd).
        public var isInstalled: Bool {
            switch self {
            case .djangoOAuthToolkit: TestProvider.isInstalled
            case .glewlwyd: FileManager.default.isExecutableFile(atPath: "/usr/bin/glewlwyd")
            }
        }

        /// Tests that need this provider run: it is installed, or `BL_REQUIRE_PROVIDER` is set.
        public var shouldRun: Bool { isInstalled || TestProvider.isRequired }

        /// The kinds whose tests run (the arguments of a parameterised provider test).
        public static var runnable: [Kind] { allCases.filter(\.shouldRun) }

        var script: String {
            switch self {
            case .djangoOAuthToolkit: repositoryRoot + "/scripts/provider"
            case .glewlwyd: repositoryRoot + "/scripts/glewlwyd"
            }
        }

        /// The issuer's path: `/o` (DOT), `/api/o` (Glewlwyd's OIDC plugin instance `o`).
        public var issuerPath: String {
            switch self {
            case .djangoOAuthToolkit: "/o"
            case .glewlwyd: "/api/o"
            }
        }

        /// The protected resource `http.request` tests call: DOT's `/api/me`,
        /// Glewlwyd's userinfo (both answer JSON with the user's `email`).
        public var apiPath: String {
            switch self {
            case .djangoOAuthToolkit: "/api/me"
            case .glewlwyd: "/api/o/userinfo"
            }
        }
    }

    public let kind: Kind
    /// The issuer, exactly as discovery, the ID token and the authorization
    /// response's `iss` write it: `http://127.0.0.1:PORT/o` (Glewlwyd:
    /// `http://127.0.0.1:PORT/api/o`).
    public let issuer: String
    public let port: Int
    /// `http://127.0.0.1:PORT` (the protected resource is `baseURL + "/api/me"`).
    public let baseURL: String
    /// The provider's database, RSA key and `provider.log`.
    public let directory: String
    /// The access token lifetime it was started with, in seconds.
    public let accessTokenTTL: Int
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

    private init(kind: Kind, process: SpawnedProcess, issuer: String, directory: String, accessTokenTTL: Int) throws {
        self.kind = kind
        self.process = process
        self.issuer = issuer
        self.directory = directory
        self.accessTokenTTL = accessTokenTTL
        guard issuer.hasPrefix("http://127.0.0.1:"), issuer.hasSuffix(kind.issuerPath),
            let port = Int(issuer.dropFirst("http://127.0.0.1:".count).dropLast(kind.issuerPath.count))
        else { throw HarnessError("the provider's ready line names an unexpected issuer: \(issuer)") }
        self.port = port
        baseURL = "http://127.0.0.1:\(port)"
    }

    /// Starts the provider with its files in `directory` (made if missing) on
    /// `port` (0: a free port, chosen by the provider binding port 0), and
    /// waits until it accepts connections (its `ready ISSUER` line). Fails
    /// with the provider's output when it exits or is not ready in 60 s.
    /// `accessTokenTTL`: the access token lifetime in seconds. `externalURL`
    /// (Glewlwyd only): the origin of a proxy in front of it, which Glewlwyd
    /// then names as its own (issuer, endpoints, DPoP `htu`); `issuer`,
    /// `port` and `baseURL` are then the proxy's.
    public static func start(
        _ kind: Kind = .djangoOAuthToolkit, in directory: String, accessTokenTTL: Int = 300, port: Int = 0,
        externalURL: String? = nil
    ) throws -> TestProvider {
        guard kind.isInstalled else {
            throw HarnessError(
                kind == .glewlwyd
                    ? "Glewlwyd is not installed (Debian's glewlwyd; scripts/install-deps installs it)"
                    : "the test provider is not installed (run scripts/provider install; virtual environment \(virtualEnvironment))"
            )
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let log = directory + "/provider.log"
        // A restart appends to the log: only what this start writes counts.
        let offset = (try? FileManager.default.attributesOfItem(atPath: log)[.size] as? Int) ?? 0
        let external = externalURL.map { ["--external-url", $0] } ?? []
        let process = try SpawnedProcess(
            [kind.script, "serve", "--dir", directory, "--port", "\(port)", "--access-ttl", "\(accessTokenTTL)"] + external,
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
            return try TestProvider(
                kind: kind, process: process, issuer: issuer ?? "", directory: directory, accessTokenTTL: accessTokenTTL)
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
        let result = try runProgram(kind.script, arguments, timeout: 90)
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
        let result = try runProgram(kind.script, arguments, timeout: 90)
        guard result.status == 0 else {
            throw HarnessError("the scripted browser failed on the device pages (\(result.status)): \(result.err)")
        }
        return result.out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Inspection

    /// The user's live tokens at the provider: access tokens not expired or
    /// revoked, refresh tokens not revoked (the test-only `/test/tokens`).
    /// Glewlwyd: read from its database (its access tokens are JWTs, live
    /// until they expire even when their refresh token is revoked).
    public func tokenCounts(user: String = "alice") throws -> (access: Int, refresh: Int) {
        if kind == .glewlwyd { return try glewlwydTokenCounts(user: user) }
        let answer = try get(baseURL + "/test/tokens?user=" + user)
        guard answer.status == 200, let json = try? JSONValue.parse(answer.body),
            let access = json["access"]?.intValue, let refresh = json["refresh"]?.intValue
        else { throw HarnessError("/test/tokens answered \(answer.status)") }
        return (Int(access), Int(refresh))
    }

    /// `GET /api/me` (Glewlwyd: its userinfo) with the access token: the
    /// status, the body and the `WWW-Authenticate` header.
    public func apiMe(accessToken: String) throws -> (status: Int, body: String, wwwAuthenticate: String?) {
        let answer = try get(baseURL + kind.apiPath, headers: [("Authorization", "Bearer " + accessToken)])
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

// MARK: Glewlwyd

extension TestProvider {
    /// Registers more redirect URIs for `chat-desktop` (Glewlwyd compares
    /// redirect URIs exactly, port included: a loopback client there needs a
    /// fixed port, registered first). DOT matches loopback on any port: nothing to do.
    public func allowRedirects(_ uris: [String]) throws {
        guard kind == .glewlwyd else { return }
        let result = try runProgram(kind.script, ["redirect", baseURL] + uris, timeout: 60)
        guard result.status == 0 else { throw HarnessError("registering \(uris) failed: \(result.err)") }
    }

    func glewlwydTokenCounts(user: String) throws -> (access: Int, refresh: Int) {
        guard user.allSatisfy({ $0.isLetter || $0.isNumber }) else { throw HarnessError("odd user name \(user)") }
        let sql = """
            SELECT COUNT(*) FROM gpo_access_token WHERE gpoa_username = '\(user)' AND gpoa_enabled = 1
              AND gpoa_issued_at + \(accessTokenTTL) > CAST(strftime('%s','now') AS INTEGER);
            SELECT COUNT(*) FROM gpo_refresh_token WHERE gpor_username = '\(user)' AND gpor_enabled = 1
              AND gpor_expires_at > CAST(strftime('%s','now') AS INTEGER);
            """
        let result = try runProgram("/usr/bin/sqlite3", ["-readonly", directory + "/glewlwyd.db", sql], timeout: 30)
        let numbers = result.out.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard result.status == 0, numbers.count == 2 else {
            throw HarnessError("reading Glewlwyd's tokens failed: \(result.err)")
        }
        return (numbers[0], numbers[1])
    }
}
