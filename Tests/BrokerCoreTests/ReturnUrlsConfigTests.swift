import BrowserLoginProtocol
import Testing

@testable import BrokerCore
@testable import BrokerSystem

/// A Browser Login client's return URLs (docs/configuration.md): a custom scheme, a loopback redirect, or
/// both — in `ReturnUrls=`, or `ReturnUrl=` given twice.
@Suite struct ReturnUrlsConfigTests {
    static let base: [String: String] = [
        "Id": "com.example.notes", "AppName": "Example Notes", "Server": "https://login.example.com",
    ]

    func validate(_ changes: [String: String]) -> (ClientConfig?, [ConfigProblem]) {
        ClientConfigValidator.validate(file: "notes.conf", keys: Self.base.merging(changes) { $1 })
    }

    @Test func aLoopbackReturnURLAloneIsABrowserLoginClient() throws {
        let (config, problems) = validate(["ReturnUrl": "http://127.0.0.1/callback"])
        #expect(problems.isEmpty, "\(problems)")
        let c = try #require(config)
        #expect(c.returnURL == nil)
        #expect(c.loopback == LoopbackRedirect(host: .ipv4, port: nil, path: "/callback"))
        #expect(c.kind == .browserLogin)
    }

    @Test(arguments: ["com.example.notes:/callback;http://[::1]/callback", "http://[::1]/callback ; com.example.notes:/callback"])
    func bothInReturnUrls(_ list: String) throws {
        let (config, problems) = validate(["ReturnUrls": list])
        #expect(problems.isEmpty, "\(problems)")
        let c = try #require(config)
        #expect(c.returnURL?.text == "com.example.notes:/callback")
        #expect(c.loopback == LoopbackRedirect(host: .ipv6, port: nil, path: "/callback"))
        #expect(c.redirectText == "com.example.notes:/callback")
    }

    @Test func returnUrlGivenTwiceInAFileListsBoth() throws {
        let text = """
            [Client]
            Id=com.example.notes
            AppName=Example Notes
            Server=https://login.example.com
            ReturnUrl=com.example.notes:/callback
            ReturnUrl = http://127.0.0.1/callback

            """
        let (config, problems) = ClientFiles.parse(contents: Array(text.utf8), file: "notes.conf")
        #expect(problems.isEmpty, "\(problems)")
        let c = try #require(config)
        #expect(c.returnURL?.text == "com.example.notes:/callback")
        #expect(c.loopback?.path == "/callback")
    }

    @Test(arguments: [
        (["ReturnUrls": "com.example.notes:/a;com.example.notes:/b"], "ReturnUrls"),
        (["ReturnUrls": "http://127.0.0.1/a;http://[::1]/b"], "ReturnUrls"),
        (["ReturnUrls": "com.example.notes:/a;http://127.0.0.1/a;http://127.0.0.1/b"], "ReturnUrls"),
        (["ReturnUrl": "com.example.notes:/a", "ReturnUrls": "http://127.0.0.1/a"], "ReturnUrls"),
        (["ReturnUrls": "http://localhost/cb"], "ReturnUrls"),
        (["ReturnUrls": "http://127.0.0.2/cb"], "ReturnUrls"),
        (["ReturnUrls": "http://user@127.0.0.1/cb"], "ReturnUrls"),
        (["ReturnUrls": "http://127.0.0.1/cb?x=1"], "ReturnUrls"),
        (["ReturnUrls": "http://127.0.0.1/a/../cb"], "ReturnUrls"),
        (["ReturnUrls": "https://app.example.com/cb;http://127.0.0.1/cb"], "ReturnUrls"),
        (["ReturnUrls": " ; "], "ReturnUrl"),
    ])
    func refused(_ changes: [String: String], _ key: String) {
        let (config, problems) = validate(changes)
        #expect(config == nil)
        #expect(problems.contains { $0.severity == .error && $0.key == key }, "\(problems)")
    }

    @Test func aProviderClientHasOneReturnURL() {
        let keys = [
            "Id": "p", "AppName": "P", "Protocol": "oidc", "Issuer": "https://id.example.com", "ClientId": "c",
            "Scopes": "openid", "ApiOrigin": "https://api.example.com",
            "ReturnUrls": "com.example.p:/cb;http://127.0.0.1/cb",
        ]
        let (config, problems) = ClientConfigValidator.validate(file: "p.conf", keys: keys)
        #expect(config == nil)
        #expect(problems.contains { $0.key == "ReturnUrls" && $0.message.contains("one return URL") }, "\(problems)")
    }

    @Test func installHandlerIsKeptWhenThereIsAScheme() throws {
        let (config, _) = validate([
            "ReturnUrls": "com.example.notes:/callback;http://127.0.0.1/callback", "InstallHandler": "true",
        ])
        #expect(try #require(config).installHandler)
        let (loopbackOnly, problems) = validate(["ReturnUrl": "http://127.0.0.1/callback", "InstallHandler": "true"])
        #expect(try #require(loopbackOnly).installHandler == false)
        #expect(problems.contains { $0.severity == .warning && $0.key == "InstallHandler" })
    }
}
