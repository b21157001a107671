import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// What the broker tells admins about OAuth 2.0 / OpenID Connect clients
/// (docs/providers.md): `clients.list` (and `browser-login clients`) name each
/// client's protocol and redirect, and `browser-login-broker --check-servers`
/// (which `browser-login doctor` runs) reads each provider's metadata.
@Suite("Provider checks", .dedicatedThread)
struct ProviderCheckTests {
    func write(_ h: Harness, _ file: String, _ body: String) {
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/" + file, contents: Data(("[Client]\n" + body).utf8))
    }

    /// A provider client of `issuer` (no request is made unless checked).
    func writeProvider(
        _ h: Harness, _ file: String, id: String, issuer: String, kind: String = "oidc",
        returnURL: String = "http://127.0.0.1/callback", api: String = "http://127.0.0.1:9"
    ) {
        write(
            h, file,
            """
            Id=\(id)
            AppName=Example Chat
            Protocol=\(kind)
            Issuer=\(issuer)
            ClientId=chat-desktop
            Scopes=\(kind == "oidc" ? "openid email" : "read")
            ReturnUrl=\(returnURL)
            ApiOrigin=\(api)
            \(kind == "oauth2" ? "AuthorizationEndpoint=\(issuer)/authorize/\nTokenEndpoint=\(issuer)/token/" : "")
            """)
    }

    @Test func clientsListNamesEachClientsProtocolAndItsRedirectAsConfigured() throws {
        let h = try Harness()
        defer { h.stopAll() }
        write(
            h, "notes.conf",
            """
            Id=com.example.notes
            AppName=Example Notes
            Server=http://127.0.0.1:9
            ReturnUrl=com.example.notes:/callback
            """)
        writeProvider(h, "chat.conf", id: "com.example.chat", issuer: "http://127.0.0.1:9/o")
        writeProvider(
            h, "hub.conf", id: "com.example.hub", issuer: "http://127.0.0.1:9/hub", kind: "oauth2",
            returnURL: "com.example.hub:/oauth/callback")
        try h.startBroker()

        let list = try #require(try h.rpc().call("clients.list").arrayValue)
        var byId: [String: JSONValue] = [:]
        for c in list { if let id = c["id"]?.stringValue { byId[id] = c } }
        #expect(byId.count == 3)
        #expect(byId["com.example.notes"]?["protocol"] == "browser-login")
        #expect(byId["com.example.notes"]?["returnUrl"] == "com.example.notes:/callback")
        #expect(byId["com.example.chat"]?["protocol"] == "oidc")
        // The loopback redirect as configured: no per-attempt port.
        #expect(byId["com.example.chat"]?["returnUrl"] == "http://127.0.0.1/callback")
        #expect(byId["com.example.chat"]?["server"] == "http://127.0.0.1:9")
        #expect(byId["com.example.hub"]?["protocol"] == "oauth2")
        #expect(byId["com.example.hub"]?["returnUrl"] == "com.example.hub:/oauth/callback")

        // The CLI's table shows the same columns.
        let cli = try h.cli(["clients"])
        #expect(cli.status == 0)
        let rows = cli.out.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        #expect(rows.first?.contains("PROTOCOL") == true)
        let chat = try #require(rows.first { $0.first == "com.example.chat" })
        #expect(chat.contains("oidc"))
        #expect(chat.contains("http://127.0.0.1/callback"))
        let notes = try #require(rows.first { $0.first == "com.example.notes" })
        #expect(notes.contains("browser-login"))
        let hub = try #require(rows.first { $0.first == "com.example.hub" })
        #expect(hub.contains("oauth2"))
    }

    @Test(.enabled(if: TestProvider.shouldRun))
    func checkServersReadsEachProvidersMetadataAndNamesAnIssuerMismatch() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let provider = try TestProvider.start(in: h.dir + "/provider")
        defer { provider.stop() }
        writeProvider(h, "chat.conf", id: "com.example.chat", issuer: provider.issuer, api: provider.baseURL)
        // Off by a trailing slash: the provider's issuer is written without one.
        writeProvider(h, "slash.conf", id: "com.example.slash", issuer: provider.issuer + "/", api: provider.baseURL)
        // Nothing listens on port 9.
        writeProvider(h, "gone.conf", id: "com.example.gone", issuer: "http://127.0.0.1:9/o")

