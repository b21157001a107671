import BrowserLoginProtocol

/// The members of a JWS protected header (RFC 7515 §4.1) that selection needs.
/// `jku`, `jwk`, `x5u` and `x5c` are ignored: keys come only from the
/// provider's key set.
public struct JWSHeader: Sendable, Equatable {
    public var algorithm: String
    public var keyId: String?
    public var type: String?

    public init(algorithm: String, keyId: String?, type: String?) {
        self.algorithm = algorithm
        self.keyId = keyId
        self.type = type
    }
}

/// The claims of a verified ID token (OpenID Connect Core §2, §5.1).
public struct IDTokenClaims: Sendable, Equatable {
    public var issuer: String
    public var subject: String
    public var audience: [String]
    public var authorizedParty: String?
    public var expiresAt: Int64
    public var issuedAt: Int64
    public var nonce: String?
    public var email: String?
    public var name: String?
    public var preferredUsername: String?
    /// `tid` (Microsoft Entra's tenant id).
    public var tenantId: String?
    public var authTime: Int64?
    /// `email_verified` (OIDC Core §5.1): nil when absent or null. A value that is
    /// neither a boolean nor the string "true"/"false" (some providers send
    /// strings) reads as false, so that it never vouches for an address.
    public var emailVerified: Bool?

    public init(
        issuer: String, subject: String, audience: [String], authorizedParty: String?, expiresAt: Int64, issuedAt: Int64,
        nonce: String?, email: String?, name: String?, preferredUsername: String?, tenantId: String?, authTime: Int64?,
        emailVerified: Bool? = nil
    ) {
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.authorizedParty = authorizedParty
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.nonce = nonce
        self.email = email
        self.name = name
        self.preferredUsername = preferredUsername
        self.tenantId = tenantId
        self.authTime = authTime
        self.emailVerified = emailVerified
    }
}

/// What the relying party expects of an ID token.
public struct IDTokenExpectations: Sendable {
    /// Compared byte for byte; `{tenantid}` is replaced by the token's `tid` first.
    public var issuer: String
    public var clientId: String
    /// The nonce sent in the authorization request; nil: not checked (device grant).
    public var nonce: String?
    /// Seconds since the epoch.
    public var now: Int64
    public var skewSeconds: Int64 = 60

    public init(issuer: String, clientId: String, nonce: String?, now: Int64, skewSeconds: Int64 = 60) {
        self.issuer = issuer
        self.clientId = clientId
        self.nonce = nonce
        self.now = now
        self.skewSeconds = skewSeconds
    }
}

/// ID token validation (OpenID Connect Core §3.1.3.7) of a compact JWS (RFC 7515 §7.1).
public enum IDToken {
    /// Tokens longer than this are refused before any decoding.
    static let maximumLength = 64 * 1024

    /// The token's protected header, read strictly but not verified.
    public static func header(_ token: String) throws(JOSEError) -> JWSHeader {
        try parse(token).header
    }

    /// Verifies signature with `keys` then every claim of OpenID Connect Core §3.1.3.7.
    /// Throws .unknownKey when no key of the set matches (the caller re-fetches the JWKS once and retries).
    public static func verify(_ token: String, keys: JWKSet, expect: IDTokenExpectations) throws(JOSEError)
        -> IDTokenClaims
    {
        let parts = try parse(token)
        guard let algorithm = SignatureAlgorithm(name: parts.header.algorithm) else {
            throw JOSEError(.unsupportedAlgorithm, "the ID token's algorithm is not RS256, PS256, ES256 or EdDSA")
        }
        guard let key = keys.key(id: parts.header.keyId, algorithm: algorithm.rawValue) else {
            let kid = parts.header.keyId.map(shown) ?? "(none)"
            if let id = parts.header.keyId, keys.keys.contains(where: { $0.keyId.map { sameBytes($0, id) } ?? false }) {
                throw JOSEError(
                    .unsupportedAlgorithm, "the key \(kid) of the provider's key set is not for \(algorithm.rawValue)")
            }
            throw JOSEError(.unknownKey, "no key of the provider's key set matches key id \(kid) for \(algorithm.rawValue)")
        }
        guard key.publicKey.verify(algorithm, signature: parts.signature, input: parts.signingInput) else {
            throw JOSEError(.badSignature, "the ID token's signature does not verify")
        }
        guard let payload = JSON.parseObject(parts.payload) else {
            throw JOSEError(.malformed, "the ID token's claims are not one JSON object (or have a duplicate member)")
        }
        let claims = try readClaims(payload)
        try check(claims, expect)
        return claims
    }

    private struct Parts {
        var header: JWSHeader
        var payload: [UInt8]
        var signature: [UInt8]
        var signingInput: [UInt8]
    }

