import BrowserLoginProtocol

/// One configured client: an app that signs in through the broker. Read
/// from a drop-in file (`clients.d/NAME.conf`, group `[Client]`).
public struct ClientConfig: Sendable, Equatable {
    public var id: String
    public var appName: String
    /// The login server's origin, also the expected issuer.
    public var server: Origin
    public var basePath: String
    /// The private-use scheme return URL; nil for a client with only a loopback redirect.
    public var returnURL: ReturnURL?
    /// The loopback redirect (RFC 8252 §7.3); nil when there is none. A
    /// Browser Login client may have both: the broker picks one per attempt.
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
    /// One signed-in account at a time (`single`, the default) or several (`Accounts=multiple`).
    public var accounts: AccountsMode = .single

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
/// and hands over each file's `[Client]` keys. The keys and their rules are
/// in docs/configuration.md and, for OAuth 2.0 / OpenID Connect clients, in
/// docs/providers.md.
public enum ClientConfigValidator {
    public static let group = "Client"
    /// The keys of an OAuth 2.0 / OpenID Connect client (`Protocol=oidc` or `oauth2`).
    public static let providerKeys: [String] = [
        "Issuer", "ClientId", "ClientSecret", "Scopes", "AuthorizationEndpoint", "TokenEndpoint", "RevocationEndpoint",
        "UserinfoEndpoint", "DeviceAuthorizationEndpoint", "AuthorizeParams", "RevocationAuth", "Flow",
        "DPoP", "PAR",
    ]
    public static let knownKeys: Set<String> = Set(
        [
            "Id", "AppName", "Server", "BasePath", "ReturnUrl", "Policy", "ApiOrigin", "CAFile", "Browser",
            "PrivateBrowser", "Peers", "InstallHandler", "Protocol", "ReturnUrls", "Accounts",
        ] + providerKeys)
    /// Authorize parameters the broker sets itself: `AuthorizeParams` may not name them.
    public static let reservedAuthorizeParams: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge",
        "code_challenge_method",
    ]

