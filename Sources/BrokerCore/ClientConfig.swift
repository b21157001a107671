import BrowserLoginProtocol

/// One configured client: an app that signs in through the broker. Read
/// from a drop-in file (`clients.d/NAME.conf`, group `[Client]`).
public struct ClientConfig: Sendable, Equatable {
    public var id: String
    public var appName: String
    /// The login server's origin, also the expected issuer.
    public var server: Origin
    public var basePath: String
    /// The private-use scheme (or https) return URL; nil for a loopback redirect.
    public var returnURL: ReturnURL?
    /// The loopback redirect of an OAuth client (RFC 8252 §7.3); nil otherwise.
    public var loopback: LoopbackRedirect?
    /// The OAuth 2.0 / OpenID Connect settings; nil for a Browser Login client.
    public var provider: ProviderSettings?
    public var policy: ClientPolicy
    /// The origin `http.request` may reach; the server origin by default.
    public var apiOrigin: Origin
    public var caFile: String?
    /// A command template for the browser (`%u` is the URL); nil for the default launcher.
    public var browserCommand: String?
    /// A command template that opens a private browser session, used for `ephemeral` logins.
    public var privateBrowserCommand: String?
    /// Local programs allowed to use this client (Flatpak app ids or absolute executable paths); empty: any.
    public var peers: [String]
    /// Register the URL handler for this client's scheme at start-up.
    public var installHandler: Bool
    /// The file it came from.
    public var file: String

    /// `{server origin}{basePath}`.
    public var base: String { server.serialized + basePath }

    /// The protocol this client signs in with.
    public var kind: SignInKind { provider?.kind ?? .browserLogin }

    /// The redirect as configured, for people and listings.
    public var redirectText: String { returnURL?.text ?? loopback?.configured ?? "" }

    /// The issuer its attempts and sessions belong to: the provider's, or the login server's origin.
    public var issuer: String { provider?.issuer ?? server.serialized }

    public init(
        id: String, appName: String, server: Origin, basePath: String = "/browser-login", returnURL: ReturnURL?,
        loopback: LoopbackRedirect? = nil, provider: ProviderSettings? = nil, policy: ClientPolicy = .confirm,
        apiOrigin: Origin? = nil, caFile: String? = nil,
        browserCommand: String? = nil, privateBrowserCommand: String? = nil, peers: [String] = [],
        installHandler: Bool = false, file: String = ""
    ) {
        self.id = id
        self.appName = appName
        self.server = server
        self.basePath = basePath
        self.returnURL = returnURL
        self.loopback = loopback
        self.provider = provider
        self.policy = policy
        self.apiOrigin = apiOrigin ?? server
        self.caFile = caFile
        self.browserCommand = browserCommand
        self.privateBrowserCommand = privateBrowserCommand
        self.peers = peers
        self.installHandler = installHandler
        self.file = file
    }
}

/// A problem found in a client file: where, which key, and what to do.
public struct ConfigProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Severity: String, Sendable { case error, warning }
    public var severity: Severity
    public var file: String
    public var key: String?
    public var message: String

    public init(_ severity: Severity, file: String, key: String?, _ message: String) {
        self.severity = severity
        self.file = file
        self.key = key
        self.message = message
    }

    public var description: String {
        "\(file)\(key.map { ": \($0)" } ?? ""): \(severity.rawValue): \(message)"
    }
}

/// Validation of client files. Pure: the caller reads the files (GKeyFile)
/// and hands over each file's `[Client]` keys.
public enum ClientConfigValidator {
    public static let group = "Client"
    public static let knownKeys: Set<String> = [
        "Id", "AppName", "Server", "BasePath", "ReturnUrl", "Policy", "ApiOrigin", "CAFile", "Browser",
        "PrivateBrowser", "Peers", "InstallHandler",
    ]

