import BrowserLoginProtocol
import Foundation
import SQLiteSupport

/// Who may sign up (docs/server.md "Sign-up modes"). Gates apply to new
/// users only, whatever the sign-in method; existing users always sign in.
public enum SignupMode: String, Sendable, Equatable, CaseIterable {
    /// Anyone who proves an address.
    case open
    /// Admin-added members, and holders of a valid invitation.
    case invite
    /// Admin-added members, and addresses in `allowedDomains`.
    case domain
}

// MARK: Configuration rules

extension ServerConfiguration {
    /// At most this many test account base addresses.
    public static let maximumTestAccounts = 50

    /// `testAccounts`: at most 50 plain base addresses, none itself a derived address.
    func validateTestAccounts() throws(ConfigurationError) {
        if testAccounts.count > Self.maximumTestAccounts {
            throw ConfigurationError(
                field: "testAccounts", rule: "at-most-\(Self.maximumTestAccounts)",
                message: "at most \(Self.maximumTestAccounts) test account base addresses (\(testAccounts.count) are listed)")
        }
        for (i, email) in testAccounts.enumerated() {
            let field = "testAccounts[\(i)]"
            guard let parts = EmailAddress(email) else {
                throw ConfigurationError(field: field, rule: "email", message: "a test account base is an email address")
            }
            if TestAccounts.isDerivedLocalPart(parts.local) {
                throw ConfigurationError(
                    field: field, rule: "not-derived",
                    message:
                        "a base address may not itself be a derived test address (local+bltest…); list the base, e.g. dev@example.com"
                )
            }
            if parts.local.contains("+") {
                throw ConfigurationError(
                    field: field, rule: "email", message: "a test account base is a plain email address without '+'")
            }
        }
    }

    /// `signupMode`, `waitlist`, `allowedDomains`, `invitationLifetimeMillis`.
    func validateSignup() throws(ConfigurationError) {
        for (i, domain) in allowedDomains.enumerated() where EmailAddress("x@" + domain)?.domain != domain.lowercased() {
            throw ConfigurationError(
                field: "allowedDomains[\(i)]", rule: "domain", message: "a domain name such as example.com (no '@', no scheme)")
        }
        if signupMode == .domain && allowedDomains.isEmpty {
            throw ConfigurationError(
                field: "allowedDomains", rule: "required", message: "signupMode 'domain' needs at least one allowed domain")
        }
        if waitlist && signupMode != .invite {
            throw ConfigurationError(
                field: "waitlist", rule: "invite-only", message: "the waitlist applies only to signupMode 'invite'")
        }
        guard (60_000...90 * 24 * 3_600_000).contains(invitationLifetimeMillis) else {
            throw ConfigurationError(
                field: "invitationLifetimeMillis", rule: "range",
                message: "an invitation lives 60000 milliseconds (a minute) to 90 days")
        }
    }
}

// MARK: Test accounts

/// Test accounts as the auth platform defines them: for each configured base
/// `local@domain`, the derived addresses `local+bltest<suffix>@domain`
/// (suffix `[A-Za-z0-9._-]*`) sign in with the fixed code. The base itself
/// signs in like anyone else. A derived account can never be an admin.
enum TestAccounts {
    static let marker = "+bltest"

    /// True when `local` is (or looks like) a derived test address's local part.
    static func isDerivedLocalPart(_ local: String) -> Bool { local.contains(marker) }

    /// True when `email` is a derived address of one of `bases`.
    static func isDerived(_ email: EmailAddress, of bases: [EmailAddress]) -> Bool {
        bases.contains { base in
            guard email.domain == base.domain else { return false }
            let prefix = base.local + marker
            guard email.local.hasPrefix(prefix) else { return false }
            return email.local.dropFirst(prefix.count).unicodeScalars.allSatisfy {
                ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || "._-".unicodeScalars.contains($0)
            }
        }
    }
}

// MARK: Sign-up gates

/// How a new user got past the gates (logged, never a secret).
enum Admission: Equatable {
    case open
    case member
    case invitation(id: String)
    case domain

    var label: String {
        switch self {
        case .open: "open"
        case .member: "member"
        case .invitation: "invitation"
        case .domain: "domain"
        }
    }
}

