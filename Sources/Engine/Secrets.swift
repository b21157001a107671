import BrokerCore
import BrowserLoginProtocol

/// What the vault keeps for one attempt, from before the create request is
/// sent until the attempt is acknowledged: both proofs, the hosted page's URL
/// and, once exchanged, the session it issued (for reconciliation).
///
/// An attempt at a standard provider (docs/providers.md) keeps its `state`,
/// `nonce` and redirect URI beside the verifier, or the device code of a
/// device sign-in; its recovery key is empty (there is no attempt at the
/// provider to recover).
struct AttemptSecrets: Codable, Sendable {
    var codeVerifier: String
    var recoveryKey: String
    var authorizeUrl: String?
    var session: IssuedSession?
    var state: String? = nil
    var nonce: String? = nil
    var redirectURI: String? = nil
    var deviceCode: String? = nil
    var device: AttemptView.DeviceView? = nil
    /// A standard provider's DPoP key pair (docs/providers.md), serialized.
    var dpopKey: String? = nil
}

/// What the vault keeps for a client's current session.
struct SessionSecrets: Codable, Sendable {
    var session: IssuedSession
    var attemptId: String
    /// The `SessionKeeper` generation these were read in (never stored): a
    /// change learnt with them applies only while it is current.
    var generation: UInt64 = 0

    private enum CodingKeys: String, CodingKey { case session, attemptId }
}

/// Vault attributes and labels. Attributes are unique per client and attempt;
/// the vault adds its schema name.
enum VaultKeys {
    static func attempt(client: String, attemptId: String) -> [String: String] {
        ["kind": "attempt", "client": client, "attempt": attemptId]
    }
    /// An account's session; `account` nil: keyed by client only (a session
    /// of a `single` client, or one signed in before accounts). The schema
    /// has three attributes and matches all three exactly; a session item
    /// leaves `attempt` empty, so an account's items carry the account key
    /// there: an item keyed by client only never matches an account's.
    static func session(client: String, account: String? = nil) -> [String: String] {
        var keys = ["kind": "session", "client": client]
        if let account { keys["attempt"] = account }
        return keys
    }
    /// A signed-out session whose revoke at the server is still owed.
    static func pendingRevoke(client: String, account: String? = nil) -> [String: String] {
        var keys = ["kind": "revoke", "client": client]
        if let account { keys["attempt"] = account }
        return keys
    }

    static func attemptLabel(appName: String) -> String { "Sign-in attempt for \(appName)" }
    static func sessionLabel(appName: String, email: String) -> String { "Sign-in for \(appName) (\(email))" }
    static func revokeLabel(appName: String) -> String { "Signed-out session of \(appName) (revoke pending)" }
}

extension VaultError {
    /// The broker error an RPC client sees.
    var brokerError: BrokerError {
        switch self {
        case .unavailable(let m): BrokerError(.vaultUnavailable, m)
        case .locked(let m): BrokerError(.vaultLocked, m)
        case .failed(let m): BrokerError(.vaultUnavailable, m)
        }
    }
}

extension SecretVault {
    func storeJSON<T: Encodable>(_ value: T, label: String, attributes: [String: String]) async throws(VaultError) {
        let data: [UInt8]
        do { data = try ProtocolJSON.encode(value) } catch { throw .failed("could not encode the vault item") }
        try await store(data, label: label, attributes: attributes)
    }

    func lookupJSON<T: Decodable>(_ type: T.Type, attributes: [String: String]) async throws(VaultError) -> T? {
        guard let bytes = try await lookup(attributes: attributes) else { return nil }
        do { return try JSONValue.parse(bytes).decode(T.self) } catch {
            throw .failed(
                "a vault item of browser-login is unreadable; remove it with secret-tool clear kind \(attributes["kind"] ?? "")")
        }
    }
}
