import BrokerSystem
import BrowserLoginProtocol
import Foundation
import Testing

@testable import BrokerCore

/// The client-file keys of OAuth 2.0 / OpenID Connect clients (docs/providers.md).
@Suite struct ProviderConfigTests {
    static let valid: [String: String] = [
        "Id": "com.example.chat", "AppName": "Example Chat", "Protocol": "oidc",
        "Issuer": "https://id.example.com/realms/main", "ClientId": "chat-desktop",
        "Scopes": "openid email profile offline_access", "ReturnUrl": "http://127.0.0.1/callback",
        "ApiOrigin": "https://api.example.com",
    ]

    func with(_ changes: [String: String?]) -> [String: String] {
        var keys = Self.valid
        for (k, v) in changes { keys[k] = v }
        return keys
    }

    func validate(_ changes: [String: String?], file: String = "chat.conf") -> (ClientConfig?, [ConfigProblem]) {
        ClientConfigValidator.validate(file: file, keys: with(changes))
    }

    @Test func acceptsAnOIDCClientWithALoopbackRedirect() throws {
        let (config, problems) = validate([:])
        #expect(problems.isEmpty)
        let c = try #require(config)
        let p = try #require(c.provider)
        #expect(c.kind == .oidc)
        #expect(p.issuer == "https://id.example.com/realms/main")
        #expect(c.issuer == p.issuer)
        #expect(c.server.serialized == "https://id.example.com")
        #expect(p.clientId == "chat-desktop")
        #expect(p.clientSecret == nil)
        #expect(p.scopes == ["openid", "email", "profile", "offline_access"])
        #expect(p.revocationAuth == .client)
        #expect(p.flow == .browser)
        #expect(p.endpoints == ProviderEndpoints())
        #expect(c.returnURL == nil)
        #expect(c.loopback == LoopbackRedirect(host: .ipv4, port: nil, path: "/callback"))
        #expect(c.redirectText == "http://127.0.0.1/callback")
        #expect(c.apiOrigin.serialized == "https://api.example.com")
    }

    @Test(arguments: [
        ("http://127.0.0.1/callback", LoopbackRedirect(host: .ipv4, port: nil, path: "/callback")),
        ("http://127.0.0.1:8765/cb", LoopbackRedirect(host: .ipv4, port: 8765, path: "/cb")),
        ("http://[::1]/oauth/done", LoopbackRedirect(host: .ipv6, port: nil, path: "/oauth/done")),
        ("http://[::1]:65535/", LoopbackRedirect(host: .ipv6, port: 65535, path: "/")),
    ])
    func acceptsLoopbackRedirects(_ text: String, _ expected: LoopbackRedirect) throws {
        let (config, problems) = validate(["ReturnUrl": text])
        #expect(problems.isEmpty)
        #expect(try #require(config).loopback == expected)
        #expect(expected.configured == text)
    }

    @Test func acceptsAPrivateUseSchemeForAProviderClient() throws {
        let (config, problems) = validate(["ReturnUrl": "com.example.chat:/oauth/callback"])
        #expect(problems.isEmpty)
        let c = try #require(config)
        #expect(c.loopback == nil)
        #expect(c.returnURL?.text == "com.example.chat:/oauth/callback")
    }

    @Test func acceptsAnOAuth2ClientWithEndpointKeys() throws {
        let (config, problems) = validate([
            "Protocol": "oauth2", "Issuer": "https://github.com", "Scopes": "read:user user:email",
            "AuthorizationEndpoint": "https://github.com/login/oauth/authorize",
            "TokenEndpoint": "https://github.com/login/oauth/access_token",
            "DeviceAuthorizationEndpoint": "https://github.com/login/device/code",
            "UserinfoEndpoint": "https://api.github.com/user", "RevocationEndpoint": "http://127.0.0.1:9000/revoke",
            "RevocationAuth": "bearer", "Flow": "device", "DPoP": "yes", "PAR": "no",
        ])
        #expect(problems.isEmpty)
        let p = try #require(config?.provider)
        #expect(p.kind == .oauth2)
        #expect(p.scopes == ["read:user", "user:email"])
        #expect(p.endpoints.authorization == "https://github.com/login/oauth/authorize")
        #expect(p.endpoints.token == "https://github.com/login/oauth/access_token")
        #expect(p.endpoints.deviceAuthorization == "https://github.com/login/device/code")
        #expect(p.endpoints.userinfo == "https://api.github.com/user")
        #expect(p.endpoints.revocation == "http://127.0.0.1:9000/revoke")
        #expect(p.revocationAuth == .bearer)
        #expect(p.flow == .device)
        #expect(p.dpop == .yes && p.par == .no)
        let (plain, _) = validate(["Protocol": "oauth2", "Scopes": nil])
        #expect(plain?.provider?.dpop == .auto && plain?.provider?.par == .auto, "auto by default")
    }

