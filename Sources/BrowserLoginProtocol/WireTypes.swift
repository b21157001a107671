/// Request and response bodies of docs/protocol.md §5 (native routes), §6
/// (browser routes) and §8 (the demo API). Member names are the wire names.

/// The PKCE method; `S256` is the only one.
public enum CodeChallengeMethod: String, Codable, Sendable {
    case s256 = "S256"
}

/// A client's approval policy (§1).
public enum ClientPolicy: String, Codable, Sendable, CaseIterable {
    case confirm
    case automatic
}

/// A server-side attempt state (§2).
public enum ServerAttemptState: String, Codable, Sendable, CaseIterable {
    case pending
    case authorized
    case completed
    case cancelled
    case expired
}

// MARK: - §5.1 Create

public struct CreateAttemptRequest: Codable, Sendable, Equatable {
    public var clientId: String
    public var returnUrl: String
    public var codeChallenge: String
    public var codeChallengeMethod: CodeChallengeMethod
    public var recoveryChallenge: String
    public var ephemeral: Bool
    /// §5.1: `"login"` asks the hosted page for a fresh sign-in (no "Continue as …"); nil when absent.
    public var prompt: String?
    /// §5.1: an email address (at most 254 bytes) that pre-fills the page's address field; nil when absent.
    public var loginHint: String?

    public init(
        clientId: String, returnUrl: String, codeChallenge: String, codeChallengeMethod: CodeChallengeMethod = .s256,
        recoveryChallenge: String, ephemeral: Bool = false, prompt: String? = nil, loginHint: String? = nil
    ) {
        self.clientId = clientId
        self.returnUrl = returnUrl
        self.codeChallenge = codeChallenge
        self.codeChallengeMethod = codeChallengeMethod
        self.recoveryChallenge = recoveryChallenge
        self.ephemeral = ephemeral
        self.prompt = prompt
        self.loginHint = loginHint
    }
}

public struct CreateAttemptResponse: Codable, Sendable, Equatable {
    public var attemptId: String
    public var authorizeUrl: String
    public var expiresAt: Timestamp
    public var issuer: String

    public init(attemptId: String, authorizeUrl: String, expiresAt: Timestamp, issuer: String) {
        self.attemptId = attemptId
        self.authorizeUrl = authorizeUrl
        self.expiresAt = expiresAt
        self.issuer = issuer
    }
}

// MARK: - §5.2 Exchange

public struct ExchangeRequest: Codable, Sendable, Equatable {
    public var code: String
    public var codeVerifier: String
    public init(code: String, codeVerifier: String) {
        self.code = code
        self.codeVerifier = codeVerifier
    }
}

/// The account a session belongs to.
public struct Account: Codable, Sendable, Equatable, Hashable {
    public var userId: String
    public var email: String
    public var displayName: String
    public init(userId: String, email: String, displayName: String) {
        self.userId = userId
        self.email = email
        self.displayName = displayName
    }
}

/// S: the native session an exchange issues. Holds secrets: never log it.
///
/// A Browser Login server always gives every member (the client checks it);
/// an OAuth provider may give no refresh token (GitHub's OAuth apps), no
/// access token lifetime and no session lifetime (docs/providers.md), which
/// are then nil.
public struct IssuedSession: Codable, Sendable, Equatable {
    public var sessionId: String
    public var accessToken: String
    public var accessTokenExpiresAt: Timestamp?
    public var refreshToken: String?
    public var expiresAt: Timestamp?
    public var authenticatedAt: Timestamp
    public var authMethod: String
    public var account: Account
    /// A standard provider's DPoP-bound session (RFC 9449): its private key
    /// (BrokerJOSE's `DPoPKey.serialized`), kept with the tokens in the vault
    /// only. Nil for a Bearer session; never sent by a server.
    public var dpopKey: String?

    public init(
        sessionId: String, accessToken: String, accessTokenExpiresAt: Timestamp?, refreshToken: String?,
        expiresAt: Timestamp?, authenticatedAt: Timestamp, authMethod: String, account: Account,
        dpopKey: String? = nil
    ) {
        self.sessionId = sessionId
        self.accessToken = accessToken
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.authenticatedAt = authenticatedAt
        self.authMethod = authMethod
        self.account = account
        self.dpopKey = dpopKey
    }
}

/// R: the receipt of an exchange; `tokenDigest` is
/// BASE64URL-NOPAD(SHA-256(accessToken)) of the access token issued with it.
public struct Receipt: Codable, Sendable, Equatable {
    public var attemptId: String
    public var sessionId: String
    public var issuedAt: Timestamp
    public var tokenDigest: String
    public init(attemptId: String, sessionId: String, issuedAt: Timestamp, tokenDigest: String) {
        self.attemptId = attemptId
        self.sessionId = sessionId
        self.issuedAt = issuedAt
        self.tokenDigest = tokenDigest
    }
}

public struct ExchangeResponse: Codable, Sendable, Equatable {
    public var session: IssuedSession
    public var receipt: Receipt
    public init(session: IssuedSession, receipt: Receipt) {
        self.session = session
        self.receipt = receipt
    }
}

// MARK: - §5.3–5.5 Status, cancel, acknowledge (recovery-key calls)

public struct RecoveryRequest: Codable, Sendable, Equatable {
    public var recoveryKey: String
    public init(recoveryKey: String) { self.recoveryKey = recoveryKey }
}

