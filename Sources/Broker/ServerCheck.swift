import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerOAuth
import BrowserLoginProtocol
import Engine

/// `browser-login-broker --check-servers`: asks each client's login server
/// about an attempt that cannot exist (`POST {base}/native/attempts/{id}/status`
/// with a dummy recovery key). A well-formed protocol refusal (404
/// `ATTEMPT_UNKNOWN`, or any other protocol error body) proves the server is
/// reachable and speaks the protocol; no answer, a TLS failure, a redirect or
/// a body that is not a protocol error is a finding.
///
/// An OAuth 2.0 / OpenID Connect client (docs/providers.md) is checked by
/// reading its provider's metadata as a sign-in would (discovery, the
/// `issuer` compared exactly, every endpoint https or loopback http, PKCE
/// S256), without the cache: what the provider publishes now.
enum ServerCheck {
    struct Result: Codable, Sendable {
        var client: String
        var file: String
        /// `browser-login`, `oidc` or `oauth2` (the CLI's `doctor` reads it).
        var `protocol`: String
        /// The login server's base address, or the provider's issuer.
        var server: String
        var ok: Bool
        var problem: String?
    }

    static let probeAttemptId = "doctorprobeAAAAAAAAAAA"
    static let probeRecoveryKey = String(repeating: "A", count: 43)

    static func check(_ client: ClientConfig, transport: any HTTPTransport) async -> Result {
        if let settings = client.provider {
            return await check(client, provider: settings, transport: transport)
        }
        var result = Result(
            client: client.id, file: client.file, protocol: client.kind.rawValue, server: client.base, ok: false,
            problem: nil)
        guard
            let configuration = LoginServerConfiguration(
                origin: client.server, basePath: client.basePath, caFile: client.caFile, timeoutMilliseconds: 8_000,
                connectTimeoutMilliseconds: 4_000)
        else {
            result.problem = "BasePath= is not valid"
            return result
        }
        let server = LoginServerClient(configuration: configuration, transport: transport)
        do {
            _ = try await server.status(attemptId: probeAttemptId, recoveryKey: probeRecoveryKey)
            result.problem = "the server accepted a status request for an attempt that does not exist; it is not a login server"
        } catch {
            if case .refused = error { result.ok = true } else { result.problem = problem(error) }
        }
        return result
    }

    /// A standard provider: its metadata, fetched now (no cache).
    static func check(_ client: ClientConfig, provider settings: ProviderSettings, transport: any HTTPTransport) async
        -> Result
    {
        var result = Result(
            client: client.id, file: client.file, protocol: client.kind.rawValue, server: settings.issuer, ok: false,
            problem: nil)
        let provider = OAuthProvider(
            settings: settings, transport: transport, caFile: client.caFile, clock: SystemClock(), cache: nil)
        do {
            let metadata = try await provider.metadata()
            if let methods = metadata.codeChallengeMethodsSupported, !methods.contains("S256") {
                // As the authorize URL refuses it (docs/providers.md).
                result.problem = "the provider does not offer PKCE with S256 (code_challenge_methods_supported)"
            } else {
                // DPoP=yes, PAR=yes and PAR=no against what the provider offers (docs/providers.md).
                _ = try provider.usesDPoP(metadata)
                _ = try provider.pushEndpoint(metadata)
                result.ok = true
            }
        } catch {
            result.problem = problem(error)
        }
        return result
    }

    /// What `--check-servers` prints for a provider whose metadata could not
    /// be used. Names the issuer and endpoints' roles only, never a secret.
    static func problem(_ error: ProviderError) -> String {
        switch error {
        case .issuerMismatch(let expected, let got):
            "issuer mismatch: the provider's metadata says its issuer is '\(ProviderError.issuerText(got))', but Issuer= is '\(ProviderError.issuerText(expected))'; set Issuer= to exactly the provider's issuer (trailing slash included)"
        case .notSent, .noAnswer, .serverFailure:
            "the provider's metadata could not be fetched: \(error)"
        case .insecureEndpoint:
            "insecure endpoint: \(error); fix the provider's metadata or set the matching *Endpoint= key to an https address"
        case .malformed, .responseTooLarge:
            "the provider's metadata is not valid: \(error)"
        case .refused, .unsupported:
            "the provider cannot be used: \(error)"
        }
    }

    /// What `--check-servers` prints for a failed probe.
    static func problem(_ error: LoginServerError) -> String {
        switch error {
        case .notSent(let m): "the login server was not reached: \(m)"
        case .noAnswer(let m): "the login server gave no answer: \(m)"
        case .redirected(let status): "the login server answered a redirect (\(status)) on a native route"
        case .malformed(let status, let m): "the login server's answer (\(status)) is not valid: \(m)"
        case .serverFailure(let status): "the login server failed (\(status)); try again later"
        case .refused(let status, let code, _, _): "the login server refused the request (\(status) \(code))"
        case .responseTooLarge: "the login server's answer is too large"
        }
    }

    static func run(clients: [ClientConfig], json: Bool, transport: any HTTPTransport) async -> Int32 {
        var results: [Result] = []
        for client in clients.sorted(by: { $0.id < $1.id }) {
            results.append(await check(client, transport: transport))
        }
        if json {
            // Sorted keys, slashes escaped (`\/`) as this output always had them: a `/` occurs only in strings.
            let data = (try? ProtocolJSON.encode(results)) ?? Array("[]".utf8)
            print(String(decoding: data, as: UTF8.self).replacing("/", with: "\\/"))
        } else {
            for r in results {
                print(r.ok ? "ok    \(r.client)  \(r.server)" : "FAIL  \(r.client)  \(r.server): \(r.problem ?? "")")
            }
            if results.isEmpty { print("no clients are configured") }
        }
        return results.allSatisfy(\.ok) ? 0 : 69
    }
}
