import BrokerJOSE
import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// Passkeys on the hosted page (docs/server.md, "Passkeys"): registration
/// for the signed-in account, sign-in with a discoverable credential, and
/// the account's list. Every ceremony is one challenge, bound to the
/// attempt's binding cookie (it is stored with the cookie's digest and
/// expires with the attempt), used once: the row is deleted before the
/// answer is checked, so a failed answer uses it up too. Only the
/// challenge's digest is stored, and not after use.
enum Passkeys {
    static let migration = Migration(
        "0010-passkeys",
        """
        CREATE TABLE passkeys (
            credential_id TEXT PRIMARY KEY NOT NULL,
            user_id TEXT NOT NULL REFERENCES users(id),
            rp_id TEXT NOT NULL,
            public_key TEXT NOT NULL,
            algorithm BIGINT NOT NULL,
            sign_count BIGINT NOT NULL,
            transports TEXT NOT NULL,
            name TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT
        );
        CREATE INDEX passkeys_user ON passkeys(user_id);
        CREATE TABLE passkey_ceremonies (
            binding_hash TEXT NOT NULL,
            kind TEXT NOT NULL,
            challenge_hash TEXT NOT NULL,
            rp_id TEXT NOT NULL,
            user_id TEXT,
            expires_at BIGINT NOT NULL,
            PRIMARY KEY (binding_hash, kind)
        );
        CREATE INDEX passkey_ceremonies_expiry ON passkey_ceremonies(expires_at);
        """)

    /// At most this many passkeys per account.
    static let maximumPerUser = 20
    /// A passkey's name: 1 to 64 characters.
    static let nameLength = 1...64
    /// How long the browser may take (WebAuthn's `timeout`), in milliseconds.
    static let timeoutMillis: Int64 = 120_000

    /// The relying party of a page served at `host`: the longest configured
    /// id equal to the host or a registrable suffix of it (WebAuthn §5.1.4.1
    /// as browsers apply it); nil for an IP literal, which names none.
    static func relyingParty(host: String, configured: [String]) -> String? {
        var name = host.lowercased()
        if name.hasPrefix("[") || isIPLiteral(name) { return nil }
        if name.hasSuffix(".") { name.removeLast() }
        return configured.map { $0.lowercased() }.filter { name == $0 || name.hasSuffix("." + $0) }.max { $0.count < $1.count }
    }
}

// MARK: Wire

/// `toJSON()` of a PublicKeyCredential (WebAuthn Level 3's JSON forms),
/// which the page sends as the browser made it. Binary members are base64url.
struct PasskeyCredentialJSON: Decodable {
    struct Response: Decodable {
        var clientDataJSON: String
        var attestationObject: String?
        var authenticatorData: String?
        var signature: String?
        var userHandle: String?
        var transports: [String]?
    }
    var id: String
    var rawId: String
    var type: String
    var response: Response
}

struct PasskeyCeremonyRequest: Decodable {
    var attemptId: String
}

struct PasskeyRegisterRequest: Decodable {
    var attemptId: String
    var credential: PasskeyCredentialJSON
    var name: String?
}

struct PasskeySignInRequest: Decodable {
    var attemptId: String
    var credential: PasskeyCredentialJSON
    var invite: String?
}

struct PasskeyRenameRequest: Decodable {
    var id: String
    var name: String
}

struct PasskeyDeleteRequest: Decodable {
    var id: String
}

/// One passkey of the account, as the page lists it (no key, no counter).
struct PasskeyView: Encodable {
    var id: String
    var name: String
    var rpId: String
    var transports: [String]
    var createdAt: Timestamp
    var lastUsedAt: Timestamp?
}

