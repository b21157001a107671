import BrowserLoginProtocol
import Testing

@testable import BrokerCore
@testable import BrokerSystem

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

    @Test func manyUnknownKeysAreOneWarning() {
        var keys = Self.valid
        for i in 0..<1000 { keys["Unknown\(i)"] = "x" }
        keys[String(repeating: "L", count: 500)] = "x"
        let (config, problems) = ClientConfigValidator.validate(file: "a.conf", keys: keys)
        #expect(config != nil)
        #expect(problems.count == 1)
        let warning = problems.first
        #expect(warning?.severity == .warning && warning?.key == nil)
        #expect(warning?.message.hasPrefix("1001 unknown keys, ignored: ") == true)
        #expect(warning?.message.hasSuffix(" and 996 more") == true)
        #expect((warning?.message.utf8.count ?? 0) < 400, "names are cut: \(warning?.message ?? "")")
    }

    @Test func twoClientsWithOneIdAreBothRefusedAndBothNamed() throws {
        let a = try #require(ClientConfigValidator.validate(file: "a.conf", keys: Self.valid).0)
        let b = try #require(
            ClientConfigValidator.validate(file: "b.conf", keys: with(["ReturnUrl": "com.example.other:/cb"])).0)
        let (kept, problems) = ClientConfigValidator.checkTogether([a, b])
        #expect(kept.isEmpty)
        #expect(problems.contains { $0.file == "a.conf" && $0.key == "Id" && $0.message.contains("b.conf") })
        #expect(problems.contains { $0.file == "b.conf" && $0.key == "Id" && $0.message.contains("a.conf") })
        #expect(problems.allSatisfy { $0.message.contains("both are refused") })
    }

    @Test func aNulByteRefusesTheFile() {
        let text =
            "[Client]\nId=com.example.notes\u{0}evil\nAppName=N\nServer=https://login.example.com\nReturnUrl=com.example.notes:/cb\n"
        let (config, problems) = ClientFiles.parse(contents: Array(text.utf8), file: "n.conf")
        #expect(config == nil)
        #expect(
            problems == [
                ConfigProblem(
                    .error, file: "n.conf", key: nil,
                    "has a NUL byte on line 2; a client file is text — remove it (the file is not read)")
            ])
    }

    @Test func aSecondClientGroupRefusesTheFile() {
        let one = "Id=com.example.notes\nAppName=N\nServer=https://login.example.com\nReturnUrl=com.example.notes:/cb\n"
        let text = "[Client]\n" + one + "\n  [Client] \r\nId=com.example.other\n"
        let (config, problems) = ClientFiles.parse(contents: Array(text.utf8), file: "g.conf")
        #expect(config == nil)
        #expect(problems.count == 1)
        #expect(problems.first?.message.hasPrefix("has a second [Client] group on line 7 (the first is on line 1)") == true)
        // One group is fine; another group's name is not a second [Client].
        #expect(ClientFiles.parse(contents: Array(("[Client]\n" + one + "[ClientX]\n").utf8), file: "g.conf").client != nil)
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
