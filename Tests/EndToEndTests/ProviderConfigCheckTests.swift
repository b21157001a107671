import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// `browser-login-broker --check-config` with OAuth 2.0 / OpenID Connect
/// client files (docs/providers.md): the real daemon reads them with GKeyFile,
/// names the file and the key of each problem, and never prints a client secret.
@Suite("Provider client files", .dedicatedThread)
struct ProviderConfigCheckTests {
    func write(_ h: Harness, _ file: String, _ text: String) {
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/" + file, contents: Data(text.utf8))
    }

    @Test func checkConfigNamesTheFileAndTheKeyOfProviderClients() throws {
        let h = try Harness()
        let secret = "GOCSPX-e2e-never-printed"
        write(
            h, "chat.conf",
            """
            [Client]
            Id=com.example.chat
            AppName=Example Chat
            Protocol=oidc
            Issuer=https://login.microsoftonline.com/{tenantid}/v2.0
            ClientId=chat-desktop
            ClientSecret=\(secret)
            Scopes=openid email offline_access
            ReturnUrl=http://127.0.0.1/callback
            ApiOrigin=https://graph.microsoft.com
            AuthorizeParams=prompt=select_account&login_hint=ada%40example.com
            """)
        write(
            h, "bad.conf",
            """
            [Client]
            Id=com.example.bad
            AppName=Bad
            Protocol=oauth2
            Issuer=https://github.com
            ClientId=abc
            ClientSecret=\(secret)
            TokenEndpoint=http://github.com/login/oauth/access_token
            ReturnUrl=http://localhost:8000/callback
            ApiOrigin=https://api.github.com
            Flow=sideways
            DPoP=always
            """)
        let check = try runProgram(binDirectory + "/browser-login-broker", ["--check-config"], environment: h.environment())
        #expect(check.status == 78)
        let text = check.out
        #expect(text.contains("bad.conf: TokenEndpoint: error: "))
        #expect(text.contains("bad.conf: ReturnUrl: error: 'localhost' is not allowed"))
        #expect(text.contains("RFC 8252 §8.3"))
        #expect(text.contains("bad.conf: Flow: error: "))
        #expect(text.contains("bad.conf: DPoP: error: must be 'auto' (the default), 'yes' or 'no'"))
        #expect(text.contains("chat.conf: ClientSecret: warning: "))
        #expect(!text.contains("chat.conf: Issuer"))
        #expect(text.contains("1 client(s) valid in 2 file(s)"))
        #expect(!(text + check.err).contains(secret))
    }
}