    /// Splits and decodes the three parts; the header must be a strict JSON object.
    private static func parse(_ token: String) throws(JOSEError) -> Parts {
        guard token.utf8.count <= maximumLength else { throw JOSEError(.malformed, "the ID token is too long") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3 else {
            throw JOSEError(.malformed, "the ID token is not a compact JWS (three base64url parts)")
        }
        guard let headerBytes = strictBase64URL(parts[0]), let payload = strictBase64URL(parts[1]),
            let signature = strictBase64URL(parts[2])
        else { throw JOSEError(.malformed, "a part of the ID token is not unpadded base64url") }
        guard let object = JSON.parseObject(headerBytes) else {
            throw JOSEError(.malformed, "the ID token's header is not one JSON object (or has a duplicate member)")
        }
        guard let algorithm = try object.string("alg", in: "header") else {
            throw JOSEError(.malformed, "the ID token's header has no 'alg'")
        }
        // RFC 7515 §4.1.11: critical extensions must be understood; none are.
        guard object["crit"] == nil else {
            throw JOSEError(.malformed, "the ID token's header has critical extensions ('crit')")
        }
        let header = JWSHeader(
            algorithm: algorithm, keyId: try object.string("kid", in: "header"), type: try object.string("typ", in: "header"))
        return Parts(
            header: header, payload: payload, signature: signature, signingInput: Array("\(parts[0]).\(parts[1])".utf8))
    }

    private static func readClaims(_ object: JSONObject) throws(JOSEError) -> IDTokenClaims {
        func required<T>(_ name: String, _ value: T?) throws(JOSEError) -> T {
            guard let value else { throw JOSEError(.missingClaim, "the ID token has no '\(name)' claim") }
            return value
        }
        let audience: [String]
        switch object["aud"] {
        case nil: throw JOSEError(.missingClaim, "the ID token has no 'aud' claim")
        case .string(let value): audience = [value]
        case .array(let values):
            audience = try values.map { value throws(JOSEError) in
                guard case .string(let text) = value else {
                    throw JOSEError(.malformed, "the ID token's 'aud' is not a string or an array of strings")
                }
                return text
            }
        default: throw JOSEError(.malformed, "the ID token's 'aud' is not a string or an array of strings")
        }
        let subject = try required("sub", object.string("sub", in: "claim"))
        guard !subject.isEmpty else { throw JOSEError(.missingClaim, "the ID token's 'sub' claim is empty") }
        return IDTokenClaims(
            issuer: try required("iss", object.string("iss", in: "claim")),
            subject: subject,
            audience: audience,
            authorizedParty: try object.string("azp", in: "claim"),
            expiresAt: try required("exp", object.integer("exp", in: "claim")),
            issuedAt: try required("iat", object.integer("iat", in: "claim")),
            nonce: try object.string("nonce", in: "claim"),
            email: try object.string("email", in: "claim"),
            name: try object.string("name", in: "claim"),
            preferredUsername: try object.string("preferred_username", in: "claim"),
            tenantId: try object.string("tid", in: "claim"),
            authTime: try object.integer("auth_time", in: "claim"),
            emailVerified: object.flag("email_verified"))
    }

    /// OpenID Connect Core §3.1.3.7 steps 2–4, 9, 10 and 11.
    private static func check(_ claims: IDTokenClaims, _ expect: IDTokenExpectations) throws(JOSEError) {
        var issuer = expect.issuer
        let template = "{tenantid}"
        if issuer.contains(template) {
            guard let tenant = claims.tenantId, !tenant.isEmpty else {
                throw JOSEError(.missingClaim, "the issuer \(expect.issuer) needs the ID token's 'tid' claim")
            }
            issuer = issuer.replacing(template, with: tenant)
        }
        guard sameBytes(claims.issuer, issuer) else {
            throw JOSEError(.issuer, "the ID token's issuer \(shown(claims.issuer)) is not \(shown(issuer))")
        }
        guard claims.audience.contains(where: { sameBytes($0, expect.clientId) }) else {
            throw JOSEError(
                .audience,
                "the ID token's audience [\(claims.audience.prefix(5).map(shown).joined(separator: ", "))] does not contain \(shown(expect.clientId))"
            )
        }
        if claims.audience.count > 1 || claims.authorizedParty != nil {
            guard let party = claims.authorizedParty, sameBytes(party, expect.clientId) else {
                let found = claims.authorizedParty.map(shown) ?? "missing"
                throw JOSEError(
                    .authorizedParty, "the ID token's authorized party (azp) is \(found), not \(shown(expect.clientId))")
            }
        }
        guard claims.expiresAt > expect.now - expect.skewSeconds else {
            throw JOSEError(.expired, "the ID token expired at \(claims.expiresAt) (now \(expect.now))")
        }
        guard claims.issuedAt <= expect.now + expect.skewSeconds else {
            throw JOSEError(.issuedInFuture, "the ID token is issued at \(claims.issuedAt), after now (\(expect.now))")
        }
        if let expected = expect.nonce {
            guard let nonce = claims.nonce else { throw JOSEError(.nonce, "the ID token has no 'nonce' claim") }
            guard Crypto.constantTimeEquals(nonce, expected) else {
                throw JOSEError(.nonce, "the ID token's nonce is not the one sent with the sign-in")
            }
        }
    }
}

/// A value from a token (key id, issuer, audience) quoted for a message: at
/// most 100 characters, control characters replaced, so a hostile token
/// cannot flood or forge log lines.
func shown(_ value: String) -> String {
    let clean = value.unicodeScalars.prefix(100).map { $0.properties.generalCategory == .control ? "?" : Character($0) }
    return "'" + String(clean) + (value.unicodeScalars.count > 100 ? "…'" : "'")
}