    @Test func anOAuth2ClientNeedsNoScopes() throws {
        let (config, problems) = validate(["Protocol": "oauth2", "Scopes": nil])
        #expect(problems.isEmpty)
        #expect(try #require(config?.provider).scopes.isEmpty)
    }

    @Test(arguments: ["https://login.microsoftonline.com/{tenantid}/v2.0", "http://127.0.0.1:8080/realms/x", "http://[::1]/x"])
    func acceptsIssuers(_ issuer: String) throws {
        let (config, problems) = validate(["Issuer": issuer])
        #expect(problems.isEmpty)
        let c = try #require(config)
        #expect(c.issuer == issuer)
        #expect(c.provider?.issuerIsTemplate == issuer.contains("{tenantid}"))
    }

    @Test func serverAndBasePathAreNotUsedAndSaySo() throws {
        let (config, problems) = validate(["Server": "https://login.example.com", "BasePath": "/x"])
        let c = try #require(config)
        #expect(c.server.serialized == "https://id.example.com")
        #expect(problems.count == 2)
        #expect(problems.allSatisfy { $0.severity == .warning && $0.message.contains("not used") })
        #expect(Set(problems.compactMap(\.key)) == ["Server", "BasePath"])
    }

    @Test func authorizeParamsArePercentDecodedInOrder() throws {
        let (config, problems) = validate(["AuthorizeParams": "prompt=select_account&login_hint=a%40b.example&hd="])
        #expect(problems.isEmpty)
        let params = try #require(config?.provider).authorizeParams
        #expect(params.map(\.name) == ["prompt", "login_hint", "hd"])
        #expect(params.map(\.value) == ["select_account", "a@b.example", ""])
    }

    @Test(arguments: ClientConfigValidator.reservedAuthorizeParams.sorted())
    func authorizeParamsMayNotSetWhatTheBrokerSets(_ name: String) {
        let (config, problems) = validate(["AuthorizeParams": "prompt=login&\(name)=x"])
        #expect(config == nil)
        #expect(problems.contains { $0.key == "AuthorizeParams" && $0.message.contains("'\(name)'") })
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let changes: [String: String?]
        let key: String
        var says: String = ""
        var testDescription: String { name }
    }

