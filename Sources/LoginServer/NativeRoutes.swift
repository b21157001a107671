import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// docs/protocol.md §5: the native routes.
extension LoginService {
    // MARK: §5.1 Create

    func create(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(CreateAttemptRequest.self, request)
        guard ProofSecret.isWellFormed(body.codeChallenge) else {
            throw APIError(.invalidRequest, "codeChallenge is 43 base64url characters")
        }
        guard ProofSecret.isWellFormed(body.recoveryChallenge) else {
            throw APIError(.invalidRequest, "recoveryChallenge is 43 base64url characters")
        }
        try Self.checkPrompt(body.prompt)
        try Self.checkLoginHint(body.loginHint)
        guard let client = clients[body.clientId] else {
            throw APIError(.clientUnknown, "no client is registered with this client id")
        }
        // §1: matched exactly, scheme and host case-insensitively; the attempt
        // keeps the URL as registered (a loopback redirect with the port it
        // was sent with), so every callback is built on it.
        guard let returnURL = client.registeredReturnURL(matching: body.returnUrl) else {
            throw APIError(.returnURLNotRegistered, "the return URL is not registered for this client (matched exactly)")
        }
        try limit("create.client", client.clientId, configuration.rateLimits.create)
        try limit("create.address", request.remoteAddress, configuration.rateLimits.create)

        let attemptId = try randomToken(bytes: 16)
        let now = clock()
        let expiresAt = now + configuration.lifetimeMillis
        let idHash = Records.hash(attemptId)
        let attemptURL = returnURL.attemptURL(requested: body.returnUrl)
        try store.perform { db in
            try db.run(
                """
                INSERT INTO attempts (id_hash, client_id, return_url, code_challenge, recovery_challenge, ephemeral,
                    state, created_at, expires_at, prompt, login_hint) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)
                """, idHash, client.clientId, attemptURL, body.codeChallenge, body.recoveryChallenge, body.ephemeral,
                now, expiresAt, body.prompt, body.loginHint)
        }
        let answer = CreateAttemptResponse(
            attemptId: attemptId,
            authorizeUrl: issuer + configuration.basePath + "/browser/login?attempt=" + attemptId,
            expiresAt: Timestamp(millisecondsSince1970: expiresAt), issuer: issuer)
        Log.info("attempt created", ["client.id": client.clientId])
        return json(201, answer)
    }

    /// §5.1: `prompt`, when present, is `"login"`, the one value defined.
    /// Another value is refused rather than ignored (as OpenID Connect's
    /// `prompt_values_supported` rule does): the app asked the page for
    /// something this server would not do. JSON null is absent.
    static func checkPrompt(_ prompt: String?) throws(APIError) {
        guard let prompt, prompt != "login" else { return }
        throw APIError(.invalidRequest, "prompt is \"login\" when present (the only value defined)")
    }

    /// The longest `loginHint`, in UTF-8 bytes (an address's limit, RFC 5321).
    static let maximumLoginHintBytes = 254

    /// §5.1: `loginHint`, when present, is an email address of at most 254
    /// bytes, by the rules the page's sign-in applies to an address (so what
    /// is pre-filled can be sent). It is shown in a page: the page sets it as
    /// the address field's value, never as markup.
    static func checkLoginHint(_ hint: String?) throws(APIError) {
        guard let hint else { return }
        guard hint.utf8.count <= maximumLoginHintBytes else {
            throw APIError(.invalidRequest, "loginHint is at most \(maximumLoginHintBytes) bytes")
        }
        guard EmailAddress(hint) != nil else {
            throw APIError(.invalidRequest, "loginHint is an email address")
        }
    }

    // MARK: §5.2 Exchange

