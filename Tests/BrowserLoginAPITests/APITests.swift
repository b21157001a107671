import BrowserLoginAPI
import BrowserLoginProtocol
import Foundation
import Testing

@Suite struct APITests {
    /// docs/rpc.md, the file the API follows.
    static let rpcDoc: String = {
        var directory = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { directory = directory.deletingLastPathComponent() }
        return (try? String(contentsOf: directory.appendingPathComponent("docs/rpc.md"), encoding: .utf8)) ?? ""
    }()

    /// The first column of each row of the markdown table under `heading` (its header row left out).
    static func firstColumn(under heading: String) -> Set<String> {
        guard let start = rpcDoc.range(of: heading) else { return [] }
        var names: Set<String> = []
        for line in rpcDoc[start.upperBound...].split(separator: "\n").drop(while: { !$0.hasPrefix("|") }).dropFirst() {
            guard line.hasPrefix("|") else { break }
            let cell = line.split(separator: "|").first?.trimmingCharacters(in: .whitespaces) ?? ""
            if cell.hasPrefix("`") { names.insert(cell.trimmingCharacters(in: CharacterSet(charactersIn: "`"))) }
        }
        return names
    }

    @Test func theMethodsAreDocsRPCs() {
        #expect(Set(RPCMethod.allCases.map(\.rawValue)) == Self.firstColumn(under: "## Methods"))
    }

    @Test func theErrorCodesAreDocsRPCs() {
        #expect(Set(BrokerErrorCode.allCases.map(\.rawValue)) == Self.firstColumn(under: "## Errors"))
    }

    func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    @Test func viewsHaveEveryMemberAndRoundTrip() throws {
        let t = Timestamp(millisecondsSince1970: 1_798_000_000_000)
        let session = SessionView.signedOut("com.example.notes")
        #expect(
            try json(session)
                == #"{"account":null,"accountKey":null,"authMethod":null,"authenticatedAt":null,"client":"com.example.notes","current":true,"expiresAt":null,"reason":null,"status":"signedOut"}"#
        )
        var attempt = AttemptView(
            attemptId: "at_1", client: "c", state: .waiting, createdAt: t, expiresAt: nil, updatedAt: t, error: nil,
            receipt: nil, reconciled: true)
        #expect(
            try json(attempt)
                == #"{"attemptId":"at_1","client":"c","createdAt":"\#(t.rfc3339)","error":null,"expiresAt":null,"receipt":null,"reconciled":true,"state":"waiting","updatedAt":"\#(t.rfc3339)"}"#
        )
        attempt.authorizeUrl = "https://login.example.com/a"
        attempt.session = session
        let decoded = try JSONDecoder().decode(LoginChanged.self, from: try JSONEncoder().encode(LoginChanged(attempt: attempt)))
        #expect(decoded.attempt == attempt)
    }

    @Test func aClientSummaryNamesItsProtocol() throws {
        let chat = ClientSummary(
            id: "com.example.chat", appName: "Chat", protocol: "oidc", server: "https://id.example.com",
            returnUrl: "http://127.0.0.1/callback", policy: "confirm")
        #expect(
            try json(chat)
                == #"{"appName":"Chat","id":"com.example.chat","policy":"confirm","protocol":"oidc","returnUrl":"http://127.0.0.1/callback","server":"https://id.example.com"}"#
        )
        #expect(try JSONDecoder().decode(ClientSummary.self, from: try JSONEncoder().encode(chat)) == chat)
        // An older broker's answer, without `protocol`: a Browser Login client.
        let old = #"{"id":"n","appName":"Notes","server":"https://login.example.com","returnUrl":"n:/cb","policy":"auto"}"#
        #expect(try JSONDecoder().decode(ClientSummary.self, from: Data(old.utf8)).protocol == "browser-login")
    }

    @Test func optionalParamsAreLeftOut() throws {
        #expect(try json(LoginStartParams(client: "c")) == #"{"client":"c"}"#)
        #expect(try json(SubscribeParams()) == "{}")
        #expect(try json(EmptyResult()) == "{}")
    }
}
