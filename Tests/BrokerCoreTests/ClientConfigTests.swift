import BrowserLoginProtocol
import Testing

@testable import BrokerCore

@Suite struct ClientConfigTests {
    static let valid: [String: String] = [
        "Id": "com.example.notes", "AppName": "Example Notes", "Server": "https://login.example.com",
        "ReturnUrl": "com.example.notes:/callback",
    ]

    func with(_ changes: [String: String?]) -> [String: String] {
        var keys = Self.valid
        for (k, v) in changes { keys[k] = v }
        return keys
    }

    @Test func acceptsAMinimalFileWithDefaults() throws {
        let (config, problems) = ClientConfigValidator.validate(file: "notes.conf", keys: Self.valid)
        #expect(problems.isEmpty)
        let c = try #require(config)
        #expect(c.basePath == "/browser-login")
        #expect(c.policy == .confirm)
        #expect(c.apiOrigin == c.server)
        #expect(c.base == "https://login.example.com/browser-login")
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let changes: [String: String?]
        let key: String
        var testDescription: String { name }
    }

    static let refusals: [Case] = [
        Case(name: "missing Id", changes: ["Id": nil], key: "Id"),
        Case(name: "bad Id", changes: ["Id": "has space"], key: "Id"),
        Case(name: "long AppName", changes: ["AppName": String(repeating: "a", count: 81)], key: "AppName"),
        Case(name: "http server off loopback", changes: ["Server": "http://login.example.com"], key: "Server"),
        Case(name: "server with path", changes: ["Server": "https://login.example.com/x"], key: "Server"),
        Case(name: "https return URL", changes: ["ReturnUrl": "https://app.example.com/cb"], key: "ReturnUrl"),
        Case(name: "return URL with query", changes: ["ReturnUrl": "com.example.notes:/cb?x=1"], key: "ReturnUrl"),
        Case(name: "forbidden scheme", changes: ["ReturnUrl": "javascript:/alert"], key: "ReturnUrl"),
        Case(name: "bad policy", changes: ["Policy": "silent"], key: "Policy"),
        Case(name: "bad base path", changes: ["BasePath": "/a//b"], key: "BasePath"),
        Case(name: "relative CA file", changes: ["CAFile": "ca.pem"], key: "CAFile"),
        Case(name: "browser without %u", changes: ["Browser": "firefox"], key: "Browser"),
        Case(name: "bad peer", changes: ["Peers": "notnotes"], key: "Peers"),
        Case(name: "bad InstallHandler", changes: ["InstallHandler": "yes"], key: "InstallHandler"),
        Case(name: "http API origin off loopback", changes: ["ApiOrigin": "http://api.example.com"], key: "ApiOrigin"),
    ]

    @Test(arguments: refusals)
    func refusesAndNamesTheKey(_ c: Case) {
        let (config, problems) = ClientConfigValidator.validate(file: "notes.conf", keys: with(c.changes))
        #expect(config == nil)
        #expect(problems.contains { $0.severity == .error && $0.key == c.key && $0.file == "notes.conf" })
    }

    @Test func loopbackHTTPServerIsAllowed() throws {
        let (config, _) = ClientConfigValidator.validate(file: "a.conf", keys: with(["Server": "http://127.0.0.1:8080"]))
        #expect(try #require(config).server.serialized == "http://127.0.0.1:8080")
    }

    @Test func unknownKeysWarn() {
        let (config, problems) = ClientConfigValidator.validate(file: "a.conf", keys: with(["Colour": "blue"]))
        #expect(config != nil)
        #expect(problems == [ConfigProblem(.warning, file: "a.conf", key: "Colour", "unknown key, ignored")])
    }

    @Test func twoClientsWithOneReturnURLAreBothRefused() throws {
        let a = try #require(ClientConfigValidator.validate(file: "a.conf", keys: Self.valid).0)
        let b = try #require(
            ClientConfigValidator.validate(file: "b.conf", keys: with(["Id": "com.example.other"])).0)
        let c = try #require(
            ClientConfigValidator.validate(
                file: "c.conf", keys: with(["Id": "com.example.third", "ReturnUrl": "com.example.third:/cb"])
            ).0)
        let (kept, problems) = ClientConfigValidator.checkTogether([a, b, c])
        #expect(kept.map(\.id) == ["com.example.third"])
        #expect(problems.contains { $0.file == "a.conf" && $0.message.contains("b.conf") })
        #expect(problems.contains { $0.file == "b.conf" && $0.message.contains("a.conf") })
    }
}
