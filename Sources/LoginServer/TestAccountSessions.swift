import BrowserLoginProtocol
import SQLiteSupport

/// Test accounts' sessions (docs/server.md "Test accounts"): at most 30
/// minutes, marked with the base address they were derived from (the
/// `test_base` column of the browser session and of every native session it
/// issues), and checked against the configured bases on every request, so a
/// base removed from the configuration (SIGHUP reloads it) ends its derived
/// sessions at once: native routes and the API answer 401 SESSION_REVOKED,
/// the browser is signed out.
enum TestAccountSessions {
    /// The longest a test account's session lives, whatever `sessionLifetimeMillis` says.
    static let maximumLifetimeMillis: Int64 = 30 * 60_000

    static let migration = Migration(
        "0011-test-account-sessions",
        """
        ALTER TABLE browser_sessions ADD COLUMN test_base TEXT;
        ALTER TABLE sessions ADD COLUMN test_base TEXT;
        """)
}

extension LoginService {
    /// A test account's session lifetime.
    var testSessionLifetimeMillis: Int64 {
        min(configuration.sessionLifetimeMillis, TestAccountSessions.maximumLifetimeMillis)
    }

    /// The configured base `email` is derived from, if any.
    func testAccountBase(of email: EmailAddress) -> EmailAddress? {
        testAccounts.first { TestAccounts.isDerived(email, of: [$0]) }
    }

    /// False when the session carries a test marker whose base is no longer configured.
    func testMarkerHolds(_ testBase: String?) -> Bool {
        guard let testBase else { return true }
        return testAccounts.contains { $0.text == testBase }
    }

    /// Revokes a test account's browser session (and its native sessions)
    /// whose base is gone; answers whether it did.
    func revokeIfTestBaseRemoved(_ db: Database, _ session: BrowserSessionRecord, now: Int64) throws -> Bool {
        guard !testMarkerHolds(session.testBase) else { return false }
        try Records.revokeBrowserSession(db, id: session.id, now: now)
        Log.info("test account session ended: its base is no longer configured", ["browser_session.id": session.id])
        return true
    }

    /// Revokes a test account's native session whose base is gone (and the
    /// browser session it came from) and throws 401 SESSION_REVOKED.
    func checkTestMarker(_ db: Database, _ session: SessionRecord, now: Int64) throws {
        guard !testMarkerHolds(session.testBase) else { return }
        try Records.revokeSession(db, id: session.id, now: now)
        if let row = try db.queryOne("SELECT browser_session_id FROM sessions WHERE id = ?", session.id) {
            try Records.revokeBrowserSession(db, id: row.text("browser_session_id"), now: now)
        }
        Log.info("test account session ended: its base is no longer configured", ["session.id": session.id])
        throw APIError(.sessionRevoked, "this test account's base address is no longer configured; the session is revoked")
    }
}