/// The options the page passes to `PublicKeyCredential.parseCreationOptionsFromJSON`.
struct PasskeyCreationOptions: Encodable {
    struct RP: Encodable {
        var id: String
        var name: String
    }
    struct User: Encodable {
        var id: String
        var name: String
        var displayName: String
    }
    struct Parameter: Encodable {
        var type = "public-key"
        var alg: Int
    }
    struct Descriptor: Encodable {
        var type = "public-key"
        var id: String
        var transports: [String]?
    }
    struct Selection: Encodable {
        var residentKey = "required"
        var requireResidentKey = true
        var userVerification = "required"
    }
    var challenge: String
    var rp: RP
    var user: User
    var pubKeyCredParams: [Parameter]
    var timeout: Int64
    var excludeCredentials: [Descriptor]
    var authenticatorSelection = Selection()
    var attestation = "none"
}

/// The options the page passes to `PublicKeyCredential.parseRequestOptionsFromJSON`.
struct PasskeyRequestOptions: Encodable {
    var challenge: String
    var rpId: String
    var timeout: Int64
    var userVerification = "required"
    var allowCredentials: [PasskeyCreationOptions.Descriptor] = []
}

// MARK: Routes

extension LoginService {
    /// `{base}/browser/passkeys/…` (docs/server.md, "Passkeys").
    func passkeyRoute(_ key: String) throws(APIError) -> (
        String, Bool, (HTTPServerRequest) throws(APIError) -> HTTPServerResponse
    ) {
        switch key {
        case "passkeys/page.js":
            return (
                "passkeys.script", false, { _ in HostedPage.asset(PasskeyPage.script, type: "text/javascript; charset=utf-8") }
            )
        case "passkeys/register/options": return ("passkeys.register.options", true, passkeyRegisterOptions)
        case "passkeys/register": return ("passkeys.register", true, passkeyRegister)
        case "passkeys/signin/options": return ("passkeys.signin.options", true, passkeySignInOptions)
        case "passkeys/signin": return ("passkeys.signin", true, passkeySignIn)
        case "passkeys/list": return ("passkeys.list", false, passkeyList)
        case "passkeys/rename": return ("passkeys.rename", true, passkeyRename)
        case "passkeys/delete": return ("passkeys.delete", true, passkeyDelete)
        default: throw APIError(.notFound, "no such browser route")
        }
    }

    /// The relying party of this server's origin (the page's), or 400 PASSKEY_RP_NOT_CONFIGURED.
    func passkeyRelyingParty() throws(APIError) -> String {
        let host = URLParts(splitting: issuer)?.host ?? ""
        guard let rpId = Passkeys.relyingParty(host: host, configured: configuration.passkeyRpIds) else {
            throw APIError(
                .passkeyRpNotConfigured,
                "passkeys are not set up for this page's origin; the server's passkeyRpIds name no relying party for it")
        }
        return rpId
    }

    /// The attempt the page is for, held by this browser (its binding cookie), still open.
    func boundAttempt(_ db: Database, _ request: HTTPServerRequest, attemptId: String, now: Int64) throws -> AttemptRecord {
        guard let attempt = try Records.attempt(db, id: attemptId, now: now), attempt.bindingHash != nil else {
            throw APIError(.attemptUnknown, "no such attempt")
        }
        guard isBound(request, attempt, cookieName: bindingCookieName(attemptId: attemptId)) else { throw Self.browserMismatch }
        switch attempt.state {
        case .expired: throw APIError(.attemptExpired, "the attempt has expired")
        case .cancelled: throw APIError(.attemptCancelled, "the attempt was cancelled")
        case .completed: throw APIError(.attemptAlreadyExchanged, "the attempt was already completed")
        case .pending, .authorized: return attempt
        }
    }