    /// Validates one file's keys. Answers the client, or nil with at least one error.
    public static func validate(file: String, keys: [String: String]) -> (ClientConfig?, [ConfigProblem]) {
        var problems: [ConfigProblem] = []
        func error(_ key: String?, _ message: String) {
            problems.append(ConfigProblem(.error, file: file, key: key, message))
        }
        func warning(_ key: String?, _ message: String) {
            problems.append(ConfigProblem(.warning, file: file, key: key, message))
        }
        let unknown = keys.keys.sorted().filter { !knownKeys.contains($0) }
        if unknown.count == 1 {
            warning(unknown[0], "unknown key, ignored")
        } else if !unknown.isEmpty {
            // One warning per file, however many: the first few named, each cut to a readable length.
            let named = unknown.prefix(5).map { $0.count > 40 ? "\($0.prefix(40))…" : $0 }.joined(separator: ", ")
            let more = unknown.count > 5 ? " and \(unknown.count - 5) more" : ""
            warning(nil, "\(unknown.count) unknown keys, ignored: \(named)\(more)")
        }
        func required(_ key: String, _ why: String = "") -> String? {
            guard let value = keys[key]?.trimmed, !value.isEmpty else {
                error(key, "required\(why); add '\(key)=…' to the [\(group)] group")
                return nil
            }
            return value
        }

        var kind = SignInKind.browserLogin
        if let text = keys["Protocol"]?.trimmed {
            if let k = SignInKind(rawValue: text) {
                kind = k
            } else {
                error("Protocol", "must be 'browser-login' (the default), 'oidc' or 'oauth2'")
            }
        }
        let isProvider = kind != .browserLogin

        let id = required("Id")
        if let id, !Registration.isValidClientId(id) {
            error("Id", "must match [A-Za-z0-9._-]{1,64}")
        }
        let appName = required("AppName")
        if let appName, !(1...80).contains(appName.count) {
            error("AppName", "must be 1 to 80 characters")
        }

        var server: Origin?
        var basePath = "/browser-login"
        var provider: ProviderSettings?
        if isProvider {
            for key in ["Server", "BasePath"] where keys[key] != nil {
                warning(
                    key,
                    "not used by Protocol=\(kind.rawValue) clients (the issuer's metadata says where to sign in), ignored")
            }
            (provider, server) = validateProvider(kind: kind, keys: keys, error: error, warning: warning)
        } else {
            for key in providerKeys where keys[key] != nil {
                warning(key, "used only by Protocol=oidc and Protocol=oauth2 clients, ignored")
            }
            if let text = required("Server") {
                do { server = try Origin(text) } catch let refusal { error("Server", refusal.message) }
            }
            basePath = keys["BasePath"]?.trimmed ?? "/browser-login"
            if !Registration.isValidBasePath(basePath) {
                error("BasePath", "must match ^(/[A-Za-z0-9._~-]+)+$ (for example /browser-login)")
            }
        }

        var returnURL: ReturnURL?
        var loopback: LoopbackRedirect?
        for (key, text) in returnURLTexts(keys, kind: kind, error: error) {
            if let parsed = LoopbackRedirect.parse(text) {
                switch parsed {
                case .success where loopback != nil:
                    error(key, "at most one loopback return URL (http://127.0.0.1/…) per client")
                case .success(let redirect): loopback = redirect
                case .failure(let problem): error(key, problem.message)
                }
            } else {
                do {
                    let url = try ReturnURL(text)
                    if url.isHTTPS {
                        error(
                            key,
                            "https return URLs cannot be used on Linux: nothing can claim an https link for an app; register a custom scheme such as com.example.app:/callback or use a loopback redirect such as http://127.0.0.1/callback"
                        )
                    } else if returnURL != nil {
                        error(key, "at most one custom-scheme return URL per client (and at most one loopback one)")
                    } else {
                        returnURL = url
                    }
                } catch let refusal {
                    error(key, "\(refusal.rule): \(refusal.message)")
                }
            }
        }
        var policy = ClientPolicy.confirm
        if let text = keys["Policy"]?.trimmed {
            if let p = ClientPolicy(rawValue: text) { policy = p } else { error("Policy", "must be 'confirm' or 'automatic'") }
        }
        var apiOrigin: Origin?
        if isProvider {
            if let text = required("ApiOrigin", " for Protocol=\(kind.rawValue) clients: the issuer is not the app's API") {
                do { apiOrigin = try Origin(text) } catch let refusal { error("ApiOrigin", refusal.message) }
            }
        } else if let text = keys["ApiOrigin"]?.trimmed, !text.isEmpty {
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
        if installHandler, returnURL == nil, loopback != nil {
            warning("InstallHandler", "a loopback redirect needs no URL handler, ignored")
            installHandler = false
        }
        var accounts = AccountsMode.single
        if let text = keys["Accounts"]?.trimmed {
            if let mode = AccountsMode(rawValue: text) {
                accounts = mode
            } else {
                error("Accounts", "must be 'single' (the default) or 'multiple'")
            }
        }
        guard problems.allSatisfy({ $0.severity == .warning }), let id, let appName, let server,
            returnURL != nil || loopback != nil, isProvider == (provider != nil)
        else {
            return (nil, problems)
        }
        var config = ClientConfig(
            id: id, appName: appName, server: server, basePath: basePath, returnURL: returnURL, loopback: loopback,
            provider: provider, policy: policy, apiOrigin: apiOrigin, caFile: caFile, browserCommand: browser,
            privateBrowserCommand: privateBrowser, peers: peers, installHandler: installHandler, file: file)
        config.accounts = accounts
        return (config, problems)
    }

    /// The return URLs of a file with the key each came from: `ReturnUrl=` (a
    /// file that repeats it has its values joined with `;` by the reader) or
    /// `ReturnUrls=` (a `;`-separated list), not both. A Browser Login client
    /// may list a custom scheme and a loopback redirect, and the broker picks
    /// one per attempt (docs/desktop.md); a provider client has exactly one.
    private static func returnURLTexts(
        _ keys: [String: String], kind: SignInKind, error: (String?, String) -> Void
    ) -> [(key: String, text: String)] {
        let single = keys["ReturnUrl"]?.trimmed.nonEmpty
        let list = keys["ReturnUrls"]?.trimmed.nonEmpty
        if single != nil && list != nil {
            error("ReturnUrls", "give the return URLs either in ReturnUrl= or in ReturnUrls=, not both")
            return []
        }
        guard let value = single ?? list else {
            error("ReturnUrl", "required; add 'ReturnUrl=…' (or 'ReturnUrls=…;…') to the [\(group)] group")
            return []
        }
        let key = single != nil ? "ReturnUrl" : "ReturnUrls"
        let texts = value.split(separator: ";").map { String($0).trimmed }.filter { !$0.isEmpty }
        if texts.isEmpty {
            error("ReturnUrl", "required; add 'ReturnUrl=…' (or 'ReturnUrls=…;…') to the [\(group)] group")
            return []
        }
        if texts.count > 2 {
            error(key, "at most two return URLs: one custom scheme and one loopback redirect (http://127.0.0.1/…)")
            return []
        }
        if texts.count > 1 && kind != .browserLogin {
            error(key, "a Protocol=\(kind.rawValue) client has one return URL (the one registered with the provider)")
            return []
        }
        return texts.map { (key, $0) }
    }

    /// The provider keys of an `oidc` or `oauth2` client, and the issuer's origin
    /// (the client's `server`). Nil when a key is wrong (the errors say which).
    private static func validateProvider(
        kind: SignInKind, keys: [String: String], error: (String?, String) -> Void, warning: (String?, String) -> Void
    ) -> (ProviderSettings?, Origin?) {
        var ok = true
        func fail(_ key: String, _ message: String) {
            ok = false
            error(key, message)
        }
        func required(_ key: String) -> String? {
            guard let value = keys[key]?.trimmed, !value.isEmpty else {
                fail(key, "required for Protocol=\(kind.rawValue) clients; add '\(key)=…' to the [\(group)] group")
                return nil
            }
            return value
        }
        var issuerOrigin: Origin?
        let issuer = required("Issuer")
        if let issuer {
            switch ProviderURLCheck.check(issuer, isIssuer: true) {
            case .success(let origin): issuerOrigin = origin
            case .failure(let problem): fail("Issuer", problem.message)
            }
        }
        let clientId = required("ClientId")
        if let clientId, !clientId.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) {
            fail("ClientId", "may not contain spaces or control characters")
        }
        var clientSecret: String?
        if let secret = keys["ClientSecret"]?.trimmed, !secret.isEmpty {
            // The value is never repeated in a message.
            if !secret.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) {
                fail("ClientSecret", "may not contain control characters")
            } else {
                clientSecret = secret
                warning(
                    "ClientSecret",
                    "a client secret is not secret in a desktop app (anyone can read it from the app); set it only for providers that require one of installed apps, such as Google"
                )
            }
        }
        var scopes: [String] = []
        if let text = keys["Scopes"] {
            scopes = text.split(separator: " ").map(String.init)
            for scope in scopes where !scope.unicodeScalars.allSatisfy(isScopeCharacter) {
                fail("Scopes", "'\(scope)' is not a scope: scopes are separated by spaces and use printable ASCII but \" and \\")
            }
        }
        if kind == .oidc, !scopes.contains("openid") {
            fail("Scopes", "an OpenID Connect client's scopes must contain 'openid' (for example 'Scopes=openid email profile')")
        }
        var endpoints = ProviderEndpoints()
        let endpointKeys: [(String, WritableKeyPath<ProviderEndpoints, String?>)] = [
            ("AuthorizationEndpoint", \.authorization), ("TokenEndpoint", \.token), ("RevocationEndpoint", \.revocation),
            ("UserinfoEndpoint", \.userinfo), ("DeviceAuthorizationEndpoint", \.deviceAuthorization),
        ]
        for (key, path) in endpointKeys {
            guard let text = keys[key]?.trimmed, !text.isEmpty else { continue }
            switch ProviderURLCheck.check(text, isIssuer: false) {
            case .success: endpoints[keyPath: path] = text
            case .failure(let problem): fail(key, problem.message)
            }
        }
        var authorizeParams: [(name: String, value: String)] = []
        if let text = keys["AuthorizeParams"]?.trimmed, !text.isEmpty {
            switch parseAuthorizeParams(text) {
            case .success(let params): authorizeParams = params
            case .failure(let problem): fail("AuthorizeParams", problem.message)
            }
        }
        var revocationAuth = RevocationAuth.client
        if let text = keys["RevocationAuth"]?.trimmed {
            if let value = RevocationAuth(rawValue: text) {
                revocationAuth = value
            } else {
                fail("RevocationAuth", "must be 'client' (the default) or 'bearer'")
            }
        }
        var flow = SignInFlow.browser
        if let text = keys["Flow"]?.trimmed {
            if let value = SignInFlow(rawValue: text) {
                flow = value
            } else {
                fail("Flow", "must be 'browser' (the default) or 'device'")
            }
        }
        // DPoP= and PAR= (docs/providers.md, "DPoP and PAR").
        var usage: [String: ProviderUsage] = [:]
        for key in ["DPoP", "PAR"] {
            guard let text = keys[key]?.trimmed else { continue }
            if let value = ProviderUsage(rawValue: text) {
                usage[key] = value
            } else {
                fail(key, "must be 'auto' (the default), 'yes' or 'no'")
            }
        }
        guard ok, let issuer, let clientId, let issuerOrigin else { return (nil, issuerOrigin) }
        let settings = ProviderSettings(
            kind: kind, issuer: issuer, clientId: clientId, clientSecret: clientSecret, scopes: scopes,
            endpoints: endpoints, authorizeParams: authorizeParams, revocationAuth: revocationAuth, flow: flow,
            dpop: usage["DPoP"] ?? .auto, par: usage["PAR"] ?? .auto)
        return (settings, issuerOrigin)
    }

    /// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
    private static func isScopeCharacter(_ c: Unicode.Scalar) -> Bool {
        c.value == 0x21 || (0x23...0x5B).contains(c.value) || (0x5D...0x7E).contains(c.value)
    }

    /// `AuthorizeParams=a=b&c=d`: names and values percent-decoded; a name the
    /// broker sets itself, an empty name, or a name given twice is refused.
    public static func parseAuthorizeParams(_ text: String) -> Result<[(name: String, value: String)], ConfigText> {
        var params: [(name: String, value: String)] = []
        for pair in text.split(separator: "&", omittingEmptySubsequences: false) {
            guard let equals = pair.firstIndex(of: "=") else {
                return .failure(ConfigText("'\(pair)' has no '=': write name=value pairs joined by '&'"))
            }
            guard let name = percentDecode(pair[..<equals]), let value = percentDecode(pair[pair.index(after: equals)...])
            else {
                return .failure(ConfigText("'\(pair)' has a malformed percent-encoding (or encodes a control character)"))
            }
            if name.isEmpty { return .failure(ConfigText("a parameter has an empty name")) }
            if reservedAuthorizeParams.contains(name) {
                return .failure(ConfigText("'\(name)' is set by the broker itself and cannot be given here"))
            }
            if params.contains(where: { $0.name == name }) {
                return .failure(ConfigText("'\(name)' is given twice"))
            }
            params.append((name, value))
        }
        return .success(params)
    }

    /// Checks the set of valid clients together: ids and return URLs must be
    /// unique, and a fixed loopback port belongs to one client. Clients that
    /// clash are all refused, with an error naming both files. Loopback clients
    /// with ephemeral ports may share a path: each attempt listens on a port of
    /// its own, and its state says which attempt a callback belongs to.
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
                if let al = a.loopback, let bl = b.loopback, let port = al.port, bl.port == port, al.host == bl.host {
                    refused.formUnion([a.file, b.file])
                    for (file, other) in [(a.file, b.file), (b.file, a.file)] {
                        problems.append(
                            ConfigProblem(
                                .error, file: file, key: "ReturnUrl",
                                "the loopback port \(port) is also fixed in \(other); an attempt listens on its port, so two clients cannot share one (leave the port out to get a free one for each attempt) — both are refused"
                            ))
                    }
                }
                if a.id == b.id {
                    refused.formUnion([a.file, b.file])
                    for (file, other) in [(a.file, b.file), (b.file, a.file)] {
                        problems.append(
                            ConfigProblem(
                                .error, file: file, key: "Id",
                                "the client id '\(a.id)' is also used by \(other); two clients may not share an id — both are refused"
                            ))
                    }
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

/// A message about a value in a client file (a `Result` failure).
public struct ConfigText: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The rule for a provider's issuer and endpoints (docs/providers.md): an
/// absolute https URL, or http on a loopback IP address (127.0.0.0/8 or
/// [::1], never `localhost`); no userinfo, no fragment. An issuer has no
/// query either (RFC 8414 §2) and may hold `{tenantid}` in its path.
/// Public: the reference server's upstream providers follow the same rule.
public enum ProviderURLCheck {
    /// The URL's origin, or why the URL is refused.
    public static func check(_ text: String, isIssuer: Bool) -> Result<Origin, ConfigText> {
        var checked = text
        if isIssuer, text.contains("{") || text.contains("}") {
            checked = text.replacingAll("{tenantid}", with: "tenant")
            if checked.contains("{") || checked.contains("}") {
                return .failure(ConfigText("the only template an issuer may hold is {tenantid}"))
            }
            // The authority: after "scheme://", up to the path.
            let afterScheme = text.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
            if afterScheme.count < 3 || afterScheme[2].contains("{") {
                return .failure(ConfigText("{tenantid} may stand only in the issuer's path"))
            }
        }
        guard let parts = URLParts(splitting: checked), let authority = parts.authority, !authority.isEmpty,
            let host = parts.host, !host.isEmpty
        else {
            return .failure(ConfigText("must be an absolute URL such as https://id.example.com/…"))
        }
        if parts.hasUserinfo { return .failure(ConfigText("may not contain userinfo ('@' before the host)")) }
        if parts.fragment != nil { return .failure(ConfigText("may not have a fragment ('#…')")) }
        if isIssuer, parts.query != nil { return .failure(ConfigText("an issuer has no query ('?…')")) }
        switch parts.scheme {
        case "https": break
        case "http":
            if host.lowercased() == "localhost" || host.lowercased().hasSuffix(".localhost") {
                return .failure(
                    ConfigText("http is allowed only on a loopback IP address (127.0.0.1 or [::1]), not on 'localhost'"))
            }
            guard host == "[::1]" || (Origin.isLoopbackHost(host) && host != "localhost") else {
                return .failure(ConfigText("must be https (http is allowed only on a loopback IP address, 127.0.0.1 or [::1])"))
            }
        default:
            return .failure(ConfigText("must be https (or http on a loopback IP address)"))
        }
        do {
            return .success(try Origin("\(parts.scheme)://\(authority)"))
        } catch let refusal {
            return .failure(ConfigText(refusal.message))
        }
    }
}

extension LoopbackRedirect {
    /// A loopback redirect (RFC 8252 §7.3) read from `ReturnUrl`: nil when
    /// `text` is not an http URL (it is then a private-use scheme), else the
    /// redirect or why it is refused.
    public static func parse(_ text: String) -> Result<LoopbackRedirect, ConfigText>? {
        guard text.lowercased().hasPrefix("http://") else { return nil }
        guard text.hasPrefix("http://") else { return .failure(ConfigText("write the scheme in lower case: http://")) }
        guard text.utf8.count <= ReturnURL.maximumLength, let parts = URLParts(splitting: text), let host = parts.host
        else {
            return .failure(ConfigText("a loopback return URL is http://127.0.0.1/PATH with only URL characters"))
        }
        if parts.hasUserinfo { return .failure(ConfigText("a loopback return URL has no userinfo ('@')")) }
        if parts.query != nil || parts.fragment != nil {
            return .failure(
                ConfigText("a loopback return URL has no query or fragment (the provider appends code, state and iss)"))
        }
        let lower = host.lowercased()
        let redirectHost: Host
        switch lower {
        case "127.0.0.1": redirectHost = .ipv4
        case "[::1]": redirectHost = .ipv6
        case _ where lower == "localhost" || lower.hasSuffix(".localhost"):
            return .failure(
                ConfigText(
                    "'localhost' is not allowed: a name may resolve to something other than the loopback interface the broker listens on (RFC 8252 §8.3); write http://127.0.0.1/PATH (or http://[::1]/PATH)"
                ))
        case _ where Origin.isLoopbackHost(lower):
            return .failure(ConfigText("the broker listens on 127.0.0.1 or [::1]; write http://127.0.0.1/PATH"))
        default:
            return .failure(
                ConfigText(
                    "an http return URL must be a loopback redirect, http://127.0.0.1/PATH or http://[::1]/PATH (RFC 8252 §7.3)"
                ))
        }
        var port: UInt16?
        if let portText = parts.portText {
            guard let value = UInt16(portText), value > 0, portText.first != "0", portText.allSatisfy(\.isNumber) else {
                return .failure(
                    ConfigText("the port must be a number from 1 to 65535 (or leave it out for a free port per attempt)"))
            }
            port = value
        }
        let path = parts.path
        guard path.hasPrefix("/") else { return .failure(ConfigText("the path must start with '/' (for example /callback)")) }
        if path.hasPrefix("//") { return .failure(ConfigText("the path may not contain '//'")) }
        // The path rules of every return URL (docs/protocol.md §1).
        do { _ = try ReturnURL("x-loopback-path:" + path) } catch let refusal {
            return .failure(ConfigText("\(refusal.rule): \(refusal.message)"))
        }
        return .success(LoopbackRedirect(host: redirectHost, port: port, path: path))
    }
}

/// Never shows the client secret: printing a client is safe.
extension ClientConfig: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "ClientConfig(id: \(id), protocol: \(kind.rawValue), issuer: \(issuer), redirect: \(redirectText), file: \(file))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "id": id, "appName": appName, "server": server, "basePath": basePath, "returnURL": returnURL as Any,
                "loopback": loopback as Any, "provider": provider as Any, "policy": policy, "apiOrigin": apiOrigin,
                "file": file,
            ])
    }
}

/// Never shows the client secret, only whether there is one.
extension ProviderSettings: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "ProviderSettings(\(kind.rawValue), issuer: \(issuer), clientId: \(clientId), clientSecret: \(clientSecret == nil ? "none" : "set"), scopes: \(scopes.joined(separator: " ")))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "kind": kind, "issuer": issuer, "clientId": clientId, "hasClientSecret": clientSecret != nil,
                "scopes": scopes, "endpoints": endpoints, "revocationAuth": revocationAuth, "flow": flow,
                "dpop": dpop, "par": par,
            ])
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
    /// Every occurrence of `target` replaced (without Foundation).
    func replacingAll(_ target: String, with replacement: String) -> String {
        var out = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}

/// How many accounts a client may hold signed in at once (`Accounts=`, docs/rpc.md).
public enum AccountsMode: String, Sendable, Equatable {
    case single
    case multiple
}