    static let refusals: [Case] = [
        Case(name: "unknown protocol", changes: ["Protocol": "saml"], key: "Protocol"),
        Case(name: "missing Issuer", changes: ["Issuer": nil], key: "Issuer"),
        Case(name: "missing ClientId", changes: ["ClientId": nil], key: "ClientId"),
        Case(name: "ClientId with a space", changes: ["ClientId": "a b"], key: "ClientId"),
        Case(name: "missing ApiOrigin", changes: ["ApiOrigin": nil], key: "ApiOrigin", says: "not the app's API"),
        Case(name: "oidc without openid", changes: ["Scopes": "email profile"], key: "Scopes", says: "openid"),
        Case(name: "oidc without scopes", changes: ["Scopes": nil], key: "Scopes", says: "openid"),
        Case(name: "scope with a quote", changes: ["Scopes": "openid a\"b"], key: "Scopes"),
        Case(name: "http issuer off loopback", changes: ["Issuer": "http://id.example.com"], key: "Issuer"),
        Case(name: "issuer on localhost", changes: ["Issuer": "http://localhost:8080/x"], key: "Issuer", says: "localhost"),
        Case(name: "issuer with a query", changes: ["Issuer": "https://id.example.com/?x=1"], key: "Issuer"),
        Case(name: "issuer with a fragment", changes: ["Issuer": "https://id.example.com/#x"], key: "Issuer"),
        Case(name: "issuer with userinfo", changes: ["Issuer": "https://u@id.example.com"], key: "Issuer"),
        Case(name: "relative issuer", changes: ["Issuer": "id.example.com/realms/x"], key: "Issuer"),
        Case(name: "issuer on ftp", changes: ["Issuer": "ftp://id.example.com"], key: "Issuer"),
        Case(name: "tenant in the host", changes: ["Issuer": "https://{tenantid}.example.com/v2"], key: "Issuer"),
        Case(name: "other template", changes: ["Issuer": "https://id.example.com/{realm}"], key: "Issuer"),
        Case(name: "upper-case issuer host", changes: ["Issuer": "https://ID.example.com"], key: "Issuer"),
        Case(
            name: "http token endpoint", changes: ["TokenEndpoint": "http://id.example.com/token"], key: "TokenEndpoint"),
        Case(
            name: "authorization endpoint on localhost",
            changes: ["AuthorizationEndpoint": "http://localhost/auth"], key: "AuthorizationEndpoint"),
        Case(
            name: "revocation endpoint with a fragment",
            changes: ["RevocationEndpoint": "https://id.example.com/revoke#x"], key: "RevocationEndpoint"),
        Case(name: "relative userinfo endpoint", changes: ["UserinfoEndpoint": "/userinfo"], key: "UserinfoEndpoint"),
        Case(
            name: "device endpoint with spaces", changes: ["DeviceAuthorizationEndpoint": "https://x.example/a b"],
            key: "DeviceAuthorizationEndpoint"),
        Case(name: "authorize param without =", changes: ["AuthorizeParams": "prompt"], key: "AuthorizeParams"),
        Case(name: "authorize param bad escape", changes: ["AuthorizeParams": "a=%zz"], key: "AuthorizeParams"),
        Case(name: "authorize param empty name", changes: ["AuthorizeParams": "=x"], key: "AuthorizeParams"),
        Case(name: "authorize param twice", changes: ["AuthorizeParams": "a=1&a=2"], key: "AuthorizeParams"),
        Case(
            name: "authorize param encoded reserved", changes: ["AuthorizeParams": "sco%70e=x"], key: "AuthorizeParams"),
        Case(name: "bad RevocationAuth", changes: ["RevocationAuth": "basic"], key: "RevocationAuth"),
        Case(name: "bad Flow", changes: ["Flow": "implicit"], key: "Flow"),
        Case(name: "bad DPoP", changes: ["DPoP": "maybe"], key: "DPoP"),
        Case(name: "bad PAR", changes: ["PAR": "true"], key: "PAR"),
        Case(
            name: "localhost redirect", changes: ["ReturnUrl": "http://localhost/callback"], key: "ReturnUrl",
            says: "RFC 8252 §8.3"),
        Case(
            name: "localhost redirect with port", changes: ["ReturnUrl": "http://localhost:8080/cb"], key: "ReturnUrl",
            says: "RFC 8252 §8.3"),
        Case(name: "loopback with a query", changes: ["ReturnUrl": "http://127.0.0.1/cb?x=1"], key: "ReturnUrl"),
        Case(name: "loopback with a fragment", changes: ["ReturnUrl": "http://127.0.0.1/cb#x"], key: "ReturnUrl"),
        Case(name: "loopback without a path", changes: ["ReturnUrl": "http://127.0.0.1"], key: "ReturnUrl"),
        Case(name: "loopback dot segment", changes: ["ReturnUrl": "http://127.0.0.1/a/../cb"], key: "ReturnUrl"),
        Case(name: "loopback empty segment", changes: ["ReturnUrl": "http://127.0.0.1/a//cb"], key: "ReturnUrl"),
        Case(name: "loopback double slash", changes: ["ReturnUrl": "http://127.0.0.1//cb"], key: "ReturnUrl"),
        Case(name: "loopback port 0", changes: ["ReturnUrl": "http://127.0.0.1:0/cb"], key: "ReturnUrl"),
        Case(name: "loopback port too big", changes: ["ReturnUrl": "http://127.0.0.1:70000/cb"], key: "ReturnUrl"),
        Case(name: "loopback empty port", changes: ["ReturnUrl": "http://127.0.0.1:/cb"], key: "ReturnUrl"),
        Case(name: "loopback with userinfo", changes: ["ReturnUrl": "http://a@127.0.0.1/cb"], key: "ReturnUrl"),
        Case(name: "other loopback address", changes: ["ReturnUrl": "http://127.0.0.2/cb"], key: "ReturnUrl"),
        Case(name: "http off loopback", changes: ["ReturnUrl": "http://192.168.1.2/cb"], key: "ReturnUrl"),
        Case(name: "upper-case HTTP", changes: ["ReturnUrl": "HTTP://127.0.0.1/cb"], key: "ReturnUrl"),
        Case(name: "https return URL", changes: ["ReturnUrl": "https://app.example.com/cb"], key: "ReturnUrl"),
        // (A Browser Login client may return over loopback too: ReturnUrlsConfigTests.)
        Case(
            name: "two return URLs for a provider client",
            changes: ["ReturnUrls": "com.example.chat:/cb;http://127.0.0.1/callback", "ReturnUrl": nil],
            key: "ReturnUrls", says: "one return URL"),
    ]