    func exchange(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        try limit("exchange.address", request.remoteAddress, configuration.rateLimits.exchange)
        let body = try decode(ExchangeRequest.self, request)
        let now = clock()
        let clientLimit = { (clientId: String) throws(APIError) in
            try self.limit(
                "exchange.client", clientId, self.configuration.rateLimits.exchange,
                message: "too many exchanges for this client")
        }
        // The client's bucket is taken before anything of the exchange. On
        // SQLite the buckets are in memory: taken inside the exchange's one
        // transaction, once the attempt names its client. On PostgreSQL a rate
        // limit is its own statement, not part of a transaction that may run
        // again: the client is read first, in a transaction of its own.
        let limitInside = !store.sharesRateLimits
        if !limitInside {
            let clientId: String? = try store.perform { db in
                try db.queryOne("SELECT client_id FROM attempts WHERE id_hash = ?", Records.hash(attemptId))?.string(
                    "client_id")
            }
            guard let clientId else { throw APIError(.attemptUnknown, "no such attempt") }
            try clientLimit(clientId)
        }
        // What needs no database is made before the transaction, so the
        // writer (one at a time) spends only the statements on it.
        let codeHash = Records.hash(body.code)
        // The verifier's S256 challenge, compared inside with the attempt's.
        let verifierChallenge =
            ProofSecret.isWellFormed(body.codeVerifier) ? ProofSecret(value: body.codeVerifier).challenge : nil
        let sessionId = try randomToken(bytes: 16)
        let tokens = tokenPair(sessionId: sessionId, generation: 0)
        let refreshHash = Records.hash(tokens.refresh)
        let accessHash = Records.hash(tokens.access)
        let digest = Crypto.digest(tokens.access)
        let (answer, clientId, userId): (ExchangeResponse, String, String) = try store.perform { db in
            guard var attempt = try Records.attempt(db, id: attemptId, now: now) else {
                throw APIError(.attemptUnknown, "no such attempt")
            }
            if limitInside { try clientLimit(attempt.clientId) }
            guard let verifierChallenge, Crypto.constantTimeEquals(verifierChallenge, attempt.codeChallenge) else {
                throw APIError(.invalidGrant, "the code or the code verifier is wrong")
            }
            switch attempt.state {
            case .pending: throw APIError(.attemptNotAuthorized, "the attempt has not been authorized yet")
            case .completed:
                if let sessionId = attempt.sessionId { try Records.revokeSession(db, id: sessionId, now: now) }
                Log.warning("replayed exchange; the issued session is revoked", ["client.id": attempt.clientId])
                throw APIError(.attemptAlreadyExchanged, "the code was already exchanged; the session it issued is revoked")
            case .expired: throw APIError(.attemptExpired, "the attempt has expired")
            case .cancelled: throw APIError(.attemptCancelled, "the attempt was cancelled")
            case .authorized: break
            }
            guard let expected = attempt.codeHash, Crypto.constantTimeEquals(codeHash, expected) else {
                attempt.wrongCodes += 1
                if attempt.wrongCodes >= Self.maximumWrongCodes {
                    try db.run(
                        "UPDATE attempts SET wrong_codes = ?, state = 'cancelled', ended_at = ? WHERE id_hash = ?",
                        attempt.wrongCodes, now, attempt.idHash)
                    Log.warning("attempt cancelled after wrong codes", ["client.id": attempt.clientId])
                } else {
                    try db.run("UPDATE attempts SET wrong_codes = ? WHERE id_hash = ?", attempt.wrongCodes, attempt.idHash)
                }
                throw APIError(.invalidGrant, "the code or the code verifier is wrong")
            }
            guard let browserSessionId = attempt.browserSessionId,
                let browser = try Records.browserSession(db, id: browserSessionId),
                let user = try Records.user(db, id: browser.userId)
            else {
                try Records.cancel(db, attempt, now: now)
                throw APIError(.attemptCancelled, "the browser session that authorized the attempt is gone")
            }
            if user.disabled {
                try Records.cancel(db, attempt, now: now)
                throw APIError(.authUserDisabled, "the account is disabled")
            }
            let ended = browser.revokedAt != nil || now >= browser.expiresAt
            if try ended || revokeIfTestBaseRemoved(db, browser, now: now) {
                try Records.cancel(db, attempt, now: now)
                throw APIError(.attemptCancelled, "the browser session that authorized the attempt has ended")
            }
            let accessExpiresAt = min(now + configuration.accessTokenLifetimeMillis, browser.expiresAt)
            try db.run(
                """
                INSERT INTO sessions (id, user_id, browser_session_id, client_id, created_at, expires_at,
                    authenticated_at, auth_method, generation, rotated_at, test_base) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)
                """, sessionId, user.id, browser.id, attempt.clientId, now, browser.expiresAt, browser.authenticatedAt,
                browser.authMethod, now, browser.testBase)
            try db.run(
                "INSERT INTO refresh_tokens (hash, session_id, generation) VALUES (?, ?, 0)",
                refreshHash, sessionId)
            try db.run(
                "INSERT INTO access_tokens (hash, session_id, expires_at) VALUES (?, ?, ?)",
                accessHash, sessionId, accessExpiresAt)
            try db.run(
                """
                UPDATE attempts SET state = 'completed', session_id = ?, issued_at = ?, token_digest = ?, code_hash = NULL
                WHERE id_hash = ?
                """, sessionId, now, digest, attempt.idHash)
            let session = IssuedSession(
                sessionId: sessionId, accessToken: tokens.access,
                accessTokenExpiresAt: Timestamp(millisecondsSince1970: accessExpiresAt), refreshToken: tokens.refresh,
                expiresAt: Timestamp(millisecondsSince1970: browser.expiresAt),
                authenticatedAt: Timestamp(millisecondsSince1970: browser.authenticatedAt),
                authMethod: browser.authMethod, account: user.account)
            let receipt = Receipt(
                attemptId: attemptId, sessionId: sessionId, issuedAt: Timestamp(millisecondsSince1970: now),
                tokenDigest: digest)
            return (ExchangeResponse(session: session, receipt: receipt), attempt.clientId, user.id)
        }
        Log.info("session issued", ["client.id": clientId, "session.id": sessionId, "user.id": userId])
        if configuration.testExchangeDelayMillis > 0 {
            // FOR TESTS ONLY: the exchange is committed; hold the answer back.
            usleep(UInt32(min(configuration.testExchangeDelayMillis * 1000, Int64(UInt32.max))))
        }
        return json(200, answer)
    }

