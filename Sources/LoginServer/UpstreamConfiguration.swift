import BrokerCore
import BrowserLoginProtocol
import Foundation

/// One upstream OpenID provider the hosted page offers ("Sign in with
/// NAME", docs/server.md): the server is that provider's OpenID Connect
/// client (authorization code with PKCE S256, `state` and `nonce`, the ID
/// token checked as the broker checks it). Holds the client secret when
/// there is one: its description never shows it.
public struct UpstreamProviderConfiguration: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// Shown on the button and recorded as the browser session's
    /// `authMethod`: `[A-Za-z0-9][A-Za-z0-9._-]{0,39}`, not `email` or `test`.
    public var name: String
    /// The issuer exactly as the provider's discovery document writes it.
    public var issuer: String
    public var clientId: String
    /// The client secret (from `clientSecretFile` or `clientSecretEnv` in the
    /// file); nil for a public client, which PKCE alone protects.
    public var clientSecret: String?
    /// Must contain `openid`; `email` is needed for the address.
    public var scopes: [String]
    /// The server's own callback URLs registered at the provider:
    /// `{publicOrigin}{basePath}/browser/upstream/callback` or
    /// `…/callback/SEGMENT`. The first is sent; a callback arriving on any
    /// of them selects this provider.
    public var redirectUris: [String]
    /// Overrides of the discovery document's endpoints (each optional).
    public var authorizationEndpoint: String?
    public var tokenEndpoint: String?
    public var userinfoEndpoint: String?
    public var jwksUri: String?
    /// Extra authorization request parameters, `name=value` pairs joined by `&`.
    public var authorizeParams: String?
    /// A PEM file of CAs to trust for the provider instead of the system's.
    public var caFile: String?

    public init(
        name: String = UpstreamProviderConfiguration.defaultName, issuer: String, clientId: String,
        clientSecret: String? = nil, scopes: [String] = ["openid", "email", "profile"], redirectUris: [String]
    ) {
        self.name = name
        self.issuer = issuer
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.scopes = scopes
        self.redirectUris = redirectUris
    }

    /// The name (and so the `authMethod`) of a provider that is not given one.
    public static let defaultName = "oidc"
    /// The names other sign-in methods record as `authMethod`.
    static let reservedNames: Set<String> = ["email", "test"]
    /// The callback route under `{basePath}/browser/`.
    static let callbackRoute = "upstream/callback"

    public var description: String {
        "UpstreamProvider(\(name), issuer: \(issuer), clientId: \(clientId), secret: \(clientSecret == nil ? "none" : "set"))"
    }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

