import BrokerCore
import BrokerJOSE
import BrokerOAuth
import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// `POST {base}/browser/upstream/start`: the hosted page's "Sign in with NAME".
struct UpstreamStartRequest: Decodable {
    var provider: String
    var attemptId: String
}

struct UpstreamStartResponse: Encodable {
    var authorizeUrl: String
}

/// Why an upstream sign-in stopped: a code, the HTTP status, and a message
/// for the person in the browser that says what to do next. Never holds a
/// code, token, state, nonce or verifier.
struct UpstreamFailure: Error, Sendable {
    var code: String
    var status: Int
    var message: String

    static func invalidRedirectURI() -> UpstreamFailure {
        UpstreamFailure(
            code: ServerErrorCode.invalidRedirectURI.rawValue, status: 400,
            message:
                "Invalid redirect URI: this address is not the redirect URI of any sign-in provider of this server. Start again from the app; if it happens again, the server's administrator must register the provider's redirect URI exactly as configured."
        )
    }

    static func unknown(_ name: String) -> UpstreamFailure {
        UpstreamFailure(
            code: "UPSTREAM_SIGNIN_UNKNOWN", status: 400,
            message:
                "This sign-in with \(name) was not started in this browser, has expired, or was already used. Go back to the sign-in page and start again."
        )
    }

    static func unavailable(_ name: String, _ error: ProviderError) -> UpstreamFailure {
        UpstreamFailure(
            code: "UPSTREAM_UNAVAILABLE", status: 502,
            message: "\(name) could not be reached (\(error)). Try again in a moment, or sign in another way.")
    }

    /// A provider's failure: unreachable, or its refusal, or an answer that is not OAuth.
    static func provider(_ name: String, _ error: ProviderError) -> UpstreamFailure {
        switch error {
        case .notSent, .noAnswer, .serverFailure: return unavailable(name, error)
        case .refused(_, let code, let text):
            let said = text.map { ProviderError.plainText($0) }.flatMap { $0.isEmpty ? nil : " (\($0))" } ?? ""
            return UpstreamFailure(
                code: "UPSTREAM_ERROR", status: 502,
                message:
                    "\(name) refused the sign-in: \(ProviderError.plainText(code, limit: 100))\(said). Start again; if it persists, the server's administrator should check the provider's client id, secret and scopes."
            )
        default:
            return UpstreamFailure(
                code: "UPSTREAM_ERROR", status: 502,
                message:
                    "\(name) answered in a way the server cannot use (\(error)). The server's administrator should check the provider's issuer and endpoints."
            )
        }
    }
}

/// Sign-in with an upstream OpenID provider on the hosted page
/// (docs/server.md "Upstream providers"): the round trip out to the
/// provider and back, bound to the browser by a `__Host-` cookie, ending in
/// `startBrowserSession` like every sign-in method.
///
/// The round trip's secrets are never stored: `state`, `nonce` and the PKCE
/// verifier are derived (HMAC under the server secret) from a random handle
/// that only the browser's cookie holds; the database keeps the handle's
/// digest, the provider, the redirect URI sent and the digest of the native
/// attempt it continues, for 10 minutes, and the callback deletes it (one
/// use).
extension LoginService {
    static let upstreamCookie = "__Host-bl_upstream"
    static let upstreamRoundTripMillis: Int64 = 600_000

    /// The upstream callback routes: `upstream/callback` and `upstream/callback/NAME`.
    static func isUpstreamCallback(_ key: String) -> Bool {
        key == UpstreamProviderConfiguration.callbackRoute || key.hasPrefix(UpstreamProviderConfiguration.callbackRoute + "/")
    }

    /// The derived secrets of the round trip whose cookie holds `handle`.
    func upstreamSecrets(_ handle: String) -> (state: String, nonce: String, verifier: ProofSecret) {
        (
            derive("upstream-state", handle), derive("upstream-nonce", handle),
            ProofSecret(value: derive("upstream-verifier", handle))
        )
    }

    // MARK: Start