    // MARK: §5.3–5.5 Status, cancel, acknowledge

    /// Loads the attempt and checks the recovery key: 404 first, then 403.
    private func provenAttempt(_ db: Database, id: String, recoveryKey: String, now: Int64) throws -> AttemptRecord {
        guard let attempt = try Records.attempt(db, id: id, now: now) else {
            throw APIError(.attemptUnknown, "no such attempt")
        }
        guard ProofSecret.isWellFormed(recoveryKey),
            ProofSecret(value: recoveryKey).verifies(challenge: attempt.recoveryChallenge)
        else {
            throw APIError(.proofInvalid, "the recovery key does not prove this attempt")
        }
        return attempt
    }

    func status(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        let body = try decode(RecoveryRequest.self, request)
        let now = clock()
        let answer: StatusResponse = try store.perform { db in
            let attempt = try provenAttempt(db, id: attemptId, recoveryKey: body.recoveryKey, now: now)
            var answer = StatusResponse(state: attempt.state, expiresAt: Timestamp(millisecondsSince1970: attempt.expiresAt))
            if attempt.state == .completed, let sessionId = attempt.sessionId,
                let session = try Records.session(db, id: sessionId)
            {
                let user = try Records.user(db, id: session.userId)
                answer.receipt = Receipt(
                    attemptId: attemptId, sessionId: sessionId,
                    issuedAt: Timestamp(millisecondsSince1970: attempt.issuedAt ?? 0), tokenDigest: attempt.tokenDigest ?? "")
                answer.sessionExpiresAt = Timestamp(millisecondsSince1970: session.expiresAt)
                answer.sessionRevoked =
                    session.revokedAt != nil || (user?.disabled ?? true) || !testMarkerHolds(session.testBase)
            }
            return answer
        }
        return json(200, answer)
    }

