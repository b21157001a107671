import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import LoginServer
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `upstreamProviders` of the server configuration (docs/server.md "Sign-in
/// with an upstream OpenID provider"): every rule names its field, secrets
/// come from a file or the environment and are never shown.
@Suite(.dedicatedThread) struct UpstreamConfigurationTests {
    static let client =
        #"{"clientId":"com.example.notes","appName":"Notes","returnUrls":["com.example.notes:/callback"],"policy":"confirm"}"#
    static let callback = "https://login.example.com/browser-login/browser/upstream/callback"

    /// A configuration with one provider whose members are `provider` (a JSON object's inside).
    static func file(_ provider: String, more: String = "") -> String {
        #"{"publicOrigin": "https://login.example.com", "database": "db.sqlite", "clients": [\#(client)], "upstreamProviders": [{\#(provider)}]\#(more)}"#
    }

    static let valid =
        #""issuer": "https://id.example.com/realms/main", "clientId": "login", "redirectUris": ["\#(callback)/kc"]"#

    func load(_ json: String, in directory: String) throws(ConfigurationError) -> ServerConfiguration {
        let configuration = try ServerConfiguration.load(json: Data(json.utf8), relativeTo: directory)
        try configuration.validate()
        return configuration
    }

    /// The documented example loads, with its secrets from the file next to
    /// it and from the environment; no description of it shows them.
    @Test func theDocumentedExampleLoadsAndNeverShowsItsSecrets() throws {
        let directory = try TemporaryDirectory()
        let example = try Data(contentsOf: URL(fileURLWithPath: repositoryRoot + "/examples/server-upstream.json"))
        try Data("kc-secret-value\n".utf8).write(to: URL(fileURLWithPath: directory.path + "/keycloak-client-secret"))
        setenv("GOOGLE_CLIENT_SECRET", "google-secret-value", 1)
        defer { unsetenv("GOOGLE_CLIENT_SECRET") }
        let configuration = try ServerConfiguration.load(json: example, relativeTo: directory.path)
        try configuration.validate()
        let providers = configuration.upstreamProviders
        #expect(providers.map(\.name) == ["Keycloak", "Google"])
        #expect(providers.map(\.clientSecret) == ["kc-secret-value", "google-secret-value"])
        #expect(providers[0].scopes == ["openid", "email", "profile"])
        #expect(providers[1].authorizeParams == "prompt=select_account")
        for shown in ["\(providers)", String(reflecting: providers), "\(configuration)"] {
            #expect(!shown.contains("kc-secret-value") && !shown.contains("google-secret-value"), "\(shown)")
        }
    }

    @Test func aProviderWithoutANameIsOIDC() throws {
        let directory = try TemporaryDirectory()
        let configuration = try load(Self.file(Self.valid), in: directory.path)
        #expect(configuration.upstreamProviders.map(\.name) == ["oidc"])
        #expect(configuration.upstreamProviders[0].clientSecret == nil)
    }

    static let cases: [(String, String, String)] = [
        (#""name": "email", \#(valid)"#, "upstreamProviders[0].name", "reserved"),
        (#""name": "two words", \#(valid)"#, "upstreamProviders[0].name", "pattern"),
        (#""name": "-dash", \#(valid)"#, "upstreamProviders[0].name", "pattern"),
        (
            #""issuer": "http://id.example.com", "clientId": "c", "redirectUris": ["\#(callback)"]"#,
            "upstreamProviders[0].issuer", "url"
        ),
        (
            #""issuer": "https://login.microsoftonline.com/{tenantid}/v2.0", "clientId": "c", "redirectUris": ["\#(callback)"]"#,
            "upstreamProviders[0].issuer", "url"
        ),
        (
            #""issuer": "https://id.example.com/?q", "clientId": "c", "redirectUris": ["\#(callback)"]"#,
            "upstreamProviders[0].issuer", "url"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "", "redirectUris": ["\#(callback)"]"#,
            "upstreamProviders[0].clientId", "pattern"
        ),
        (#"\#(valid), "scopes": ["email"]"#, "upstreamProviders[0].scopes", "openid"),
        (#"\#(valid), "scopes": ["openid", "two words"]"#, "upstreamProviders[0].scopes", "pattern"),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": []"#, "upstreamProviders[0].redirectUris",
            "at-least-one"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["https://login.example.com/browser-login/callback"]"#,
            "upstreamProviders[0].redirectUris[0]", "callback"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["\#(callback)/"]"#,
            "upstreamProviders[0].redirectUris[0]", "callback"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["\#(callback)/a/b"]"#,
            "upstreamProviders[0].redirectUris[0]", "callback"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["\#(callback)?x=1"]"#,
            "upstreamProviders[0].redirectUris[0]", "callback"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["https://other.example.com/browser-login/browser/upstream/callback"]"#,
            "upstreamProviders[0].redirectUris[0]", "callback"
        ),
        (
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["\#(callback)", "\#(callback)"]"#,
            "upstreamProviders[0].redirectUris[1]", "unique"
        ),
        (#"\#(valid), "authorizeParams": "state=mine""#, "upstreamProviders[0].authorizeParams", "reserved"),
        (#"\#(valid), "authorizeParams": "prompt""#, "upstreamProviders[0].authorizeParams", "pairs"),
        (#"\#(valid), "tokenEndpoint": "http://id.example.com/token""#, "upstreamProviders[0].tokenEndpoint", "url"),
        (#"\#(valid), "extra": 1"#, "upstreamProviders[0].extra", "known-member"),
        (#""clientId": "c", "redirectUris": ["\#(callback)"]"#, "upstreamProviders[0].issuer", "required"),
        (#"\#(valid), "scopes": "openid""#, "upstreamProviders[0].scopes", "type"),
        (#"\#(valid), "clientSecretFile": "missing-file""#, "upstreamProviders[0].clientSecretFile", "readable"),
        (#"\#(valid), "clientSecretEnv": "BL_UPSTREAM_TEST_UNSET""#, "upstreamProviders[0].clientSecretEnv", "set"),
        (#"\#(valid), "clientSecretFile": "f", "clientSecretEnv": "E""#, "upstreamProviders[0].clientSecretFile", "one-of"),
    ]

    @Test func everyRuleNamesTheFieldAndTheRule() throws {
        let directory = try TemporaryDirectory()
        for (provider, field, rule) in Self.cases {
            do {
                _ = try load(Self.file(provider), in: directory.path)
                Issue.record("accepted: \(provider)")
            } catch {
                #expect(error.field == field && error.rule == rule, "\(provider): \(error)")
            }
        }
        // Across providers: names (case aside) and redirect URIs are unique.
        let twice = Self.file(
            #"\#(Self.valid), "name": "kc"}, {"issuer": "https://id.example.com", "clientId": "c", "name": "KC", "redirectUris": ["\#(Self.callback)"]"#
        )
        do {
            _ = try load(twice, in: directory.path)
            Issue.record("two providers named kc and KC were accepted")
        } catch {
            #expect(error.field == "upstreamProviders[1].name" && error.rule == "unique", "\(error)")
        }
        let shared = Self.file(
            #"\#(Self.valid), "name": "a"}, {"issuer": "https://id.example.com", "clientId": "c", "name": "b", "redirectUris": ["\#(Self.callback)/kc"]"#
        )
        do {
            _ = try load(shared, in: directory.path)
            Issue.record("two providers sharing a redirect URI were accepted")
        } catch {
            #expect(error.field == "upstreamProviders[1].redirectUris[0]" && error.rule == "unique", "\(error)")
        }
    }

    /// Without a public origin the redirect URI is on the listen address and port.
    @Test func withoutAPublicOriginTheRedirectURIIsTheListenAddress() throws {
        var configuration = ServerConfiguration()
        configuration.port = 8080
        configuration.databasePath = "/tmp/unused.sqlite"
        configuration.clients = [
            ClientRegistration(
                clientId: "a", appName: "A", returnUrls: [try ReturnURL("com.example.notes:/callback")], policy: .confirm)
        ]
        configuration.upstreamProviders = [
            UpstreamProviderConfiguration(
                issuer: "https://id.example.com", clientId: "c",
                redirectUris: ["http://127.0.0.1:8080/browser-login/browser/upstream/callback"])
        ]
        try configuration.validate()
        configuration.upstreamProviders[0].redirectUris = ["http://127.0.0.1:9090/browser-login/browser/upstream/callback"]
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }

    /// The binary refuses it before listening, exit status 78, the field named (docs/server.md).
    @Test func theServerRefusesAnInvalidProviderAtStart() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/server.json"
        let json = Self.file(
            #""issuer": "https://id.example.com", "clientId": "c", "redirectUris": ["https://login.example.com/browser-login/callback"]"#,
            more: #", "port": 0"#)
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        let run = try ServerBinary.run(["--config", path])
        #expect(run.status == 78, "\(run.err)")
        #expect(
            run.err.contains(
                "invalid configuration: upstreamProviders[0].redirectUris[0]: callback: the path must be /browser-login/browser/upstream/callback or /browser-login/browser/upstream/callback/NAME"
            ), "\(run.err)")
    }
}