    /// Validates one file's keys. Answers the client, or nil with at least one error.
    public static func validate(file: String, keys: [String: String]) -> (ClientConfig?, [ConfigProblem]) {
        var problems: [ConfigProblem] = []
        func error(_ key: String?, _ message: String) {
            problems.append(ConfigProblem(.error, file: file, key: key, message))
        }
        for key in keys.keys.sorted() where !knownKeys.contains(key) {
            problems.append(ConfigProblem(.warning, file: file, key: key, "unknown key, ignored"))
        }
        func required(_ key: String) -> String? {
            guard let value = keys[key]?.trimmed, !value.isEmpty else {
                error(key, "required; add '\(key)=…' to the [\(group)] group")
                return nil
            }
            return value
        }

        let id = required("Id")
        if let id, !Registration.isValidClientId(id) {
            error("Id", "must match [A-Za-z0-9._-]{1,64}")
        }
        let appName = required("AppName")
        if let appName, !(1...80).contains(appName.count) {
            error("AppName", "must be 1 to 80 characters")
        }
        var server: Origin?
        if let text = required("Server") {
            do { server = try Origin(text) } catch let refusal { error("Server", refusal.message) }
        }
        let basePath = keys["BasePath"]?.trimmed ?? "/browser-login"
        if !Registration.isValidBasePath(basePath) {
            error("BasePath", "must match ^(/[A-Za-z0-9._~-]+)+$ (for example /browser-login)")
        }
        var returnURL: ReturnURL?
        if let text = required("ReturnUrl") {
            do {
                let url = try ReturnURL(text)
                if url.isHTTPS {
                    error(
                        "ReturnUrl",
                        "https return URLs cannot be used on Linux: nothing can claim an https link for an app; register a custom scheme such as com.example.app:/callback"
                    )
                } else {
                    returnURL = url
                }
            } catch let refusal {
                error("ReturnUrl", "\(refusal.rule): \(refusal.message)")
            }
        }
        var policy = ClientPolicy.confirm
        if let text = keys["Policy"]?.trimmed {
            if let p = ClientPolicy(rawValue: text) { policy = p } else { error("Policy", "must be 'confirm' or 'automatic'") }
        }
        var apiOrigin: Origin?
        if let text = keys["ApiOrigin"]?.trimmed, !text.isEmpty {
            do { apiOrigin = try Origin(text) } catch let refusal { error("ApiOrigin", refusal.message) }
        }
        let caFile = keys["CAFile"]?.trimmed.nonEmpty
        if let caFile, !caFile.hasPrefix("/") { error("CAFile", "must be an absolute path") }
        let browser = keys["Browser"]?.trimmed.nonEmpty
        if let browser, !browser.contains("%u") { error("Browser", "the command must contain %u where the URL goes") }
        let privateBrowser = keys["PrivateBrowser"]?.trimmed.nonEmpty
        if let privateBrowser, !privateBrowser.contains("%u") {
            error("PrivateBrowser", "the command must contain %u where the URL goes")
        }
        let peers = (keys["Peers"] ?? "").split(separator: ";").map { String($0).trimmed }.filter { !$0.isEmpty }
        for peer in peers where !peer.hasPrefix("/") && !isValidFlatpakId(peer) {
            error("Peers", "'\(peer)' is neither an absolute executable path nor a Flatpak app id")
        }
        var installHandler = false
        if let text = keys["InstallHandler"]?.trimmed {
            switch text {
            case "true": installHandler = true
            case "false": installHandler = false
            default: error("InstallHandler", "must be 'true' or 'false'")
            }
        }
        guard problems.allSatisfy({ $0.severity == .warning }), let id, let appName, let server, let returnURL else {
            return (nil, problems)
        }
        let config = ClientConfig(
            id: id, appName: appName, server: server, basePath: basePath, returnURL: returnURL, policy: policy,
            apiOrigin: apiOrigin, caFile: caFile, browserCommand: browser, privateBrowserCommand: privateBrowser,
            peers: peers, installHandler: installHandler, file: file)
        return (config, problems)
    }

    /// Checks the set of valid clients together: ids and return URLs must be
    /// unique. Clients that clash are all refused, with an error naming both files.
    public static func checkTogether(_ clients: [ClientConfig]) -> ([ClientConfig], [ConfigProblem]) {
        var problems: [ConfigProblem] = []
        var refused = Set<String>()
        for (i, a) in clients.enumerated() {
            for b in clients[(i + 1)...] {
                if let ar = a.returnURL, let br = b.returnURL, ar.parts.matchKey == br.parts.matchKey {
                    refused.formUnion([a.file, b.file])
                    for (file, other) in [(a.file, b.file), (b.file, a.file)] {
                        problems.append(
                            ConfigProblem(
                                .error, file: file, key: "ReturnUrl",
                                "the same return URL is configured in \(other); two clients may not share a return URL — both are refused"
                            ))
                    }
                }
                if a.id == b.id {
                    refused.formUnion([a.file, b.file])
                    problems.append(
                        ConfigProblem(.error, file: b.file, key: "Id", "the client id '\(a.id)' is also used by \(a.file)"))
                }
            }
        }
        return (clients.filter { !refused.contains($0.file) }, problems)
    }

    static func isValidFlatpakId(_ id: String) -> Bool {
        let parts = id.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count >= 3
            && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" } }
    }
}

extension String {
    var trimmed: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
    var nonEmpty: String? { isEmpty ? nil : self }
}
