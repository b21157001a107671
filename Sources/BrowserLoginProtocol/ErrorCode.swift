/// An error code of the wire protocol (docs/protocol.md). Clients branch on the
/// code, never on the message. Unknown codes from a server are kept as they
/// are, so a newer server's code still reaches the app unchanged.
public struct ServerErrorCode: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let invalidRequest = ServerErrorCode("INVALID_REQUEST")
    public static let payloadTooLarge = ServerErrorCode("PAYLOAD_TOO_LARGE")
    public static let nativeOnly = ServerErrorCode("NATIVE_ONLY")
    public static let rateLimited = ServerErrorCode("RATE_LIMITED")
    public static let clientUnknown = ServerErrorCode("CLIENT_UNKNOWN")
    public static let returnURLNotRegistered = ServerErrorCode("RETURN_URL_NOT_REGISTERED")
    public static let invalidGrant = ServerErrorCode("INVALID_GRANT")
    public static let attemptNotAuthorized = ServerErrorCode("ATTEMPT_NOT_AUTHORIZED")
    public static let attemptAlreadyExchanged = ServerErrorCode("ATTEMPT_ALREADY_EXCHANGED")
    public static let attemptExpired = ServerErrorCode("ATTEMPT_EXPIRED")
    public static let attemptCancelled = ServerErrorCode("ATTEMPT_CANCELLED")
    public static let attemptUnknown = ServerErrorCode("ATTEMPT_UNKNOWN")
    public static let attemptActive = ServerErrorCode("ATTEMPT_ACTIVE")
    public static let authUserDisabled = ServerErrorCode("AUTH_USER_DISABLED")
    public static let proofInvalid = ServerErrorCode("PROOF_INVALID")
    public static let sessionRevoked = ServerErrorCode("SESSION_REVOKED")
    public static let sessionExpired = ServerErrorCode("SESSION_EXPIRED")
    public static let tokenExpired = ServerErrorCode("TOKEN_EXPIRED")
    public static let unauthenticated = ServerErrorCode("UNAUTHENTICATED")
    public static let originMismatch = ServerErrorCode("ORIGIN_MISMATCH")
    /// §6: authorize from a browser that does not hold the attempt's binding cookie.
    public static let browserMismatch = ServerErrorCode("BROWSER_MISMATCH")
    public static let sessionChanged = ServerErrorCode("SESSION_CHANGED")
    public static let policyMismatch = ServerErrorCode("POLICY_MISMATCH")
    public static let loginRequired = ServerErrorCode("LOGIN_REQUIRED")
    public static let notFound = ServerErrorCode("NOT_FOUND")
    public static let methodNotAllowed = ServerErrorCode("METHOD_NOT_ALLOWED")
    public static let otpInvalid = ServerErrorCode("OTP_INVALID")
    public static let otpExpired = ServerErrorCode("OTP_EXPIRED")
    public static let otpMaxAttempts = ServerErrorCode("OTP_MAX_ATTEMPTS")
    public static let internalError = ServerErrorCode("INTERNAL_ERROR")
    /// Sign-up gates (docs/protocol.md §6, docs/server.md): a new user needs an invitation or membership.
    public static let invitationRequired = ServerErrorCode("INVITATION_REQUIRED")
    /// The invitation token is unknown, used, revoked, expired, or for another address.
    public static let invitationInvalid = ServerErrorCode("INVITATION_INVALID")
    /// No invitation, and the address was put on the waitlist.
    public static let waitlisted = ServerErrorCode("WAITLISTED")
    /// The address's domain is not in the server's `allowedDomains`.
    public static let domainNotAllowed = ServerErrorCode("DOMAIN_NOT_ALLOWED")
    /// The hosted page's email routes on a server with email sign-in turned off.
    public static let emailSignInDisabled = ServerErrorCode("EMAIL_SIGNIN_DISABLED")
    /// The hosted page's sign-in start: a redirect target the server's `emailRedirectUris` do not cover.
    public static let invalidRedirectURI = ServerErrorCode("INVALID_REDIRECT_URI")
    /// The server's database cannot be reached now (it went away, or is too
    /// busy): nothing was decided; retry after `Retry-After` seconds.
    public static let serviceUnavailable = ServerErrorCode("SERVICE_UNAVAILABLE")
    /// Passkeys (docs/server.md): the page's origin names no relying party in the server's `passkeyRpIds`.
    public static let passkeyRpNotConfigured = ServerErrorCode("PASSKEY_RP_NOT_CONFIGURED")
    /// The authenticator did not verify the user (no UV flag).
    public static let passkeyUserVerificationFailed = ServerErrorCode("PASSKEY_USER_VERIFICATION_FAILED")
    /// A ceremony's check failed: client data, challenge, origin, rpIdHash, UP, attestation or signature.
    public static let passkeyInvalid = ServerErrorCode("PASSKEY_INVALID")
    /// No such passkey (deleted, or never registered here).
    public static let passkeyUnknown = ServerErrorCode("PASSKEY_UNKNOWN")
    /// The signature counter went backwards: refused as a cloned authenticator.
    public static let passkeyCloned = ServerErrorCode("PASSKEY_CLONED")

    /// The HTTP status a server answers with this code (docs/protocol.md §5, §6, §8).
    public var httpStatus: Int {
        switch self {
        case .invalidRequest, .returnURLNotRegistered, .invalidGrant, .policyMismatch, .otpInvalid, .otpExpired,
            .otpMaxAttempts:
            400
        case .unauthenticated, .sessionRevoked, .sessionExpired, .tokenExpired, .loginRequired: 401
        case .nativeOnly, .authUserDisabled, .proofInvalid, .originMismatch, .browserMismatch: 403
        case .clientUnknown, .attemptUnknown, .notFound: 404
        case .methodNotAllowed: 405
        case .attemptNotAuthorized, .attemptAlreadyExchanged, .attemptActive, .sessionChanged: 409
        case .attemptExpired, .attemptCancelled: 410
        case .payloadTooLarge: 413
        case .rateLimited: 429
        case .invitationRequired, .invitationInvalid, .waitlisted, .domainNotAllowed, .emailSignInDisabled: 403
        case .invalidRedirectURI: 400
        case .serviceUnavailable: 503
        case .passkeyRpNotConfigured, .passkeyInvalid: 400
        case .passkeyUserVerificationFailed: 401
        case .passkeyCloned: 403
        case .passkeyUnknown: 404
        default: 500
        }
    }
}

/// The error body of every protocol error: `{"error": {"code", "message"}}`.
public struct ErrorBody: Codable, Sendable, Equatable {
    public struct Detail: Codable, Sendable, Equatable {
        public var code: ServerErrorCode
        public var message: String
    }
    public var error: Detail
    public init(code: ServerErrorCode, message: String) {
        self.error = Detail(code: code, message: message)
    }
}