    /// A new challenge for this browser's attempt: replaces the one of the same kind it had.
    func issueChallenge(_ db: Database, attempt: AttemptRecord, kind: String, rpId: String, userId: String?, now: Int64)
        throws -> String
    {
        let challenge = try Crypto.randomToken(bytes: 32)
        try db.run("DELETE FROM passkey_ceremonies WHERE expires_at <= ?", now)
        try db.run(
            """
            INSERT INTO passkey_ceremonies (binding_hash, kind, challenge_hash, rp_id, user_id, expires_at)
            VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(binding_hash, kind) DO UPDATE SET challenge_hash = excluded.challenge_hash,
                rp_id = excluded.rp_id, user_id = excluded.user_id, expires_at = excluded.expires_at
            """, attempt.bindingHash ?? "", kind, Records.hash(challenge), rpId, userId, attempt.expiresAt)
        return challenge
    }

    /// Takes this browser's challenge of `kind` (deleting it, whatever comes
    /// next) and checks that the client data answers it. Answers the
    /// expectation and the user the challenge was issued for.
    func consumeChallenge(
        _ request: HTTPServerRequest, attemptId: String, kind: WebAuthn.Expectation.Ceremony, clientDataJSON: [UInt8]
    ) throws(APIError) -> (WebAuthn.Expectation, userId: String?) {
        let now = clock()
        let challenge = WebAuthn.challenge(ofClientData: clientDataJSON)
        let row = try store.perform { db in
            let attempt = try boundAttempt(db, request, attemptId: attemptId, now: now)
            let binding = attempt.bindingHash ?? ""
            let row = try db.queryOne(
                "SELECT * FROM passkey_ceremonies WHERE binding_hash = ? AND kind = ?", binding, kind.rawValue)
            try db.run("DELETE FROM passkey_ceremonies WHERE binding_hash = ? AND kind = ?", binding, kind.rawValue)
            return row
        }
        guard let row, now < row.millis("expires_at") else {
            throw APIError(.passkeyInvalid, "no passkey challenge is open in this browser; start again")
        }
        guard let challenge, Crypto.constantTimeEquals(Records.hash(challenge), row.text("challenge_hash")) else {
            throw APIError(.passkeyInvalid, "the browser answered another challenge; start again")
        }
        let expected = WebAuthn.Expectation(ceremony: kind, challenge: challenge, origin: issuer, rpId: row.text("rp_id"))
        return (expected, row.string("user_id"))
    }

    /// The signed-in browser session's user, or 401 LOGIN_REQUIRED.
    func signedInUser(_ db: Database, _ request: HTTPServerRequest, now: Int64) throws -> UserRecord {
        guard let (_, user) = try browserSession(db, request, now: now) else { throw APIError(.loginRequired, "sign in first") }
        return user
    }

    // MARK: Registration

    func passkeyRegisterOptions(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeyCeremonyRequest.self, request)
        let rpId = try passkeyRelyingParty()
        try limit("passkey.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        let now = clock()
        let options = try store.perform { db in
            let attempt = try boundAttempt(db, request, attemptId: body.attemptId, now: now)
            let user = try signedInUser(db, request, now: now)
            let existing = try db.query("SELECT credential_id, transports FROM passkeys WHERE user_id = ?", user.id)
            if existing.count >= Passkeys.maximumPerUser {
                throw APIError(.invalidRequest, "this account has \(Passkeys.maximumPerUser) passkeys; delete one first")
            }
            let challenge = try issueChallenge(
                db, attempt: attempt, kind: "webauthn.create", rpId: rpId, userId: user.id, now: now)
            return PasskeyCreationOptions(
                challenge: challenge, rp: .init(id: rpId, name: rpId),
                user: .init(id: Base64URL.encode(Array(user.id.utf8)), name: user.email, displayName: user.displayName),
                pubKeyCredParams: SignatureKey.Algorithm.allCases.map { .init(alg: $0.rawValue) },
                timeout: Passkeys.timeoutMillis,
                excludeCredentials: existing.map {
                    .init(id: $0.text("credential_id"), transports: Self.transports($0.text("transports")))
                })
        }
        return json(200, options)
    }

