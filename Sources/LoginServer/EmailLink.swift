import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// The sign-in link of the one sign-in email (docs/server.md, "Email";
/// docs/protocol.md, the hosted page). A sign-in request that names a
/// redirect target covered by `emailRedirectUris` gets a link as well as the
/// code: `<target>#signin_token=<selector>.<verifier>`. Both live in the one
/// `sign_in_codes` row of the address, so using either retires both.
enum EmailLinks {
    /// The fragment member that carries the link token.
    static let fragmentName = "signin_token"

    /// What migration 0007 adds: the link's selector and verifier digests,
    /// and the digest of the attempt id when the link targets the hosted
    /// page of an attempt (then only that attempt's browser may use it).
    static let migration = Migration(
        "0007-sign-in-links",
        """
        ALTER TABLE sign_in_codes ADD COLUMN link_id_hash TEXT;
        ALTER TABLE sign_in_codes ADD COLUMN link_hash TEXT;
        ALTER TABLE sign_in_codes ADD COLUMN attempt_id_hash TEXT;
        CREATE UNIQUE INDEX sign_in_codes_link ON sign_in_codes(link_id_hash);
        """)
}

/// Why an `emailRedirectUris` entry is refused.
struct EmailRedirectRefusal: Error, Sendable {
    var rule: String
    var message: String
}

/// One `emailRedirectUris` entry: an http(s) origin, matched by origin (RFC
/// 6454: scheme and host case-insensitively, the default port implied), or a
/// custom scheme with its authority, matched by scheme and authority. An
/// entry's path is ignored: `http://localhost:5173/oauth/callback` is the
/// origin `http://localhost:5173`.
struct EmailRedirectEntry: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case origin(Origin)
        case custom(scheme: String, authority: String?)
    }
    let kind: Kind

    static let refusedSchemes: Set<String> = [
        "file", "data", "javascript", "vbscript", "mailto", "about", "blob", "ftp", "ws", "wss",
    ]

    init(_ text: String) throws(EmailRedirectRefusal) {
        guard let parts = URLParts(splitting: text), text.utf8.count <= ReturnURL.maximumLength else {
            throw EmailRedirectRefusal(rule: "url", message: "an entry is an absolute URL such as https://login.example.com")
        }
        // A path is allowed and ignored (entries match by origin), as the platform writes them:
        // http://localhost:5173/oauth/callback covers every page of http://localhost:5173.
        guard parts.query == nil, parts.fragment == nil, !parts.hasUserinfo else {
            throw EmailRedirectRefusal(
                rule: "origin",
                message:
                    "an entry is an origin (https://host[:port]) or scheme://authority, a path allowed and ignored: no query, fragment or user"
            )
        }
        if let origin = RedirectTarget.origin(of: parts) {
            kind = .origin(origin)
            return
        }
        let scheme = parts.scheme.lowercased()
        if scheme == "http" || scheme == "https" {
            throw EmailRedirectRefusal(
                rule: "origin", message: "an http(s) entry is https://host[:port], or http:// on a loopback host only")
        }
        if Self.refusedSchemes.contains(scheme) {
            throw EmailRedirectRefusal(rule: "scheme", message: "the scheme '\(scheme)' cannot receive a sign-in link")
        }
        kind = .custom(scheme: scheme, authority: parts.authority?.lowercased())
    }

    func covers(_ target: RedirectTarget) -> Bool {
        switch kind {
        case .origin(let origin): return target.origin == origin
        case .custom(let scheme, let authority):
            return target.origin == nil && target.parts.scheme.lowercased() == scheme
                && target.parts.authority?.lowercased() == authority
        }
    }
}

/// A sign-in request's redirect target (`redirectUri`): an absolute URL,
/// at most 2048 bytes, without fragment (the link's token goes there) or userinfo.
struct RedirectTarget: Sendable {
    let text: String
    let parts: URLParts
    /// The origin of an http(s) target.
    let origin: Origin?

    init?(_ text: String) {
        guard text.utf8.count <= ReturnURL.maximumLength, let parts = URLParts(splitting: text), parts.fragment == nil,
            !parts.hasUserinfo
        else { return nil }
        let scheme = parts.scheme.lowercased()
        let origin = Self.origin(of: parts)
        if (scheme == "http" || scheme == "https") && origin == nil { return nil }
        self.text = text
        self.parts = parts
        self.origin = origin
    }

    /// The origin of an http(s) URL (scheme and host lower-cased, the default
    /// port dropped, by the protocol library's `Origin`); nil for other schemes.
    static func origin(of parts: URLParts) -> Origin? {
        let scheme = parts.scheme.lowercased()
        guard scheme == "http" || scheme == "https", let authority = parts.authority else { return nil }
        return try? Origin(scheme + "://" + authority.lowercased())
    }
}

/// The sign-in link's part of a sign-in request, decided before anything is stored or sent.
struct EmailLinkPlan: Sendable {
    var target: RedirectTarget
    /// The digest of the attempt id when the target is this server's hosted page for an attempt.
    var attemptIdHash: String?
}