    func upstreamStart(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(UpstreamStartRequest.self, request)
        guard let entry = upstream.entry(named: body.provider) else {
            throw APIError(
                .notFound, "no sign-in provider of this server is named '\(ProviderError.plainText(body.provider, limit: 40))'")
        }
        try limit("upstream.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        let now = clock()
        let cookieName = bindingCookieName(attemptId: body.attemptId)
        // The attempt the page shows, in the browser it is bound to, still open.
        let hints = try store.perform { db -> SignInHints in
            guard let attempt = try Records.attempt(db, id: body.attemptId, now: now) else {
                throw APIError(.attemptUnknown, "no such attempt")
            }
            guard isBound(request, attempt, cookieName: cookieName) else { throw Self.browserMismatch }
            switch attempt.state {
            case .expired: throw APIError(.attemptExpired, "the attempt has expired")
            case .cancelled: throw APIError(.attemptCancelled, "the attempt was cancelled")
            case .completed: throw APIError(.attemptAlreadyExchanged, "the attempt was already completed")
            case .pending, .authorized: break
            }
            return SignInHints(prompt: attempt.prompt, loginHint: attempt.loginHint)
        }
        let handle = try randomToken(bytes: 32)
        let secrets = upstreamSecrets(handle)
        let redirectURI = entry.configuration.redirectUris[0]
        let provider = entry.provider
        let built: Result<String, ProviderError> = waitFor {
            do throws(ProviderError) {
                return .success(
                    try await provider.authorizeURL(
                        redirectURI: redirectURI, state: secrets.state, nonce: secrets.nonce,
                        codeChallenge: secrets.verifier.challenge))
            } catch {
                return .failure(error)
            }
        }
        let authorizeURL: String
        upstream.record(entry.name, answered: (try? built.get()) != nil, now: clock())
        switch built {
        case .success(let url): authorizeURL = hints.applied(to: url)
        case .failure(let error):
            Log.warning("upstream provider unusable", ["provider": entry.name, "error": "\(error)"])
            let failure = UpstreamFailure.provider(entry.name, error)
            return json(failure.status, ErrorBody(code: ServerErrorCode(failure.code), message: failure.message))
        }
        try store.perform { db in
            try db.run("DELETE FROM upstream_round_trips WHERE expires_at <= ?", now)
            try db.run(
                """
                INSERT INTO upstream_round_trips (handle_hash, provider, redirect_uri, attempt_hash, created_at, expires_at)
                VALUES (?, ?, ?, ?, ?, ?)
                """, Records.hash(handle), entry.name, redirectURI, Records.hash(body.attemptId), now,
                now + Self.upstreamRoundTripMillis)
        }
        Log.info("upstream sign-in started", ["provider": entry.name])
        return json(
            200, UpstreamStartResponse(authorizeUrl: authorizeURL),
            headers: [
                cookieHeader(
                    name: Self.upstreamCookie, value: handle + "." + body.attemptId,
                    maxAgeSeconds: Self.upstreamRoundTripMillis / 1000)
            ])
    }

    // MARK: Callback

    /// `GET {base}/browser/upstream/callback[/NAME]`: the provider's redirect
    /// back. Answers a page: a 303 to the attempt's hosted page, signed in;
    /// or an error page with its code and what to do.
    func upstreamCallback(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        var attemptId: String?
        var providerName = "none"
        var clearCookie = false
        do throws(UpstreamFailure) {
            let redirectURI = issuer + request.path
            guard let entry = upstream.entry(redirectURI: redirectURI) else { throw .invalidRedirectURI() }
            providerName = entry.name
            let cookie = request.cookies[Self.upstreamCookie].flatMap { value -> (String, String)? in
                guard let dot = value.firstIndex(of: "."), dot != value.startIndex else { return nil }
                let id = String(value[value.index(after: dot)...])
                return id.isEmpty ? nil : (String(value[..<dot]), id)
            }
            attemptId = cookie?.1
            let callback = try upstreamCallbackParameters(request, redirectURI: redirectURI, name: entry.name)
            guard let (handle, attempt) = cookie else { throw .unknown(entry.name) }
            // Fail closed: without the metadata, whether `iss` is promised is unknown.
            let provider = entry.provider
            let fetched: Result<ProviderMetadata, ProviderError> = waitFor {
                do throws(ProviderError) { return .success(try await provider.metadata()) } catch { return .failure(error) }
            }
            let metadata: ProviderMetadata
            upstream.record(entry.name, answered: (try? fetched.get()) != nil, now: clock())
            switch fetched {
            case .success(let value): metadata = value
            case .failure(let error): throw .provider(entry.name, error)
            }
            try consumeRoundTrip(
                handle: handle, attemptId: attempt, entry: entry, redirectURI: redirectURI, callback: callback,
                metadata: metadata)
            clearCookie = true
            let code: String
            switch callback.outcome {
            case .code(let value): code = value
            case .error(let error, let description):
                if error == "access_denied" {
                    throw UpstreamFailure(
                        code: "UPSTREAM_DENIED", status: 403,
                        message: "The sign-in with \(entry.name) was cancelled. Go back to sign in again, or another way.")
                }
                throw .provider(entry.name, .refused(status: 302, error: error, description: description))
            }
            let identity = try upstreamIdentity(entry: entry, code: code, handle: handle, redirectURI: redirectURI)
            let now = clock()
            let started: StartedBrowserSession
            do {
                started = try store.perform { db in try startBrowserSession(db, identity, now: now) }
            } catch {
                throw UpstreamFailure(
                    code: error.code.rawValue, status: error.code == UpstreamIdentities.conflict ? 409 : error.code.httpStatus,
                    message: error.code == .authUserDisabled
                        ? "This account is disabled. Ask an administrator to enable it."
                        : "The sign-in was refused: \(error.message).")
            }
            Log.info("upstream sign-in completed", ["provider": entry.name])
            return HTTPServerResponse(
                status: 303,
                headers: [
                    // The fragment names the session just started: the page of a `prompt: "login"` attempt
                    // offers that one (and no session that was in the browser before).
                    (
                        "Location",
                        issuer + configuration.basePath + "/browser/login?attempt=" + percentEncode(attempt) + "#signed_in="
                            + percentEncode(started.response.sessionId)
                    ),
                    cookieHeader(name: Self.sessionCookie, value: started.secret, maxAgeSeconds: started.maxAgeMillis / 1000),
                    cookieHeader(name: Self.upstreamCookie, value: "", maxAgeSeconds: 0),
                ])
        } catch {
            Log.warning("upstream sign-in refused", ["provider": providerName, "code": error.code])
            var headers: [(name: String, value: String)] = []
            if clearCookie { headers.append(cookieHeader(name: Self.upstreamCookie, value: "", maxAgeSeconds: 0)) }
            let back = attemptId.map { configuration.basePath + "/browser/login?attempt=" + percentEncode($0) }
            return HostedPage.upstreamErrorPage(error, basePath: configuration.basePath, back: back, extraHeaders: headers)
        }
    }

    /// The redirect's parameters as the broker reads a provider's callback
    /// (`ProviderCallback`: `state`, exactly one of `code` / `error`, `iss`
    /// at most once; a repeated parameter is refused).
    func upstreamCallbackParameters(_ request: HTTPServerRequest, redirectURI: String, name: String)
        throws(UpstreamFailure) -> ProviderCallback
    {
        func refused(_ why: String) -> UpstreamFailure {
            UpstreamFailure(
                code: "UPSTREAM_CALLBACK_INVALID", status: 400,
                message: "The answer from \(name) is not a valid sign-in response (\(why)). Go back and start again.")
        }
        if let repeated = request.repeatedQueryNames.sorted().first {
            throw refused("the parameter '\(ProviderError.plainText(repeated, limit: 40))' is given twice")
        }
        let query = request.query.sorted { $0.key < $1.key }.map { percentEncode($0.key) + "=" + percentEncode($0.value) }
        do {
            return try ProviderCallback(parsing: redirectURI + "?" + query.joined(separator: "&"))
        } catch {
            throw refused(error.message)
        }
    }

    /// Finds the round trip of the browser's cookie and spends it, in one
    /// transaction: it must exist, be unexpired, continue the attempt the
    /// cookie names, belong to the provider whose redirect URI the browser
    /// came back on (and to that URI: the mix-up defence), carry this round
    /// trip's `state`, and `iss` must be the provider's (RFC 9207). A refusal
    /// before the state matched changes nothing.
    func consumeRoundTrip(
        handle: String, attemptId: String, entry: UpstreamProviders.Entry, redirectURI: String,
        callback: ProviderCallback, metadata: ProviderMetadata
    ) throws(UpstreamFailure) {
        let now = clock()
        let expected = upstreamSecrets(handle).state
        let outcome: UpstreamFailure?
        do {
            outcome = try store.perform { db -> UpstreamFailure? in
                guard let row = try db.queryOne("SELECT * FROM upstream_round_trips WHERE handle_hash = ?", Records.hash(handle)),
                    Crypto.constantTimeEquals(row.text("attempt_hash"), Records.hash(attemptId))
                else { return .unknown(entry.name) }
                if now >= row.millis("expires_at") {
                    try db.run("DELETE FROM upstream_round_trips WHERE handle_hash = ?", Records.hash(handle))
                    return .unknown(entry.name)
                }
                guard row.text("provider") == entry.name, row.text("redirect_uri").utf8.elementsEqual(redirectURI.utf8) else {
                    return UpstreamFailure(
                        code: "UPSTREAM_PROVIDER_MISMATCH", status: 400,
                        message:
                            "The answer came back on the redirect URI of \(entry.name), but this browser's sign-in was started with another provider; it was refused and nothing was changed. Go back and start again."
                    )
                }
                guard Crypto.constantTimeEquals(expected, callback.state) else {
                    return UpstreamFailure(
                        code: "UPSTREAM_STATE_MISMATCH", status: 400,
                        message:
                            "The answer from \(entry.name) does not belong to the sign-in started in this browser (its state differs); nothing was changed. Go back and start again."
                    )
                }
                switch metadata.checkCallbackIssuer(callback.issuer, issuerIsTemplate: false) {
                case .accepted: break
                case .mismatch(let got, let want):
                    return UpstreamFailure(
                        code: "UPSTREAM_ISSUER_MISMATCH", status: 400,
                        message:
                            "The answer names the issuer \(ProviderError.issuerText(got)), not \(entry.name)'s (\(ProviderError.issuerText(want))); it was refused and nothing was changed. Go back and start again."
                    )
                case .missing:
                    // RFC 9207 §2.4 refuses a code without the promised `iss`. An
                    // error carries no code: it is shown as the provider's error
                    // (some providers leave `iss` out of their error redirects).
                    if case .code = callback.outcome {
                        return UpstreamFailure(
                            code: "UPSTREAM_ISSUER_MISMATCH", status: 400,
                            message:
                                "The answer lacks the 'iss' parameter \(entry.name) promises (RFC 9207); it was refused and nothing was changed. Go back and start again."
                        )
                    }
                }
                try db.run("DELETE FROM upstream_round_trips WHERE handle_hash = ?", Records.hash(handle))
                return nil
            }
        } catch {
            throw UpstreamFailure(
                code: error.code.rawValue, status: error.code.httpStatus,
                message: "The server could not complete the sign-in. Try again.")
        }
        if let outcome { throw outcome }
    }

    /// The code exchanged once (with the round trip's verifier and redirect
    /// URI), the ID token checked as the broker checks it (signature with
    /// the provider's keys, `iss`, `aud`, `azp`, `exp`, `iat` with 60 s of
    /// skew, the round trip's `nonce`), and the verified address taken from
    /// it — or from userinfo for the same subject when the ID token has none.
    func upstreamIdentity(entry: UpstreamProviders.Entry, code: String, handle: String, redirectURI: String)
        throws(UpstreamFailure) -> SignInIdentity
    {
        let secrets = upstreamSecrets(handle)
        let signIn = entry.signIn
        let now = Timestamp(millisecondsSince1970: clock())
        let answer: Result<(IDTokenClaims, UserInfo?), UpstreamFailure> = waitFor {
            let tokens: TokenResponse
            do throws(ProviderError) {
                tokens = try await signIn.provider.exchange(
                    code: code, redirectURI: redirectURI, codeVerifier: secrets.verifier.value)
            } catch {
                return .failure(.provider(entry.name, error))
            }
            func refuse(_ reason: String) async -> Result<(IDTokenClaims, UserInfo?), UpstreamFailure> {
                // Nothing is kept: the tokens are revoked at once where the provider can.
                if await signIn.provider.hasRevocation {
                    try? await signIn.provider.revoke(
                        token: tokens.refreshToken ?? tokens.accessToken,
                        hint: tokens.refreshToken == nil ? "access_token" : "refresh_token", accessToken: tokens.accessToken)
                }
                return .failure(
                    UpstreamFailure(
                        code: "UPSTREAM_ID_TOKEN_INVALID", status: 502,
                        message:
                            "\(entry.name)'s ID token was refused (\(reason)); no one was signed in. Start again; if it persists, the server's administrator should check the provider's issuer, client id and signing keys."
                    ))
            }
            guard let idToken = tokens.idToken else {
                return await refuse("the token answer has no ID token although 'openid' was requested")
            }
            let claims: IDTokenClaims
            do throws(TokenAnswerFailure) {
                claims = try await signIn.verify(idToken, nonce: secrets.nonce, now: now)
            } catch {
                switch error {
                case .idTokenInvalid(let reason): return await refuse(reason)
                case .provider(let failure): return .failure(.provider(entry.name, failure))
                }
            }
            var info: UserInfo?
            if claims.email?.isEmpty ?? true, (try? await signIn.provider.metadata())?.userinfoEndpoint != nil {
                info = try? await signIn.provider.userinfo(accessToken: tokens.accessToken)
                if let subject = info?.subject, subject != claims.subject { info = nil }
            }
            return .success((claims, info))
        }
        let (claims, info) = try answer.get()
        let fromToken = !(claims.email?.isEmpty ?? true)
        let email = fromToken ? claims.email : info?.email
        let verified = fromToken ? claims.emailVerified : info?.emailVerified
        guard let email, !email.isEmpty else {
            throw UpstreamFailure(
                code: "UPSTREAM_EMAIL_MISSING", status: 403,
                message:
                    "\(entry.name) did not share an email address for this account, and this server signs people in by address. Allow access to your email address at \(entry.name), or sign in another way; the server's administrator should request the 'email' scope."
            )
        }
        guard let address = EmailAddress(email) else {
            throw UpstreamFailure(
                code: "UPSTREAM_EMAIL_MISSING", status: 403,
                message: "\(entry.name) shared an email address this server cannot use. Sign in another way.")
        }
        if verified == false {
            throw UpstreamFailure(
                code: "UPSTREAM_EMAIL_UNVERIFIED", status: 403,
                message:
                    "\(entry.name) says the email address of this account is not verified. Verify it with \(entry.name) first, or sign in another way."
            )
        }
        let name = claims.name ?? info?.name
        return SignInIdentity(
            email: address, method: entry.name, displayName: name.flatMap { $0.isEmpty ? nil : $0 },
            upstream: UpstreamSubject(issuer: entry.configuration.issuer, subject: claims.subject, provider: entry.name))
    }
}

/// A native attempt's `prompt` and `loginHint` (docs/protocol.md §5.1),
/// passed on to an upstream provider as OpenID Connect's `prompt=login` (the
/// provider signs the person in again instead of reusing its own session)
/// and `login_hint`.
struct SignInHints: Sendable {
    var prompt: String?
    var loginHint: String?

    /// `url` (the provider's authorization request) with `prompt` and
    /// `login_hint` set: a parameter of the same name already in it (e.g. a
    /// configured `authorizeParams` `prompt=consent`) is replaced, never sent
    /// twice. Unchanged when the attempt has neither.
    func applied(to url: String) -> String {
        var added: [(String, String)] = []
        if let prompt { added.append(("prompt", prompt)) }
        if let loginHint { added.append(("login_hint", loginHint)) }
        guard !added.isEmpty else { return url }
        let names = Set(added.map(\.0))
        var base = url
        var query = ""
        if let question = url.firstIndex(of: "?") {
            base = String(url[..<question])
            query = String(url[url.index(after: question)...])
        }
        var pairs = query.split(separator: "&", omittingEmptySubsequences: true).map(String.init).filter { pair in
            let name = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return !names.contains(percentDecode(name) ?? String(name))
        }
        pairs += added.map { percentEncode($0.0) + "=" + percentEncode($0.1) }
        return base + "?" + pairs.joined(separator: "&")
    }
}
