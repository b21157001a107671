import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import Testing

/// A broker with three clients of one provider: OpenID Connect over a
/// loopback redirect, over a private-use scheme, and a device sign-in.
final class ProviderWorld {
    let h: Harness
    let provider: TestProvider
    /// The loopback client's `ReturnUrl` (with a fixed port at Glewlwyd).
    let loopbackRedirect: String

    /// `extraAfterStart`: more lines of the `com.example.chat` client file,
    /// made once the provider runs and before the broker starts (an endpoint
    /// pointing at a proxy in front of the provider).
    /// `paused`: a fault point (`TestFaults`) where the broker holds still until the test removes its marker.
    /// `kind`: which real provider (Glewlwyd: the loopback client has a fixed
    /// port, registered at the provider, and revokes with a Bearer).
    /// `dpop`, `par`: the `DPoP=` and `PAR=` of the Glewlwyd clients — `no`
    /// unless a test asks (the Bearer paths and authorize URLs the suites
    /// inspect; DPoPAndPARTests runs the DPoP and PAR ones), nothing at DOT.
    init(
        _ kind: TestProvider.Kind = .djangoOAuthToolkit, accessTokenTTL: Int = 300, extra: String = "",
        extraAfterStart: ((Harness, TestProvider) throws -> String)? = nil, paused: String? = nil,
        dpop: String = "no", par: String = "no"
    ) throws {
        h = try Harness()
        provider = try TestProvider.start(kind, in: h.dir + "/provider", accessTokenTTL: accessTokenTTL)
        let issuer = provider.issuer
        var loopback = "http://127.0.0.1/callback"
        var perProvider = ""
        var deviceEndpoint = "DeviceAuthorizationEndpoint=\(issuer)/device-authorization/"
        if kind == .glewlwyd {
            // Glewlwyd matches redirect URIs exactly, port included (docs/providers.md).
            loopback = "http://127.0.0.1:\(try freeLoopbackPort())/callback"
            try provider.allowRedirects([loopback])
            perProvider = "RevocationAuth=bearer\nDPoP=\(dpop)\nPAR=\(par)"
            deviceEndpoint = ""
        }
        self.loopbackRedirect = loopback
        let more = try extraAfterStart?(h, provider) ?? ""
        writeClient(
            "chat.conf",
            """
            Id=com.example.chat
            AppName=Example Chat
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-desktop
            Scopes=openid email profile
            ReturnUrl=\(loopback)
            ApiOrigin=\(provider.baseURL)
            \(perProvider)
            \(extra)
            \(more)
            """)
        writeClient(
            "chat-scheme.conf",
            """
            Id=com.example.chatscheme
            AppName=Example Chat (scheme)
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-desktop
            Scopes=openid email profile
            ReturnUrl=com.example.chat:/callback
            ApiOrigin=\(provider.baseURL)
            \(perProvider)
            """)
        writeClient(
            "chat-device.conf",
            """
            Id=com.example.chatdevice
            AppName=Example Chat (device)
            Protocol=oidc
            Issuer=\(issuer)
            ClientId=chat-device
            Scopes=openid email profile
            ReturnUrl=http://127.0.0.1/callback
            ApiOrigin=\(provider.baseURL)
            \(deviceEndpoint)
            \(perProvider)
            Flow=device
            """)
        if let paused {
            h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "pause:" + paused
            h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT_DIR"] = h.dir
        }
        try h.startBroker()
    }

    deinit { provider.stop() }

    func writeClient(_ file: String, _ body: String) {
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/" + file, contents: Data(("[Client]\n" + body).utf8))
    }

    /// Starts a browser sign-in and answers the attempt and its authorize URL.
    func start(_ client: String = "com.example.chat") throws -> (attempt: JSONValue, url: String) {
        let attempt = try h.rpc().call("login.start", params: ["client": .string(client), "openBrowser": false])
        return (attempt, try #require(attempt["authorizeUrl"]?.stringValue))
    }

    /// A complete sign-in over the loopback redirect: the scripted
    /// browser signs in at the provider and follows the redirect to the
    /// broker's listener.
    @discardableResult
    func signIn(_ client: String = "com.example.chat") throws -> JSONValue {
        let (attempt, url) = try start(client)
        let delivered = try provider.authorizeDelivering(url, deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        return attempt
    }

    func session(_ client: String = "com.example.chat") throws -> JSONValue {
        try h.rpc().call("session.get", params: ["client": .string(client)])
    }
}