        let check = try runProgram(
            binDirectory + "/browser-login-broker", ["--check-servers", "--json"], environment: h.environment())
        #expect(check.status == 69, "a failed check exits 69: \(check.err)")
        var results: [String: JSONValue] = [:]
        for r in try JSONValue.parse(check.out).arrayValue ?? [] {
            if let id = r["client"]?.stringValue { results[id] = r }
        }
        #expect(results.count == 3)

        let ok = try #require(results["com.example.chat"])
        #expect(ok["ok"] == true)
        #expect(ok["protocol"] == "oidc")
        #expect(ok["server"]?.stringValue == provider.issuer)
        #expect(ok["problem"] == nil)

        let slash = try #require(results["com.example.slash"])
        #expect(slash["ok"] == false)
        #expect(slash["protocol"] == "oidc")
        let problem = slash["problem"]?.stringValue ?? ""
        #expect(problem.contains("issuer mismatch"), "\(problem)")
        #expect(problem.contains("'\(provider.issuer)'"), "the provider's issuer: \(problem)")
        #expect(problem.contains("'\(provider.issuer)/'"), "the configured issuer: \(problem)")
        #expect(slash["file"]?.stringValue?.hasSuffix("slash.conf") == true)

        let gone = try #require(results["com.example.gone"])
        #expect(gone["ok"] == false)
        #expect(gone["problem"]?.stringValue?.contains("could not be fetched") == true, "\(gone)")

        // The text form, and `browser-login doctor`, which runs it.
        let text = try runProgram(
            binDirectory + "/browser-login-broker", ["--check-servers"], environment: h.environment())
        #expect(text.out.contains("ok    com.example.chat  \(provider.issuer)"))
        #expect(text.out.contains("FAIL  com.example.slash  \(provider.issuer)/: issuer mismatch"))
        let doctor = try JSONValue.parse(try h.cli(["doctor", "--json"]).out)
        var found: [String: JSONValue] = [:]
        for c in doctor.arrayValue ?? [] {
            if let name = c["check"]?.stringValue { found[name] = c }
        }
        #expect(found["server:com.example.chat"]?["status"] == "ok")
        #expect(found["server:com.example.chat"]?["message"]?.stringValue?.contains("oidc metadata") == true)
        #expect(found["server:com.example.slash"]?["status"] == "problem")
        #expect(found["server:com.example.slash"]?["fix"]?.stringValue?.contains("slash.conf") == true)
    }

    /// django-oauth-toolkit offers neither DPoP nor PAR: `auto` (the
    /// default) leaves its clients as they were, `DPoP=yes` and `PAR=yes`
    /// are configuration errors that `--check-servers` names.
    @Test(.enabled(if: TestProvider.shouldRun))
    func dpopAndPARYesAreRefusedAtAProviderWithoutThem() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let provider = try TestProvider.start(in: h.dir + "/provider")
        defer { provider.stop() }
        writeProvider(h, "chat.conf", id: "com.example.chat", issuer: provider.issuer, api: provider.baseURL)
        for (file, key) in [("dpop.conf", "DPoP"), ("par.conf", "PAR")] {
            write(
                h, file,
                """
                Id=com.example.\(key.lowercased())
                AppName=Example Chat
                Protocol=oidc
                Issuer=\(provider.issuer)
                ClientId=chat-desktop
                Scopes=openid email
                ReturnUrl=http://127.0.0.1/callback
                ApiOrigin=\(provider.baseURL)
                \(key)=yes
                """)
        }
        let check = try runProgram(
            binDirectory + "/browser-login-broker", ["--check-servers", "--json"], environment: h.environment())
        var results: [String: JSONValue] = [:]
        for r in try JSONValue.parse(check.out).arrayValue ?? [] {
            if let id = r["client"]?.stringValue { results[id] = r }
        }
        #expect(results["com.example.chat"]?["ok"] == true, "auto leaves DOT's client as it was")
        #expect(results["com.example.dpop"]?["ok"] == false)
        #expect(
            results["com.example.dpop"]?["problem"]?.stringValue?.contains("DPoP=yes") == true,
            "\(String(describing: results["com.example.dpop"]))")
        #expect(results["com.example.par"]?["ok"] == false)
        #expect(results["com.example.par"]?["problem"]?.stringValue?.contains("PAR=yes") == true)
    }
}