public struct StatusResponse: Codable, Sendable, Equatable {
    public var state: ServerAttemptState
    public var expiresAt: Timestamp
    public var receipt: Receipt?
    public var sessionExpiresAt: Timestamp?
    public var sessionRevoked: Bool?
    public init(
        state: ServerAttemptState, expiresAt: Timestamp, receipt: Receipt? = nil, sessionExpiresAt: Timestamp? = nil,
        sessionRevoked: Bool? = nil
    ) {
        self.state = state
        self.expiresAt = expiresAt
        self.receipt = receipt
        self.sessionExpiresAt = sessionExpiresAt
        self.sessionRevoked = sessionRevoked
    }

    /// §5.3: the completed-only members are present exactly when completed.
    public var isWellFormed: Bool {
        let completedMembers = receipt != nil && sessionExpiresAt != nil && sessionRevoked != nil
        let noCompletedMembers = receipt == nil && sessionExpiresAt == nil && sessionRevoked == nil
        return state == .completed ? completedMembers : noCompletedMembers
    }
}

public struct StateResponse: Codable, Sendable, Equatable {
    public var state: String
    public init(state: String) { self.state = state }
}

// MARK: - §5.6–5.8 Sessions

public struct SessionInfoResponse: Codable, Sendable, Equatable {
    public var sessionId: String
    public var expiresAt: Timestamp
    public var account: Account
    public init(sessionId: String, expiresAt: Timestamp, account: Account) {
        self.sessionId = sessionId
        self.expiresAt = expiresAt
        self.account = account
    }
}

public struct RefreshRequest: Codable, Sendable, Equatable {
    public var refreshToken: String
    public init(refreshToken: String) { self.refreshToken = refreshToken }
}

/// A rotated token pair. Holds secrets: never log it.
public struct RefreshResponse: Codable, Sendable, Equatable {
    public var accessToken: String
    public var accessTokenExpiresAt: Timestamp
    public var refreshToken: String
    public var expiresAt: Timestamp
    public init(accessToken: String, accessTokenExpiresAt: Timestamp, refreshToken: String, expiresAt: Timestamp) {
        self.accessToken = accessToken
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
    }
}

/// The recovery form of revoke: `{"attemptId", "recoveryKey"}`. The sign-out
/// form is an empty object with a bearer token.
public struct RevokeByProofRequest: Codable, Sendable, Equatable {
    public var attemptId: String
    public var recoveryKey: String
    public init(attemptId: String, recoveryKey: String) {
        self.attemptId = attemptId
        self.recoveryKey = recoveryKey
    }
}

public struct RevokeResponse: Codable, Sendable, Equatable {
    public var revoked: Bool
    public init(revoked: Bool) { self.revoked = revoked }
}

// MARK: - §6 Browser routes

public struct DescribeResponse: Codable, Sendable, Equatable {
    public var attemptId: String
    public var appName: String
    public var clientId: String
    public var policy: ClientPolicy
    public var state: ServerAttemptState
    public var expiresAt: Timestamp
    /// §5.1: the create request's `prompt` (`"login"`), null when it had none.
    public var prompt: String?
    /// §5.1: the create request's `loginHint`, null when it had none.
    public var loginHint: String?
    public init(
        attemptId: String, appName: String, clientId: String, policy: ClientPolicy, state: ServerAttemptState,
        expiresAt: Timestamp, prompt: String? = nil, loginHint: String? = nil
    ) {
        self.attemptId = attemptId
        self.appName = appName
        self.clientId = clientId
        self.policy = policy
        self.state = state
        self.expiresAt = expiresAt
        self.prompt = prompt
        self.loginHint = loginHint
    }

    private enum CodingKeys: String, CodingKey {
        case attemptId, appName, clientId, policy, state, expiresAt, prompt, loginHint
    }

    /// `prompt` and `loginHint` are always present: null when absent (§6).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(attemptId, forKey: .attemptId)
        try container.encode(appName, forKey: .appName)
        try container.encode(clientId, forKey: .clientId)
        try container.encode(policy, forKey: .policy)
        try container.encode(state, forKey: .state)
        try container.encode(expiresAt, forKey: .expiresAt)
        if let prompt { try container.encode(prompt, forKey: .prompt) } else { try container.encodeNil(forKey: .prompt) }
        if let loginHint {
            try container.encode(loginHint, forKey: .loginHint)
        } else {
            try container.encodeNil(forKey: .loginHint)
        }
    }
}

public enum AuthorizeDecision: String, Codable, Sendable {
    case `continue`
    case automatic
}

public struct AuthorizeRequest: Codable, Sendable, Equatable {
    public var decision: AuthorizeDecision
    public var expectedSessionId: String
    public init(decision: AuthorizeDecision, expectedSessionId: String) {
        self.decision = decision
        self.expectedSessionId = expectedSessionId
    }
}

/// Holds a code: never log it.
public struct AuthorizeResponse: Codable, Sendable, Equatable {
    public var callbackUrl: String
    public init(callbackUrl: String) { self.callbackUrl = callbackUrl }
}

// MARK: - §8 Demo API

public struct Note: Codable, Sendable, Equatable {
    public var id: String
    public var text: String
    public var createdAt: Timestamp
    public init(id: String, text: String, createdAt: Timestamp) {
        self.id = id
        self.text = text
        self.createdAt = createdAt
    }
}

public struct NotesResponse: Codable, Sendable, Equatable {
    public var notes: [Note]
    public init(notes: [Note]) { self.notes = notes }
}

public struct CreateNoteRequest: Codable, Sendable, Equatable {
    public var text: String
}