enum Signup {
    /// Decides whether `email` may sign up under `configuration`; consumes a
    /// valid invitation (single use). Throws the gate's error: 403
    /// INVITATION_REQUIRED, INVITATION_INVALID, WAITLISTED (after adding a
    /// waitlist entry, which the caller's transaction commits) or
    /// DOMAIN_NOT_ALLOWED. Runs in the caller's transaction.
    static func admit(
        _ db: Database, _ email: EmailAddress, invitation: String?, configuration: ServerConfiguration, now: Int64
    ) throws -> Admission {
        switch configuration.signupMode {
        case .open:
            return .open
        case .domain:
            if try isMember(db, email) { return .member }
            guard configuration.allowedDomains.contains(where: { $0.lowercased() == email.domain }) else {
                throw APIError(
                    .domainNotAllowed, "addresses at \(email.domain) cannot sign up here; use your organisation's address")
            }
            return .domain
        case .invite:
            if try isMember(db, email) { return .member }
            if let invitation, !invitation.isEmpty {
                return .invitation(id: try consumeInvitation(db, token: invitation, email: email, now: now))
            }
            if configuration.waitlist {
                try db.run(
                    "INSERT INTO waitlist (email, requested_at) VALUES (?, ?) ON CONFLICT (email) DO NOTHING", email.text, now)
                Log.info("sign-up waitlisted")
                throw APIError(.waitlisted, "you are on the waitlist; an administrator will let you in")
            }
            throw APIError(.invitationRequired, "new accounts need an invitation; ask an administrator for one")
        }
    }

    static func isMember(_ db: Database, _ email: EmailAddress) throws -> Bool {
        try db.queryOne("SELECT email FROM members WHERE email = ?", email.text) != nil
    }

    /// Marks the invitation used by `email` and answers its id, or throws 403 INVITATION_INVALID.
    static func consumeInvitation(_ db: Database, token: String, email: EmailAddress, now: Int64) throws -> String {
        let invalid = APIError(
            .invitationInvalid, "this invitation is not valid (used, expired, revoked or for another address); ask for a new one")
        guard let row = try db.queryOne("SELECT * FROM invitations WHERE token_hash = ?", Records.hash(token)) else {
            throw invalid
        }
        let id = row.text("id")
        guard row.int("used_at") == nil, row.int("revoked_at") == nil, now < row.millis("expires_at") else { throw invalid }
        if let bound = row.string("email"), bound != email.text { throw invalid }
        let changed = try db.run(
            "UPDATE invitations SET used_at = ?, used_by = ? WHERE id = ? AND used_at IS NULL AND revoked_at IS NULL",
            now, email.text, id)
        guard changed == 1 else { throw invalid }
        return id
    }

    /// A new invitation: its public id and the token (shown once; only its digest is stored).
    static func createInvitation(_ db: Database, email: EmailAddress?, lifetimeMillis: Int64, now: Int64) throws -> (
        id: String, token: String, expiresAt: Int64
    ) {
        let id = "inv_" + (try Crypto.randomToken(bytes: 9))
        let token = try Crypto.randomToken(bytes: 24)
        try db.run(
            "INSERT INTO invitations (id, token_hash, email, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
            id, Records.hash(token), email?.text, now, now + lifetimeMillis)
        return (id, token, now + lifetimeMillis)
    }

    /// Adds `email` as a member (and takes it off the waitlist). Answers false when it already was one.
    @discardableResult
    static func addMember(_ db: Database, _ email: EmailAddress, now: Int64) throws -> Bool {
        let added = try db.run(
            "INSERT INTO members (email, added_at) VALUES (?, ?) ON CONFLICT (email) DO NOTHING", email.text, now)
        try db.run("DELETE FROM waitlist WHERE email = ?", email.text)
        return added == 1
    }
}

// MARK: Admin commands

/// `members`, `invitations` and `waitlist` (docs/server.md "Admin commands").
enum SignupAdmin {
    static let groups: Set<String> = ["members", "invitations", "waitlist"]