    func passkeyRegister(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeyRegisterRequest.self, request)
        let credential = body.credential
        guard credential.type == "public-key", let clientData = Base64URL.decode(credential.response.clientDataJSON),
            let attestation = credential.response.attestationObject.flatMap(Base64URL.decode),
            let rawId = Base64URL.decode(credential.rawId)
        else { throw APIError(.invalidRequest, "send the credential as the browser's toJSON() made it") }
        let name = (body.name ?? "Passkey").trimmingCharacters(in: .whitespacesAndNewlines)
        guard Passkeys.nameLength.contains(name.count) else {
            throw APIError(.invalidRequest, "a passkey's name is 1 to 64 characters")
        }
        let transports = Array((credential.response.transports ?? []).filter { Self.isTransport($0) }.prefix(8))
        let (expected, userId) = try consumeChallenge(
            request, attemptId: body.attemptId, kind: .create, clientDataJSON: clientData)
        let registration = try WebAuthn.verifyRegistration(
            clientDataJSON: clientData, attestationObject: attestation, expected: expected)
        guard registration.credentialId == rawId else {
            throw APIError(.passkeyInvalid, "the credential id is not the one the authenticator made")
        }
        let now = clock()
        let view: PasskeyView = try store.perform { db in
            let user = try signedInUser(db, request, now: now)
            guard user.id == userId else {
                throw APIError(.sessionChanged, "the browser session changed during the ceremony; start again")
            }
            let count = try db.queryOne("SELECT COUNT(*) AS n FROM passkeys WHERE user_id = ?", user.id)?.int("n") ?? 0
            if count >= Passkeys.maximumPerUser {
                throw APIError(.invalidRequest, "this account has \(Passkeys.maximumPerUser) passkeys; delete one first")
            }
            let id = Base64URL.encode(registration.credentialId)
            if try db.queryOne("SELECT user_id FROM passkeys WHERE credential_id = ?", id) != nil {
                throw APIError(.passkeyInvalid, "this passkey is already registered")
            }
            try db.run(
                """
                INSERT INTO passkeys (credential_id, user_id, rp_id, public_key, algorithm, sign_count, transports, name,
                    created_at, last_used_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)
                """, id, user.id, expected.rpId, Base64URL.encode(registration.publicKey),
                Int64(registration.algorithm.rawValue), Int64(registration.signCount), transports.joined(separator: ","),
                name, now)
            Log.info(
                "passkey registered",
                ["user.id": user.id, "passkey.rp": expected.rpId, "passkey.attestation": registration.attestationFormat])
            return PasskeyView(
                id: id, name: name, rpId: expected.rpId, transports: transports,
                createdAt: Timestamp(millisecondsSince1970: now), lastUsedAt: nil)
        }
        return json(200, view)
    }

    // MARK: Sign-in

    func passkeySignInOptions(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeyCeremonyRequest.self, request)
        let rpId = try passkeyRelyingParty()
        try limit("passkey.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        let now = clock()
        let challenge = try store.perform { db in
            let attempt = try boundAttempt(db, request, attemptId: body.attemptId, now: now)
            return try issueChallenge(db, attempt: attempt, kind: "webauthn.get", rpId: rpId, userId: nil, now: now)
        }
        return json(200, PasskeyRequestOptions(challenge: challenge, rpId: rpId, timeout: Passkeys.timeoutMillis))
    }

    func passkeySignIn(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeySignInRequest.self, request)
        let credential = body.credential
        guard credential.type == "public-key", let clientData = Base64URL.decode(credential.response.clientDataJSON),
            let authenticatorData = credential.response.authenticatorData.flatMap(Base64URL.decode),
            let signature = credential.response.signature.flatMap(Base64URL.decode),
            let rawId = Base64URL.decode(credential.rawId)
        else { throw APIError(.invalidRequest, "send the credential as the browser's toJSON() made it") }
        try limit("passkey.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        let (expected, _) = try consumeChallenge(request, attemptId: body.attemptId, kind: .get, clientDataJSON: clientData)
        let id = Base64URL.encode(rawId)
        let stored = try store.perform { db in
            try db.queryOne("SELECT * FROM passkeys WHERE credential_id = ? AND rp_id = ?", id, expected.rpId)
        }
        guard let stored, let publicKey = Base64URL.decode(stored.text("public_key")) else {
            throw APIError(.passkeyUnknown, "this passkey is not registered here (it may have been deleted)")
        }
        let userId = stored.text("user_id")
        if let handle = credential.response.userHandle, !handle.isEmpty, Base64URL.decode(handle) != Array(userId.utf8) {
            throw APIError(.passkeyInvalid, "the passkey names another user")
        }
        let storedCount = UInt32(clamping: stored.int("sign_count") ?? 0)
        let count = try WebAuthn.verifyAssertion(
            clientDataJSON: clientData, authenticatorData: authenticatorData, signature: signature, publicKey: publicKey,
            storedSignCount: storedCount, expected: expected)
        let now = clock()
        let started = try store.perform { db in
            // The counter moves from the value checked, once: a second use of the same count loses here.
            let changed = try db.run(
                "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE credential_id = ? AND sign_count = ?",
                Int64(count), now, id, Int64(storedCount))
            guard changed == 1 else {
                throw APIError(.passkeyCloned, "the passkey's signature counter went backwards: the authenticator may be a clone")
            }
            guard let user = try Records.user(db, id: userId), let email = EmailAddress(user.email) else {
                throw APIError(.passkeyUnknown, "the passkey's account no longer exists")
            }
            return try startBrowserSession(
                db, SignInIdentity(email: email, method: "passkey"), now: now, invitation: body.invite)
        }
        return browserSessionAnswer(started)
    }

    // MARK: The account's passkeys

    func passkeyList(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let now = clock()
        let views = try store.perform { db in
            let user = try signedInUser(db, request, now: now)
            return try db.query("SELECT * FROM passkeys WHERE user_id = ? ORDER BY created_at, credential_id", user.id).map {
                row in
                PasskeyView(
                    id: row.text("credential_id"), name: row.text("name"), rpId: row.text("rp_id"),
                    transports: Self.transports(row.text("transports")) ?? [],
                    createdAt: Timestamp(millisecondsSince1970: row.millis("created_at")),
                    lastUsedAt: row.int("last_used_at").map { Timestamp(millisecondsSince1970: $0) })
            }
        }
        return json(200, ["passkeys": views])
    }

    func passkeyRename(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeyRenameRequest.self, request)
        let name = body.name.trimmingCharacters(in: .whitespacesAndNewlines)
        guard Passkeys.nameLength.contains(name.count) else {
            throw APIError(.invalidRequest, "a passkey's name is 1 to 64 characters")
        }
        let now = clock()
        try store.perform { db in
            let user = try signedInUser(db, request, now: now)
            let changed = try db.run(
                "UPDATE passkeys SET name = ? WHERE credential_id = ? AND user_id = ?", name, body.id, user.id)
            guard changed == 1 else { throw APIError(.passkeyUnknown, "no such passkey on this account") }
        }
        return json(200, ["renamed": true])
    }

    func passkeyDelete(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(PasskeyDeleteRequest.self, request)
        let now = clock()
        try store.perform { db in
            let user = try signedInUser(db, request, now: now)
            let changed = try db.run("DELETE FROM passkeys WHERE credential_id = ? AND user_id = ?", body.id, user.id)
            guard changed == 1 else { throw APIError(.passkeyUnknown, "no such passkey on this account") }
            Log.info("passkey deleted", ["user.id": user.id])
        }
        return json(200, ["deleted": true])
    }

    /// WebAuthn's transport hints (AuthenticatorTransport), stored comma-separated.
    static func isTransport(_ text: String) -> Bool {
        ["usb", "nfc", "ble", "smart-card", "hybrid", "internal"].contains(text)
    }
    static func transports(_ stored: String) -> [String]? {
        stored.isEmpty ? nil : stored.split(separator: ",").map(String.init)
    }
}