extension ServerConfiguration {
    /// The rules of `upstreamProviders` (called by `validate()`).
    func validateUpstreamProviders() throws(ConfigurationError) {
        func fail(_ field: String, _ rule: String, _ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: rule, message: message)
        }
        var names: Set<String> = []
        var uris: Set<String> = []
        for (i, provider) in upstreamProviders.enumerated() {
            let field = "upstreamProviders[\(i)]"
            if !Self.isUpstreamName(provider.name) {
                throw fail(
                    field + ".name", "pattern", "a provider's name matches [A-Za-z0-9][A-Za-z0-9._-]{0,39}, e.g. keycloak")
            }
            if UpstreamProviderConfiguration.reservedNames.contains(provider.name.lowercased()) {
                throw fail(field + ".name", "reserved", "'\(provider.name)' names another sign-in method; choose another name")
            }
            if !names.insert(provider.name.lowercased()).inserted {
                throw fail(
                    field + ".name", "unique",
                    "two providers are named '\(provider.name)'; give each its own name (the default is '\(UpstreamProviderConfiguration.defaultName)')"
                )
            }
            if case .failure(let problem) = ProviderURLCheck.check(provider.issuer, isIssuer: true) {
                throw fail(field + ".issuer", "url", problem.message)
            }
            if provider.issuer.contains("{") {
                throw fail(field + ".issuer", "url", "an issuer template ({tenantid}) is not supported here; name one tenant")
            }
            if provider.clientId.isEmpty || !provider.clientId.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) {
                throw fail(
                    field + ".clientId", "pattern", "a client id is printable ASCII without spaces, as the provider gave it")
            }
            if let secret = provider.clientSecret {
                // The value is never repeated in a message.
                if secret.isEmpty || !secret.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) {
                    throw fail(field + ".clientSecret", "pattern", "the client secret is empty or holds control characters")
                }
            }
            if !provider.scopes.contains("openid") {
                throw fail(
                    field + ".scopes", "openid", "the scopes must contain 'openid' (e.g. [\"openid\", \"email\", \"profile\"])")
            }
            for scope in provider.scopes
            where scope.isEmpty
                || !scope.unicodeScalars.allSatisfy({
                    $0.value == 0x21 || (0x23...0x5B).contains($0.value) || (0x5D...0x7E).contains($0.value)
                })
            {
                throw fail(field + ".scopes", "pattern", "'\(scope)' is not a scope (printable ASCII, no space, no \" or \\)")
            }
            for (key, url) in [
                ("authorizationEndpoint", provider.authorizationEndpoint), ("tokenEndpoint", provider.tokenEndpoint),
                ("userinfoEndpoint", provider.userinfoEndpoint), ("jwksUri", provider.jwksUri),
            ] {
                guard let url else { continue }
                if case .failure(let problem) = ProviderURLCheck.check(url, isIssuer: false) {
                    throw fail(field + "." + key, "url", problem.message)
                }
            }
            if let params = provider.authorizeParams {
                for pair in params.split(separator: "&") {
                    let name = pair.split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
                    if ClientConfigValidator.reservedAuthorizeParams.contains(name) {
                        throw fail(
                            field + ".authorizeParams", "reserved",
                            "'\(name)' is set by the server itself and cannot be given here")
                    }
                }
                if case .failure(let problem) = ClientConfigValidator.parseAuthorizeParams(params) {
                    throw fail(field + ".authorizeParams", "pairs", problem.message)
                }
            }
            if provider.redirectUris.isEmpty {
                throw fail(
                    field + ".redirectUris", "at-least-one",
                    "give the callback URL registered at the provider, e.g. \(exampleRedirectURI)")
            }
            for (j, uri) in provider.redirectUris.enumerated() {
                if let problem = redirectURIProblem(uri) {
                    throw fail("\(field).redirectUris[\(j)]", "callback", problem)
                }
                if !uris.insert(uri).inserted {
                    throw fail(
                        "\(field).redirectUris[\(j)]", "unique",
                        "'\(uri)' is listed twice; a redirect URI selects exactly one provider")
                }
            }
        }
    }

    static func isUpstreamName(_ name: String) -> Bool {
        let scalars = Array(name.unicodeScalars)
        guard (1...40).contains(scalars.count) else { return false }
        func allowed(_ c: Unicode.Scalar, first: Bool) -> Bool {
            guard c.isASCII else { return false }
            if c.properties.isAlphabetic || ("0"..."9").contains(c) { return true }
            return !first && "._-".unicodeScalars.contains(c)
        }
        return scalars.enumerated().allSatisfy { allowed($0.element, first: $0.offset == 0) }
    }

    /// The callback URL at the configured origin (an example for messages).
    var exampleRedirectURI: String {
        (publicOrigin ?? "http://\(listenAddress.contains(":") ? "[\(listenAddress)]" : listenAddress):\(port)") + basePath
            + "/browser/" + UpstreamProviderConfiguration.callbackRoute
    }

    /// Why `uri` cannot be one of this server's upstream callback URLs, or nil.
    func redirectURIProblem(_ uri: String) -> String? {
        guard let parts = URLParts(splitting: uri), let authority = parts.authority, !authority.isEmpty,
            parts.scheme == "http" || parts.scheme == "https"
        else { return "'\(uri)' is not an absolute http(s) URL such as \(exampleRedirectURI)" }
        if parts.query != nil || parts.fragment != nil || parts.hasUserinfo {
            return "a redirect URI has no query, fragment or userinfo"
        }
        let route = basePath + "/browser/" + UpstreamProviderConfiguration.callbackRoute
        let suffix = parts.path.hasPrefix(route) ? parts.path.dropFirst(route.count) : nil
        let segment = suffix.map { $0.hasPrefix("/") ? $0.dropFirst() : $0 }
        guard let suffix, let segment, suffix.isEmpty || !segment.isEmpty,
            segment.unicodeScalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._~-".unicodeScalars.contains($0))
            })
        else {
            return "the path must be \(route) or \(route)/NAME (NAME of letters, digits and ._~-), the server's callback route"
        }
        let given: Origin
        do { given = try Origin("\(parts.scheme)://\(authority)") } catch {
            return "the origin of '\(uri)' is not valid: \(error.message)"
        }
        if let publicOrigin {
            if let own = try? Origin(publicOrigin), own.serialized != given.serialized {
                return "the redirect URI's origin \(given.serialized) is not the server's public origin \(own.serialized)"
            }
        } else if parts.scheme != "http" || !Origin.isLoopbackHost(parts.host ?? "")
            || (port != 0 && given.serialized != (try? Origin("http://\(parts.host ?? ""):\(port)"))?.serialized)
        {
            return
                "without a publicOrigin the redirect URI is http://\(listenAddress):\(port)… (the listen address and port); set publicOrigin for any other"
        }
        return nil
    }
}