    static func run(_ command: [String], configuration: ServerConfiguration) -> Int32 {
        let databasePath = configuration.databasePath
        do {
            // Either store: a file path (which must exist) or a postgresql:// URL; opening it migrates.
            guard DatabaseLocation.isPostgresURL(databasePath) || FileManager.default.fileExists(atPath: databasePath) else {
                return failure("no database at \(databasePath)")
            }
            let db = try Database(location: DatabaseLocation(databasePath))
            let now = Timestamp.now().millisecondsSince1970
            func time(_ ms: Int64?) -> String { ms.map { Timestamp(millisecondsSince1970: $0).rfc3339 } ?? "-" }
            func address(_ text: String) -> EmailAddress? { EmailAddress(text) }
            switch command {
            case ["members", "list"]:
                print(["EMAIL", "ADDED", "SIGNED_UP"].joined(separator: "\t"))
                for row in try db.query(
                    """
                    SELECT m.email, m.added_at, (SELECT COUNT(*) FROM users u WHERE u.email = m.email) AS users
                    FROM members m ORDER BY m.added_at, m.email
                    """)
                {
                    print(
                        [row.text("email"), time(row.int("added_at")), (row.int("users") ?? 0) > 0 ? "yes" : "no"].joined(
                            separator: "\t"))
                }
                return 0
            case let c where c.count == 3 && c[0] == "members":
                guard let email = address(c[2]) else { return failure("'\(c[2])' is not an email address") }
                if c[1] == "add" {
                    let added = try db.transaction { try Signup.addMember(db, email, now: now) }
                    print("\(email.text): \(added ? "added as a member" : "already a member"); they can sign up in every mode")
                    return 0
                }
                let removed = try db.transaction { try db.run("DELETE FROM members WHERE email = ?", email.text) }
                guard removed == 1 else { return failure("\(email.text) is not a member (see: members list)") }
                print("\(email.text): no longer a member (an account they already have is not affected)")
                return 0
            case let c where c.count >= 2 && c[0] == "invitations" && c[1] == "create":
                var email: EmailAddress? = nil
                if c.count == 3 {
                    guard let parsed = address(c[2]) else { return failure("'\(c[2])' is not an email address") }
                    email = parsed
                }
                let made = try db.transaction {
                    try Signup.createInvitation(
                        db, email: email, lifetimeMillis: configuration.invitationLifetimeMillis, now: now)
                }
                print(
                    "invitation \(made.id) for \(email?.text ?? "any address"), valid until \(time(made.expiresAt)), single use")
                print("token: \(made.token)")
                print(
                    "The token is shown only now. The new user enters it on the sign-in page when asked for an invitation"
                        + " (or opens the sign-in page with &invite=TOKEN added to its address).")
                return 0
            case ["invitations", "list"]:
                print(["ID", "FOR", "STATE", "CREATED", "EXPIRES", "USED_BY"].joined(separator: "\t"))
                for row in try db.query("SELECT * FROM invitations ORDER BY created_at, id") {
                    let state: String
                    if row.int("used_at") != nil {
                        state = "used"
                    } else if row.int("revoked_at") != nil {
                        state = "revoked"
                    } else if now >= row.millis("expires_at") {
                        state = "expired"
                    } else {
                        state = "valid"
                    }
                    print(
                        [
                            row.text("id"), row.string("email") ?? "any", state, time(row.int("created_at")),
                            time(row.int("expires_at")), row.string("used_by") ?? "-",
                        ].joined(separator: "\t"))
                }
                return 0
            case let c where c.count == 3 && c[0] == "invitations" && c[1] == "revoke":
                let revoked = try db.transaction {
                    try db.run(
                        "UPDATE invitations SET revoked_at = ? WHERE id = ? AND used_at IS NULL AND revoked_at IS NULL", now,
                        c[2])
                }
                guard revoked == 1 else {
                    return failure("no unused invitation \(c[2]) (see: invitations list)")
                }
                print("\(c[2]): revoked")
                return 0
            case ["waitlist", "list"]:
                print(["EMAIL", "REQUESTED"].joined(separator: "\t"))
                for row in try db.query("SELECT * FROM waitlist ORDER BY requested_at, email") {
                    print([row.text("email"), time(row.int("requested_at"))].joined(separator: "\t"))
                }
                return 0
            case let c where c.count == 3 && c[0] == "waitlist" && c[1] == "approve":
                guard let email = address(c[2]) else { return failure("'\(c[2])' is not an email address") }
                let approved: Bool = try db.transaction {
                    guard try db.queryOne("SELECT email FROM waitlist WHERE email = ?", email.text) != nil else { return false }
                    try Signup.addMember(db, email, now: now)
                    return true
                }
                guard approved else { return failure("\(email.text) is not on the waitlist (see: waitlist list)") }
                print("\(email.text): approved; added as a member, they can now sign up")
                return 0
            default:
                FileHandle.standardError.write(
                    Data(
                        "browser-login-server: unknown command '\(command.joined(separator: " "))'\n\(ServerCommand.command.help)\n"
                            .utf8))
                return 64
            }
        } catch {
            return failure("\(error)")
        }
    }

    private static func failure(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("browser-login-server: \(message)\n".utf8))
        return 1
    }
}