    @Test(arguments: refusals)
    func refusesAndNamesTheFileAndTheKey(_ c: Case) {
        let (config, problems) = validate(c.changes)
        #expect(config == nil)
        #expect(
            problems.contains {
                $0.severity == .error && $0.key == c.key && $0.file == "chat.conf"
                    && (c.says.isEmpty || $0.message.contains(c.says))
            }, "\(problems)")
    }

    @Test func aBrowserLoginClientIgnoresProviderKeysWithAWarning() throws {
        let (config, problems) = ClientConfigValidator.validate(
            file: "notes.conf",
            keys: [
                "Id": "com.example.notes", "AppName": "Notes", "Server": "https://login.example.com",
                "ReturnUrl": "com.example.notes:/callback", "Issuer": "https://id.example.com", "Flow": "device",
            ])
        let c = try #require(config)
        #expect(c.kind == .browserLogin)
        #expect(c.provider == nil)
        #expect(c.issuer == "https://login.example.com")
        #expect(Set(problems.map(\.key)) == ["Flow", "Issuer"])
        #expect(problems.allSatisfy { $0.severity == .warning })
    }

    @Test func aLoopbackRedirectNeedsNoURLHandler() throws {
        let (config, problems) = validate(["InstallHandler": "true"])
        #expect(try #require(config).installHandler == false)
        #expect(problems.map(\.key) == ["InstallHandler"])
        let (custom, none) = validate(["InstallHandler": "true", "ReturnUrl": "com.example.chat:/cb"])
        #expect(try #require(custom).installHandler)
        #expect(none.isEmpty)
    }

    @Test func theClientSecretIsKeptWithAWarningAndNeverShown() throws {
        let secret = "GOCSPX-do-not-print-me"
        let (config, problems) = validate(["ClientSecret": secret])
        let c = try #require(config)
        #expect(c.provider?.clientSecret == secret)
        let warning = try #require(problems.first { $0.key == "ClientSecret" })
        #expect(warning.severity == .warning)
        #expect(warning.message.contains("not secret"))
        var dumped = ""
        dump(c, to: &dumped)
        var dumpedProvider = ""
        dump(c.provider, to: &dumpedProvider)
        let renderings =
            [
                "\(c)", String(describing: c), String(reflecting: c), "\(c.provider!)", String(reflecting: c.provider!),
                dumped, dumpedProvider,
            ] + problems.map(\.description)
        for text in renderings {
            #expect(!text.contains(secret), "\(text)")
        }
        #expect(String(describing: c.provider!).contains("clientSecret: set"))
    }

    @Test func aBadClientSecretIsRefusedWithoutRepeatingIt() {
        let (config, problems) = validate(["ClientSecret": "abc\u{1}def"])
        #expect(config == nil)
        #expect(problems.contains { $0.key == "ClientSecret" && $0.severity == .error })
        #expect(problems.allSatisfy { !$0.description.contains("abc") })
    }

    @Test func everyProviderKeyIsKnown() {
        for key in ClientConfigValidator.providerKeys + ["Protocol"] {
            #expect(ClientConfigValidator.knownKeys.contains(key))
        }
        let (_, problems) = validate([
            "ClientSecret": "x", "AuthorizationEndpoint": "https://a.example/a", "TokenEndpoint": "https://a.example/t",
            "RevocationEndpoint": "https://a.example/r", "UserinfoEndpoint": "https://a.example/u",
            "DeviceAuthorizationEndpoint": "https://a.example/d", "AuthorizeParams": "a=b", "RevocationAuth": "client",
            "Flow": "browser",
        ])
        #expect(!problems.contains { $0.message.contains("unknown key") })
    }

    // MARK: - Clients together

    func client(_ file: String, _ id: String, _ returnUrl: String) throws -> ClientConfig {
        try #require(validate(["Id": id, "ReturnUrl": returnUrl], file: file).0)
    }

    @Test func loopbackClientsWithEphemeralPortsMayShareAPath() throws {
        let a = try client("a.conf", "com.example.a", "http://127.0.0.1/callback")
        let b = try client("b.conf", "com.example.b", "http://127.0.0.1/callback")
        let c = try client("c.conf", "com.example.c", "http://127.0.0.1:8000/callback")
        let (kept, problems) = ClientConfigValidator.checkTogether([a, b, c])
        #expect(problems.isEmpty)
        #expect(kept.map(\.id) == ["com.example.a", "com.example.b", "com.example.c"])
    }

    @Test func aFixedLoopbackPortBelongsToOneClient() throws {
        let a = try client("a.conf", "com.example.a", "http://127.0.0.1:8000/one")
        let b = try client("b.conf", "com.example.b", "http://127.0.0.1:8000/two")
        let c = try client("c.conf", "com.example.c", "http://[::1]:8000/one")
        let d = try client("d.conf", "com.example.d", "http://127.0.0.1:8001/one")
        let (kept, problems) = ClientConfigValidator.checkTogether([a, b, c, d])
        #expect(kept.map(\.id) == ["com.example.c", "com.example.d"])
        #expect(problems.contains { $0.file == "a.conf" && $0.key == "ReturnUrl" && $0.message.contains("b.conf") })
        #expect(problems.contains { $0.file == "b.conf" && $0.key == "ReturnUrl" && $0.message.contains("a.conf") })
    }

    @Test func providerClientsMayNotShareAPrivateUseReturnURL() throws {
        let a = try client("a.conf", "com.example.a", "com.example.chat:/cb")
        let b = try client("b.conf", "com.example.b", "com.example.chat:/cb")
        let (kept, problems) = ClientConfigValidator.checkTogether([a, b])
        #expect(kept.isEmpty)
        #expect(problems.count == 2)
    }

    // MARK: - The documented client files

    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples/clients").path

    /// docs/providers.md's client files, read with GKeyFile as the daemon reads them: every one valid, with no error.
    @Test func theDocumentedClientFilesAreValid() throws {
        let loaded = ClientFiles.load(directories: [Self.examples])
        #expect(loaded.files.count == 7)
        #expect(!loaded.problems.contains { $0.severity == .error }, "\(loaded.problems)")
        #expect(loaded.clients.count == loaded.files.count)
        let names = Set(loaded.files.map { ($0 as NSString).lastPathComponent })
        #expect(
            names == [
                "keycloak.conf", "authentik.conf", "entra.conf", "google.conf", "gitlab.conf", "github.conf",
                "django-oauth-toolkit.conf",
            ])
        for client in loaded.clients {
            #expect(client.kind != .browserLogin)
            #expect(client.loopback != nil || client.returnURL != nil)
        }
        // The only warning: Google's client secret, which is not secret.
        #expect(loaded.problems.map(\.key) == ["ClientSecret"])
        let github = try #require(loaded.clients.first { $0.file.hasSuffix("/github.conf") })
        #expect(github.kind == .oauth2 && github.provider?.flow == .device)
        #expect(github.provider?.endpoints.revocation == nil)
        let entra = try #require(loaded.clients.first { $0.file.hasSuffix("/entra.conf") })
        #expect(entra.provider?.issuerIsTemplate == true)
    }

    /// docs/providers.md shows each file as it is (without its comment lines).
    @Test func providersMdShowsTheTestedFiles() throws {
        let docs = URL(fileURLWithPath: Self.examples).deletingLastPathComponent().deletingLastPathComponent()
        let page = try String(contentsOf: docs.appendingPathComponent("providers.md"), encoding: .utf8)
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.examples).filter { $0.hasSuffix(".conf") }
        #expect(!files.isEmpty)
        for name in files {
            let text = try String(contentsOfFile: Self.examples + "/" + name, encoding: .utf8)
            let body = text.split(separator: "\n").filter { !$0.hasPrefix("#") }.joined(separator: "\n")
            #expect(page.contains("```ini\n" + body + "\n```"), "\(name)")
        }
    }
}