    func cancel(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        let body = try decode(RecoveryRequest.self, request)
        let now = clock()
        let state: String = try store.perform { db in
            let attempt = try provenAttempt(db, id: attemptId, recoveryKey: body.recoveryKey, now: now)
            switch attempt.state {
            case .pending, .authorized:
                try Records.cancel(db, attempt, now: now)
                Log.info("attempt cancelled by the native host", ["client.id": attempt.clientId])
                return "cancelled"
            case .cancelled, .expired: return attempt.state.rawValue
            case .completed: throw APIError(.attemptAlreadyExchanged, "the attempt was already exchanged; reconcile it")
            }
        }
        return json(200, StateResponse(state: state))
    }

    func acknowledge(_ request: HTTPServerRequest, attemptId: String) throws(APIError) -> HTTPServerResponse {
        let body = try decode(RecoveryRequest.self, request)
        let now = clock()
        try store.perform { db in
            let attempt = try provenAttempt(db, id: attemptId, recoveryKey: body.recoveryKey, now: now)
            switch attempt.state {
            case .pending, .authorized: throw APIError(.attemptActive, "the attempt is still active; cancel it first")
            case .completed, .cancelled, .expired: try db.run("DELETE FROM attempts WHERE id_hash = ?", attempt.idHash)
            }
        }
        return json(200, StateResponse(state: "acknowledged"))
    }

    // MARK: §5.6 Session

    func nativeSession(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let (session, user) = try authenticate(request)
        return json(
            200,
            SessionInfoResponse(
                sessionId: session.id, expiresAt: Timestamp(millisecondsSince1970: session.expiresAt),
                account: user.account))
    }

    /// The bearer token of `request`: nil when there is no `Authorization`
    /// header; throws UNAUTHENTICATED when it is malformed.
    func bearerToken(_ request: HTTPServerRequest) throws(APIError) -> String? {
        guard let header = request.header("authorization") else { return nil }
        let parts = header.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
            Base64URL.isEncoded(String(parts[1]), length: parts[1].utf8.count),
            !parts[1].isEmpty
        else {
            throw APIError(.unauthenticated, "the Authorization header is not 'Bearer <token>'")
        }
        return String(parts[1])
    }

    /// §5.6 / §8: checks an access token. Order: disabled user, revoked
    /// session (also an unknown token), expired session, expired token.
    func authenticate(_ request: HTTPServerRequest) throws(APIError) -> (SessionRecord, UserRecord) {
        guard let token = try bearerToken(request) else {
            throw APIError(.unauthenticated, "send 'Authorization: Bearer <accessToken>'")
        }
        let now = clock()
        return try store.perform { db in
            let row = try db.queryOne("SELECT * FROM access_tokens WHERE hash = ?", Records.hash(token))
            let (session, user) = try liveSession(db, row, unknown: "the session is not known or was revoked", now: now)
            if now >= row?.millis("expires_at") ?? 0 {
                throw APIError(.tokenExpired, "the access token has expired; refresh it")
            }
            return (session, user)
        }
    }

    /// The session a token `row` names, checked in the order of §5.6 / §8:
    /// unknown, disabled user, revoked session, expired session.
    private func liveSession(_ db: Database, _ row: Row?, unknown: String, now: Int64) throws -> (SessionRecord, UserRecord) {
        guard let row, let session = try Records.session(db, id: row.text("session_id")),
            let user = try Records.user(db, id: session.userId)
        else {
            throw APIError(.sessionRevoked, unknown)
        }
        if user.disabled { throw APIError(.authUserDisabled, "the account is disabled") }
        if session.revokedAt != nil { throw APIError(.sessionRevoked, "the session was revoked") }
        if now >= session.expiresAt { throw APIError(.sessionExpired, "the session has expired") }
        try checkTestMarker(db, session, now: now)
        return (session, user)
    }