extension ServerConfiguration {
    /// `upstreamProviders` of the configuration file (docs/server.md). The
    /// client secret is read here, from `clientSecretFile` (relative to the
    /// file's folder; its first line) or the environment variable named by
    /// `clientSecretEnv`; a message never repeats it.
    static func loadUpstreamProviders(json data: Data, relativeTo directory: String?) throws(ConfigurationError)
        -> [UpstreamProviderConfiguration]
    {
        func fail(_ field: String, _ rule: String, _ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: rule, message: message)
        }
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let value = root["upstreamProviders"]
        else { return [] }
        guard let list = value as? [Any] else { throw fail("upstreamProviders", "type", "the value is a list of providers") }
        let known: Set<String> = [
            "name", "issuer", "clientId", "clientSecretFile", "clientSecretEnv", "scopes", "redirectUris",
            "authorizationEndpoint", "tokenEndpoint", "userinfoEndpoint", "jwksUri", "authorizeParams", "caFile",
            "$comment",
        ]
        var providers: [UpstreamProviderConfiguration] = []
        for (i, item) in list.enumerated() {
            let field = "upstreamProviders[\(i)]"
            guard let object = item as? [String: Any] else { throw fail(field, "type", "a provider is a JSON object") }
            for key in object.keys.sorted() where !known.contains(key) {
                throw fail(field + "." + key, "known-member", "'\(key)' is not a provider field")
            }
            func text(_ key: String) throws(ConfigurationError) -> String? {
                guard let value = object[key] else { return nil }
                guard let string = value as? String else { throw fail(field + "." + key, "type", "the value is a string") }
                return string
            }
            func required(_ key: String) throws(ConfigurationError) -> String {
                guard let value = try text(key) else { throw fail(field + "." + key, "required", "every provider has \(key)") }
                return value
            }
            func strings(_ key: String) throws(ConfigurationError) -> [String]? {
                guard let value = object[key] else { return nil }
                guard let array = value as? [Any], let strings = array as? [String] else {
                    throw fail(field + "." + key, "type", "the value is a list of strings")
                }
                return strings
            }
            var provider = UpstreamProviderConfiguration(
                name: try text("name") ?? UpstreamProviderConfiguration.defaultName, issuer: try required("issuer"),
                clientId: try required("clientId"), redirectUris: try strings("redirectUris") ?? [])
            if let scopes = try strings("scopes") { provider.scopes = scopes }
            provider.authorizationEndpoint = try text("authorizationEndpoint")
            provider.tokenEndpoint = try text("tokenEndpoint")
            provider.userinfoEndpoint = try text("userinfoEndpoint")
            provider.jwksUri = try text("jwksUri")
            provider.authorizeParams = try text("authorizeParams")
            provider.caFile = try text("caFile").map { resolve($0, directory) }
            let file = try text("clientSecretFile")
            let variable = try text("clientSecretEnv")
            if file != nil && variable != nil {
                throw fail(
                    field + ".clientSecretFile", "one-of", "give the secret by clientSecretFile or clientSecretEnv, not both")
            }
            if let file {
                let path = resolve(file, directory)
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw fail(field + ".clientSecretFile", "readable", "cannot read the client secret file \(path)")
                }
                let secret =
                    String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
                    .first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
                guard !secret.isEmpty else {
                    throw fail(field + ".clientSecretFile", "non-empty", "the client secret file \(path) is empty")
                }
                provider.clientSecret = secret
            }
            if let variable {
                guard let secret = ProcessInfo.processInfo.environment[variable], !secret.isEmpty else {
                    throw fail(
                        field + ".clientSecretEnv", "set",
                        "the environment variable \(variable) is not set (or empty) in the server's environment")
                }
                provider.clientSecret = secret
            }
            providers.append(provider)
        }
        return providers
    }
}