/// `POST {base}/browser/signin/link`.
struct SignInLinkRequest: Decodable {
    var token: String
    /// The attempt of the hosted page that opened the link, if any.
    var attemptId: String?
    /// An invitation token (sign-up mode `invite`), e.g. from the page's `?invite=`.
    var invite: String? = nil
}

extension LoginService {
    /// The link plan of a sign-in request: nil (code-only) when it names no
    /// target, when the templates have no link section, or when
    /// `emailRedirectUris` is empty; throws 400
    /// INVALID_REDIRECT_URI when the non-empty list does not cover the target.
    func emailLinkPlan(_ redirectUri: String?) throws(APIError) -> EmailLinkPlan? {
        // Code-only templates: no link, whatever the target and the list.
        guard let redirectUri, configuration.email.carriesLinks else { return nil }
        let entries = configuration.emailRedirectUris.compactMap { try? EmailRedirectEntry($0) }
        guard !entries.isEmpty else { return nil }
        guard let target = RedirectTarget(redirectUri), entries.contains(where: { $0.covers(target) }) else {
            throw APIError(
                .invalidRedirectURI,
                "this redirect target may not receive sign-in links; an administrator adds its origin to emailRedirectUris")
        }
        var attemptIdHash: String? = nil
        if target.origin?.serialized == issuer, target.parts.path == configuration.basePath + "/browser/login",
            let query = target.parts.query
        {
            // The first `attempt`, as the page's script reads it (URLSearchParams.get).
            if let pair = query.split(separator: "&").first(where: { $0.hasPrefix("attempt=") }),
                let id = percentDecode(pair.dropFirst("attempt=".count)), !id.isEmpty
            {
                attemptIdHash = Records.hash(id)
            }
        }
        return EmailLinkPlan(target: target, attemptIdHash: attemptIdHash)
    }

    /// A new link token: a selector (finds the row) and a verifier (proves the link).
    func newEmailLinkToken() throws(APIError) -> (selector: String, verifier: String, token: String) {
        let selector = try randomToken(bytes: 16)
        let verifier = try randomToken(bytes: 32)
        return (selector, verifier, selector + "." + verifier)
    }

    /// Signs the browser in with the link of a sign-in email: single use,
    /// expiring with the code, wrong verifiers counted with wrong codes; a
    /// link for an attempt works only in the browser bound to that attempt
    /// (403 BROWSER_MISMATCH, the link and the code stay valid).
    func signInWithLink(_ request: HTTPServerRequest) throws(APIError) -> HTTPServerResponse {
        let body = try decode(SignInLinkRequest.self, request)
        try limit("link.address", request.remoteAddress, configuration.rateLimits.codeEntry)
        let pieces = body.token.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count == 2, !pieces[0].isEmpty, !pieces[1].isEmpty, body.token.utf8.count <= 200 else {
            throw APIError(.otpInvalid, "this sign-in link is damaged; type the code from the email instead")
        }
        let selector = String(pieces[0])
        let verifier = String(pieces[1])
        let now = clock()
        let started = try store.perform { db in
            guard let row = try db.queryOne("SELECT * FROM sign_in_codes WHERE link_id_hash = ?", Records.hash(selector)) else {
                throw APIError(.otpExpired, "this sign-in link was used or has expired; ask for a new email")
            }
            let email = row.text("email")
            let wrong = Int(row.int("wrong_count") ?? 0)
            if wrong >= Self.maximumWrongCodes {
                throw APIError(.otpMaxAttempts, "too many wrong codes or links; ask for a new email")
            }
            if now >= row.millis("expires_at") {
                try db.run("DELETE FROM sign_in_codes WHERE email = ?", email)
                throw APIError(.otpExpired, "this sign-in link has expired; ask for a new email")
            }
            guard Crypto.constantTimeEquals(Records.hash(verifier), row.text("link_hash")) else {
                try db.run("UPDATE sign_in_codes SET wrong_count = ? WHERE email = ?", wrong + 1, email)
                if wrong + 1 >= Self.maximumWrongCodes {
                    throw APIError(.otpMaxAttempts, "too many wrong codes or links; ask for a new email")
                }
                throw APIError(.otpInvalid, "this sign-in link is damaged; type the code from the email instead")
            }
            if let attemptIdHash = row.string("attempt_id_hash") {
                guard let attemptId = body.attemptId, Crypto.constantTimeEquals(Records.hash(attemptId), attemptIdHash),
                    let attempt = try Records.attempt(db, id: attemptId, now: now),
                    isBound(request, attempt, cookieName: bindingCookieName(attemptId: attemptId))
                else {
                    throw APIError(
                        .browserMismatch,
                        "this sign-in link was opened in another browser; type the code from the same email on the page "
                            + "where you started")
                }
            }
            try db.run("DELETE FROM sign_in_codes WHERE email = ?", email)
            guard let address = EmailAddress(email) else { throw APIError(.internalError, "the stored address is invalid") }
            return try startBrowserSession(
                db, SignInIdentity(email: address, method: "email"), now: now, invitation: body.invite)
        }
        return browserSessionAnswer(started)
    }
}
