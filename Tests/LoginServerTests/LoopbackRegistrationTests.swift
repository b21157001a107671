import BrowserLoginProtocol
import BrowserLoginTestTraits
import Foundation
import LoginServer
import ScriptedBrowser
import Testing

/// The reference server and loopback return URLs (docs/protocol.md §1, RFC 8252 §7.3): a registered
/// `http://127.0.0.1/cb` (or `[::1]`) matches a create request's URL on any port, the attempt keeps the
/// port, and its callback is built on it; every other variant is refused.
@Suite(.dedicatedThread) struct LoopbackRegistrationTests {
    @Test func aLoopbackReturnURLMatchesAnyPortAndTheCallbackKeepsIt() throws {
        let server = try TestServer {
            $0.clients.append(
                ClientRegistration(
                    clientId: "loopback", appName: "Loopback",
                    returnUrls: [try! ReturnURL("http://127.0.0.1/cb"), try! ReturnURL("http://[::1]/cb")],
                    policy: .automatic))
        }
        for sent in ["http://127.0.0.1:54321/cb", "http://[::1]:1/cb", "HTTP://127.0.0.1:65535/cb"] {
            let attempt = try NativeAttempt.create(server, client: "loopback", returnUrl: sent)
            let described = try server.browser().describe(attemptId: attempt.id)
            // Any local program can listen on a port: a loopback attempt is confirmed, never automatic.
            #expect(described.policy == .confirm)
            let callback = try server.browser().signInAndAuthorize(
                authorizeURL: attempt.created.authorizeUrl, email: testBase, code: "000000")
            let kept = sent.replacingOccurrences(of: "HTTP://", with: "http://")
            #expect(callback.hasPrefix(kept + "?code="), "\(sent) → \(callback)")
        }
        for url in [
            "http://127.0.0.1/cb", "http://127.0.0.1:/cb", "http://127.0.0.1:0/cb", "http://127.0.0.1:080/cb",
            "http://127.0.0.1:65536/cb", "http://localhost:4000/cb", "http://127.0.0.2:4000/cb",
            "http://user@127.0.0.1:4000/cb", "https://127.0.0.1:4000/cb", "http://127.0.0.1:4000/cb/",
            "http://127.0.0.1:4000/%63b", "http://127.0.0.1:4000/cb?x=1", "http://[0:0:0:0:0:0:0:1]:4000/cb",
        ] {
            let body = try JSONEncoder().encode(
                CreateAttemptRequest(
                    clientId: "loopback", returnUrl: url, codeChallenge: try ProofSecret.generate().challenge,
                    recoveryChallenge: try ProofSecret.generate().challenge))
            expectError(try server.native("/attempts", String(decoding: body, as: UTF8.self)), .returnURLNotRegistered)
        }
    }

    /// The configuration file: a loopback return URL is registered; one with a port, or on localhost, is
    /// refused with the rule's name.
    @Test func theConfigurationFileAcceptsLoopbackReturnURLs() throws {
        let ok = try ServerConfiguration.load(
            json: Data(
                #"{"clients": [{"clientId": "a", "appName": "A", "returnUrls": ["com.example.a:/cb", "http://127.0.0.1/cb"], "policy": "confirm"}]}"#
                    .utf8))
        #expect(ok.clients.first?.returnUrls.map(\.text) == ["com.example.a:/cb", "http://127.0.0.1/cb"])
        for (url, rule) in [
            ("http://127.0.0.1:8080/cb", "no-port-on-loopback"), ("http://localhost/cb", "http-only-on-loopback-ip"),
        ] {
            #expect {
                _ = try ServerConfiguration.load(
                    json: Data(
                        #"{"clients": [{"clientId": "a", "appName": "A", "returnUrls": ["\#(url)"], "policy": "confirm"}]}"#.utf8)
                )
            } throws: { error in
                "\(error)".contains(rule)
            }
        }
    }
}