    // MARK: §5.7 Refresh

    func refresh(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(RefreshRequest.self, request)
        let now = clock()
        let answer: RefreshResponse = try store.perform { db in
            let row = try db.queryOne("SELECT * FROM refresh_tokens WHERE hash = ?", Records.hash(body.refreshToken))
            let (session, _) = try liveSession(db, row, unknown: "the refresh token is not known", now: now)
            let generation = row?.int("generation") ?? -1
            let tokens: (access: String, refresh: String)
            let accessExpiresAt: Int64
            if generation == session.generation {
                let next = generation + 1
                tokens = tokenPair(sessionId: session.id, generation: next)
                accessExpiresAt = min(now + configuration.accessTokenLifetimeMillis, session.expiresAt)
                try db.run("UPDATE sessions SET generation = ?, rotated_at = ? WHERE id = ?", next, now, session.id)
                try db.run(
                    "INSERT INTO refresh_tokens (hash, session_id, generation) VALUES (?, ?, ?)",
                    Records.hash(tokens.refresh), session.id, next)
                try db.run(
                    "INSERT INTO access_tokens (hash, session_id, expires_at) VALUES (?, ?, ?)",
                    Records.hash(tokens.access), session.id, accessExpiresAt)
            } else if generation == session.generation - 1 && now < session.rotatedAt + configuration.refreshGraceMillis {
                // The immediate predecessor inside its grace window: the same successor again.
                tokens = tokenPair(sessionId: session.id, generation: session.generation)
                accessExpiresAt = min(session.rotatedAt + configuration.accessTokenLifetimeMillis, session.expiresAt)
            } else {
                try Records.revokeSession(db, id: session.id, now: now)
                Log.warning("refresh token reused; session revoked", ["session.id": session.id])
                throw APIError(.sessionRevoked, "an old refresh token was reused; the session is revoked")
            }
            return RefreshResponse(
                accessToken: tokens.access, accessTokenExpiresAt: Timestamp(millisecondsSince1970: accessExpiresAt),
                refreshToken: tokens.refresh, expiresAt: Timestamp(millisecondsSince1970: session.expiresAt))
        }
        return json(200, answer)
    }

    // MARK: §5.8 Revoke

    func revoke(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let bearer: String?
        do { bearer = try bearerToken(request) } catch {
            throw APIError(.invalidRequest, "the Authorization header is not 'Bearer <token>'")
        }
        let members = try objectMembers(request)
        let now = clock()
        if let bearer {
            guard members.isEmpty || (members["attemptId"] == nil && members["recoveryKey"] == nil) else {
                throw APIError(.invalidRequest, "send either a bearer token with {} or {attemptId, recoveryKey}, not both")
            }
            try store.perform { db in
                if let row = try db.queryOne("SELECT session_id FROM access_tokens WHERE hash = ?", Records.hash(bearer)) {
                    try Records.revokeSession(db, id: row.text("session_id"), now: now)
                    Log.info("session signed out", ["session.id": row.text("session_id")])
                }
            }
            return json(200, RevokeResponse(revoked: true))
        }
        let body = try decode(RevokeByProofRequest.self, request)
        try store.perform { db in
            let attempt = try provenAttempt(db, id: body.attemptId, recoveryKey: body.recoveryKey, now: now)
            switch attempt.state {
            case .pending, .authorized: throw APIError(.attemptActive, "the attempt is still active; cancel it instead")
            case .completed:
                if let sessionId = attempt.sessionId {
                    try Records.revokeSession(db, id: sessionId, now: now)
                    Log.info("session revoked by attempt proof", ["session.id": sessionId])
                }
            case .cancelled, .expired: break
            }
        }
        return json(200, RevokeResponse(revoked: true))
    }
}
