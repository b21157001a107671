/// A token endpoint's success answer (RFC 6749 §5.1). Holds secrets: never
/// log it; its `description` (and mirror) name only which members are there.
public struct TokenResponse: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var accessToken: String
    /// `Bearer` as the provider wrote it (compared case-insensitively).
    public var tokenType: String
    public var expiresIn: Int?
    public var refreshToken: String?
    /// `refresh_expires_in` (Keycloak) or `refresh_token_expires_in` (GitHub).
    public var refreshExpiresIn: Int?
    /// The raw ID token (a JWS), validated elsewhere.
    public var idToken: String?
    public var scope: String?

    public init(
        accessToken: String, tokenType: String, expiresIn: Int? = nil, refreshToken: String? = nil,
        refreshExpiresIn: Int? = nil, idToken: String? = nil, scope: String? = nil
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
        self.refreshExpiresIn = refreshExpiresIn
        self.idToken = idToken
        self.scope = scope
    }

    public var description: String {
        "TokenResponse(accessToken: <redacted>, tokenType: \(tokenType), expiresIn: \(expiresIn.map(String.init) ?? "nil"), "
            + "refreshToken: \(refreshToken == nil ? "nil" : "<redacted>"), "
            + "refreshExpiresIn: \(refreshExpiresIn.map(String.init) ?? "nil"), "
            + "idToken: \(idToken == nil ? "nil" : "<redacted>"), scope: \(scope ?? "nil"))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

/// What the userinfo endpoint says of the account (OIDC Core §5.3; GitHub's
/// `/user`): `sub` or GitHub's numeric `id`, `email`, `name`,
/// `preferred_username` or GitHub's `login`.
public struct UserInfo: Sendable, Equatable {
    public var subject: String?
    public var email: String?
    public var name: String?
    public var preferredUsername: String?
    /// `email_verified`: nil when absent; a value that is neither a boolean
    /// nor "true" / "false" reads as false.
    public var emailVerified: Bool?

    public init(subject: String?, email: String?, name: String?, preferredUsername: String?, emailVerified: Bool? = nil) {
        self.subject = subject
        self.email = email
        self.name = name
        self.preferredUsername = preferredUsername
        self.emailVerified = emailVerified
    }
}

/// A device authorization answer (RFC 8628 §3.2). `deviceCode` is a secret
/// (never crosses the socket, never logged); the rest is shown to the user.
public struct DeviceAuthorization: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var deviceCode: String
    public var userCode: String
    public var verificationURI: String
    public var verificationURIComplete: String?
    /// Seconds until the codes expire.
    public var expiresIn: Int
    /// Seconds between polls (5 when the provider says nothing).
    public var interval: Int

    public init(
        deviceCode: String, userCode: String, verificationURI: String, verificationURIComplete: String? = nil,
        expiresIn: Int, interval: Int
    ) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }

    public var description: String {
        "DeviceAuthorization(deviceCode: <redacted>, userCode: \(userCode), verificationURI: \(verificationURI), "
            + "verificationURIComplete: \(verificationURIComplete == nil ? "nil" : "present"), expiresIn: \(expiresIn), interval: \(interval))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

/// One poll of the token endpoint with a device code (RFC 8628 §3.5).
public enum DevicePoll: Sendable, Equatable, CustomStringConvertible {
    /// `authorization_pending`: poll again after the interval.
    case pending
    /// `slow_down`: add 5 seconds to the interval, then poll again.
    case slowDown
    /// `access_denied`.
    case denied
    /// `expired_token`: the device code expired.
    case expired
    case tokens(TokenResponse)

    public var description: String {
        switch self {
        case .pending: "pending"
        case .slowDown: "slowDown"
        case .denied: "denied"
        case .expired: "expired"
        case .tokens(let t): "tokens(\(t))"
        }
    }
}
