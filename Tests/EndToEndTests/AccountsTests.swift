import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

/// Several accounts per client (issue 32, docs/rpc.md "Several accounts per
/// client"): the real daemon, reference server and keyring.
@Suite("Several accounts per client end to end", .dedicatedThread)
struct AccountsTests {
    static let client = "com.example.notes"

    /// A server, an `Accounts=multiple` client, and the broker.
    func multiple(extraClient: String = "") throws -> Harness {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Accounts=multiple\n" + extraClient)
        try h.startBroker()
        return h
    }

    /// Another test user of the server (`ada+…@example.com` addresses are its test accounts).
    func email(_ h: Harness, _ tag: String) -> String { h.testEmail.replacingOccurrences(of: "@", with: tag + "@") }

    /// Signs one more account in as `email`, in a browser of its own; answers the session after `login.finish`.
    @discardableResult
    func addAccount(_ h: Harness, _ rpc: RPCClient, email: String, client: String = Self.client) throws -> JSONValue {
        let attempt = try rpc.call(
            "login.start", params: ["client": .string(client), "openBrowser": false, "addAccount": true])
        let url = try #require(attempt["authorizeUrl"]?.stringValue)
        let callback = try h.browser().signInAndAuthorize(authorizeURL: url, email: email, code: "000000")
        let done = try rpc.call("login.finish", params: ["url": .string(callback)])
        return try #require(done["session"])
    }

    func me(_ rpc: RPCClient, account: JSONValue? = nil, client: String = Self.client) throws -> JSONValue {
        var params: [String: JSONValue] = ["client": .string(client), "method": "GET", "path": "/api/me"]
        if let account { params["account"] = account }
        return try rpc.call("http.request", params: .object(params))
    }

    func list(_ rpc: RPCClient, client: String = Self.client) throws -> [JSONValue] {
        try rpc.call("session.list", params: ["client": .string(client)]).arrayValue ?? []
    }

    @Test func twoAccountsAreSignedInAtOnceAndSwitched() throws {
        let h = try multiple()
        let rpc = try h.rpc()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: [:])
        try h.signIn()
        let first = try rpc.call("session.get", params: ["client": .string(Self.client)])
        let firstKey = try #require(first["accountKey"])
        #expect(first["current"] == true)
        let other = email(h, "work")
        let second = try addAccount(h, rpc, email: other)
        let secondKey = try #require(second["accountKey"])
        #expect(secondKey != firstKey)
        #expect(second["current"] == true)
        #expect(second["account"]?["email"]?.stringValue == other)

        // Both listed, the new one current and first.
        let accounts = try list(rpc)
        #expect(accounts.map { $0["accountKey"] } == [secondKey, firstKey])
        #expect(accounts.map { $0["current"] } == [true, false])
        #expect(accounts.allSatisfy { $0["status"] == "signedIn" })

        // Requests as each account, the current one without `account`.
        #expect(try me(rpc)["body"]?.stringValue?.contains(other) == true)
        #expect(try me(rpc, account: firstKey)["body"]?.stringValue?.contains(h.testEmail) == true)
        #expect(try me(rpc, account: secondKey)["body"]?.stringValue?.contains(other) == true)

        // Switching: the first becomes current; each change is notified with its key.
        let used = try rpc.call("session.use", params: ["client": .string(Self.client), "account": firstKey])
        #expect(used["accountKey"] == firstKey && used["current"] == true)
        #expect(try rpc.call("session.get", params: ["client": .string(Self.client)])["accountKey"] == firstKey)
        #expect(try me(rpc)["body"]?.stringValue?.contains(h.testEmail) == true)
        #expect(try list(rpc).map { $0["accountKey"] } == [firstKey, secondKey])
        var changes: [JSONValue] = []
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification("session.changed", let params) = message, let s = params?["session"] {
                changes.append(s)
            }
        }
        #expect(changes.contains { $0["accountKey"] == secondKey && $0["current"] == false })
        #expect(changes.last.map { $0["accountKey"] == firstKey && $0["current"] == true } == true)

        // Signing out the current account leaves the other working, and current.
        let out = try rpc.call("session.signOut", params: ["client": .string(Self.client)])
        #expect(out["status"] == "signedOut" && out["accountKey"] == firstKey)
        let now = try rpc.call("session.get", params: ["client": .string(Self.client)])
        #expect(now["status"] == "signedIn" && now["accountKey"] == secondKey && now["current"] == true)
        #expect(try me(rpc)["body"]?.stringValue?.contains(other) == true)
        #expect(try list(rpc).map { $0["accountKey"] } == [secondKey])
        #expect(
            try errorCode(rpc, "session.get", ["client": .string(Self.client), "account": firstKey]) == "ACCOUNT_UNKNOWN")
        // Signing out the last leaves the client signed out.
        _ = try rpc.call("session.signOut", params: ["client": .string(Self.client), "account": secondKey])
        #expect(try rpc.call("session.get", params: ["client": .string(Self.client)])["status"] == "signedOut")
        #expect(
            try errorCode(rpc, "http.request", ["client": .string(Self.client), "method": "GET", "path": "/api/me"])
                == "NOT_SIGNED_IN")
        // No session is left at the server.
        let live = try spawnAndWait(
            ["/usr/bin/sqlite3", h.dir + "/server/server.sqlite", "SELECT count(*) FROM sessions WHERE revoked_at IS NULL"]
        ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(live == "0")
    }

    @Test func aRestartKeepsBothAccountsAndTheCurrentOne() throws {
        let h = try multiple()
        let rpc = try h.rpc()
        try h.signIn()
        let firstKey = try #require(try rpc.call("session.get", params: ["client": .string(Self.client)])["accountKey"])
        let other = email(h, "home")
        let secondKey = try #require(try addAccount(h, rpc, email: other)["accountKey"])
        _ = try rpc.call("session.use", params: ["client": .string(Self.client), "account": firstKey])
        try h.restartBroker()
        let again = try h.rpc()
        #expect(try list(again).map { $0["accountKey"] } == [firstKey, secondKey])
        #expect(try list(again).map { $0["status"] } == ["signedIn", "signedIn"])
        #expect(try me(again)["body"]?.stringValue?.contains(h.testEmail) == true)
        #expect(try me(again, account: secondKey)["body"]?.stringValue?.contains(other) == true)
        // Each account's tokens are their own keyring item.
        #expect(h.keyringLookup(["kind": "session", "client": Self.client, "attempt": secondKey.stringValue ?? ""]) != nil)
    }

    @Test func aSecondSignInOfTheSameAccountReplacesItsSession() throws {
        let h = try multiple()
        let rpc = try h.rpc()
        try h.signIn()
        let key = try #require(try rpc.call("session.get", params: ["client": .string(Self.client)])["accountKey"])
        let again = try addAccount(h, rpc, email: h.testEmail)
        #expect(again["accountKey"] == key && again["status"] == "signedIn")
        #expect(try list(rpc).count == 1)
        #expect(try me(rpc)["status"] == 200)
        // The old session was signed out (revoked at the server), not kept beside the new one.
        let live = try spawnAndWait(
            ["/usr/bin/sqlite3", h.dir + "/server/server.sqlite", "SELECT count(*) FROM sessions WHERE revoked_at IS NULL"]
        ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(live == "1")
    }

    @Test func theSeventeenthAccountIsRefused() throws {
        let h = try multiple()
        let rpc = try h.rpc()
        try h.signIn()
        for i in 2...16 { try addAccount(h, rpc, email: email(h, "n\(i)")) }
        #expect(try list(rpc).count == 16)
        #expect(
            try errorCode(
                rpc, "login.start", ["client": .string(Self.client), "openBrowser": false, "addAccount": true])
                == "ACCOUNT_LIMIT")
        // Signing one out makes room.
        let oldest = try #require(try list(rpc).last?["accountKey"])
        _ = try rpc.call("session.signOut", params: ["client": .string(Self.client), "account": oldest])
        try addAccount(h, rpc, email: email(h, "n17"))
        #expect(try list(rpc).count == 16)
    }

    @Test func accountsOfAnotherClientAndBadInputAreRefused() throws {
        let h = try Harness()
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.todo", "Example Todo", "com.example.todo:/callback"),
        ])
        h.writeClient(extra: "Accounts=multiple")
        h.writeClient(file: "todo.conf", id: "com.example.todo", appName: "Example Todo", returnURL: "com.example.todo:/callback")
        try h.startBroker()
        let rpc = try h.rpc()
        try h.signIn()
        let notesKey = try #require(try rpc.call("session.get", params: ["client": .string(Self.client)])["accountKey"])
        // The todo client (single) is signed in as another user.
        let attempt = try rpc.call("login.start", params: ["client": "com.example.todo", "openBrowser": false])
        let callback = try h.browser().signInAndAuthorize(
            authorizeURL: try #require(attempt["authorizeUrl"]?.stringValue), email: email(h, "todo"), code: "000000")
        _ = try rpc.call("login.finish", params: ["url": .string(callback)])
        let todo = try rpc.call("session.get", params: ["client": "com.example.todo"])
        // A single client's view has its key and is current.
        #expect(todo["current"] == true && todo["accountKey"]?.stringValue?.hasPrefix("acct_") == true)
        #expect(try list(rpc, client: "com.example.todo").count == 1)
        for method in ["session.get", "session.signOut", "session.use"] {
            #expect(
                try errorCode(rpc, method, ["client": "com.example.todo", "account": notesKey]) == "ACCOUNT_UNKNOWN",
                "\(method)")
        }
        #expect(
            try errorCode(
                rpc, "session.wait", ["client": "com.example.todo", "account": notesKey, "timeoutMs": 60_000])
                == "ACCOUNT_UNKNOWN")
        #expect(
            try errorCode(
                rpc, "http.request",
                ["client": "com.example.todo", "account": notesKey, "method": "GET", "path": "/api/me"])
                == "ACCOUNT_UNKNOWN")
        // The todo client's session is untouched.
        #expect(try me(rpc, client: "com.example.todo")["body"]?.stringValue?.contains(email(h, "todo")) == true)
        // addAccount on a single client names the setting.
        do {
            _ = try rpc.call(
                "login.start", params: ["client": "com.example.todo", "openBrowser": false, "addAccount": true])
            Issue.record("addAccount on a single client was accepted")
        } catch let error as RPCError {
            #expect(error.code.rawValue == -32602)
            #expect(error.message.contains("Accounts=multiple"))
        }
        #expect(try errorCode(rpc, "session.use", ["client": "com.example.todo"]) == "-32602")
        #expect(
            try errorCode(
                rpc, "login.start",
                ["client": .string(Self.client), "addAccount": true, "loginHint": .string(String(repeating: "a", count: 300))])
                == "-32602")
    }

    @Test func aPeersBoundClientsAccountsAreHiddenFromOtherPrograms() throws {
        let h = try Harness()
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.bound", "Bound Notes", "com.example.bound:/callback"),
        ])
        h.writeClient(extra: "Accounts=multiple")
        h.writeClient(
            file: "bound.conf", id: "com.example.bound", appName: "Bound Notes",
            returnURL: "com.example.bound:/callback", extra: "Accounts=multiple\nPeers=/usr/bin/true")
        try h.startBroker()
        let rpc = try h.rpc()
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: [:])
        try h.signIn()
        for method in ["session.list", "session.get"] {
            #expect(try errorCode(rpc, method, ["client": "com.example.bound"]) == "CLIENT_FORBIDDEN", "\(method)")
        }
        #expect(
            try errorCode(
                rpc, "session.use",
                ["client": "com.example.bound", "account": .string("acct_" + String(repeating: "A", count: 22))])
                == "CLIENT_FORBIDDEN")
        #expect(
            try errorCode(rpc, "login.start", ["client": "com.example.bound", "addAccount": true, "openBrowser": false])
                == "CLIENT_FORBIDDEN")
        // The subscriber sees the notes client's accounts, never the bound one's.
        var clients: Set<String> = []
        while let message = try? watcher.nextMessage(timeout: .milliseconds(500)) {
            if case .notification("session.changed", let params) = message,
                let client = params?["session"]?["client"]?.stringValue
            {
                clients.insert(client)
            }
        }
        #expect(clients == ["com.example.notes"])
    }

    @Test func aStateDatabaseOfThePreviousReleaseMigratesInPlace() throws {
        // A single client signed in, then its database put back in the previous release's schema.
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        try h.signIn()
        h.broker?.stop()
        let downgrade = """
            CREATE TABLE old_sessions (client TEXT PRIMARY KEY NOT NULL, status TEXT NOT NULL, user_id TEXT, email TEXT,
                display_name TEXT, auth_method TEXT, authenticated_at INTEGER, expires_at INTEGER,
                access_token_expires_at INTEGER, reason TEXT, attempt_id TEXT, updated_at INTEGER NOT NULL,
                revoke_pending INTEGER NOT NULL DEFAULT 0, verified_at INTEGER);
            INSERT INTO old_sessions SELECT client, status, user_id, email, display_name, auth_method, authenticated_at,
                expires_at, access_token_expires_at, reason, attempt_id, updated_at, revoke_pending, verified_at
                FROM sessions;
            DROP TABLE sessions;
            ALTER TABLE old_sessions RENAME TO sessions;
            DELETE FROM schema_migrations WHERE name = '004-accounts';
            """
        let result = try spawnAndWait(["/usr/bin/sqlite3", h.databasePath, downgrade])
        #expect(result.status == 0)
        // The previous release's session item: keyed by client only.
        #expect(h.keyringLookup(["kind": "session", "client": Self.client]) != nil)
        // The client may now hold several accounts.
        h.writeClient(extra: "Accounts=multiple")
        try h.startBroker()
        let rpc = try h.rpc()
        let session = try rpc.call("session.get", params: ["client": .string(Self.client)])
        #expect(session["status"] == "signedIn" && session["current"] == true)
        let key = try #require(session["accountKey"]?.stringValue)
        #expect(key.hasPrefix("acct_"))
        #expect(try me(rpc)["body"]?.stringValue?.contains(h.testEmail) == true)
        #expect(try me(rpc, account: .string(key))["status"] == 200)
        // A second account beside the migrated one; both work, and the migrated one signs out cleanly.
        let other = email(h, "new")
        let added = try addAccount(h, rpc, email: other)
        #expect(try list(rpc).count == 2)
        #expect(try me(rpc, account: .string(key))["body"]?.stringValue?.contains(h.testEmail) == true)
        _ = try rpc.call("session.signOut", params: ["client": .string(Self.client), "account": .string(key)])
        #expect(h.keyringLookup(["kind": "session", "client": Self.client, "attempt": ""]) == nil)
        #expect(try me(rpc)["body"]?.stringValue?.contains(other) == true)
        #expect(try list(rpc).map { $0["accountKey"] } == [added["accountKey"]])
    }
}

/// The accounts over D-Bus (docs/dbus.md): `ListSessions`, `UseAccount`,
/// `GetAccountSession`, `SignOutAccount`, the `account` option, and
/// `SessionChanged` carrying the key.
@Suite("Several accounts over D-Bus", .dedicatedThread)
struct AccountsDBusTests {
    @Test func theBusListsSwitchesAndNamesAccounts() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient(extra: "Accounts=multiple")
        try DBusAPITests.start(h)
        let rpc = try h.rpc()
        try h.signIn()
        let first = try #require(try rpc.call("session.get", params: ["client": "com.example.notes"])["accountKey"]?.stringValue)
        let other = h.testEmail.replacingOccurrences(of: "@", with: "bus@")
        let listener = try DBusAPITests.listen(h, ["--timeout", "120"], log: h.dir + "/listen.log")
        defer { listener.stop() }
        let attempt = try rpc.call(
            "login.start", params: ["client": "com.example.notes", "openBrowser": false, "addAccount": true])
        let callback = try h.browser().signInAndAuthorize(
            authorizeURL: try #require(attempt["authorizeUrl"]?.stringValue), email: other, code: "000000")
        _ = try rpc.call("login.finish", params: ["url": .string(callback)])
        let second = try #require(try rpc.call("session.get", params: ["client": "com.example.notes"])["accountKey"]?.stringValue)

        let listed = try DBusAPITests.ok(h, "ListSessions", "com.example.notes")
        #expect(listed.contains(first) && listed.contains(second) && listed.contains("'current': <true>"), "\(listed)")
        let used = try DBusAPITests.ok(h, "UseAccount", "com.example.notes", first)
        #expect(DBusAPITests.member("accountKey", in: used) == first, "\(used)")
        let named = try DBusAPITests.ok(h, "GetAccountSession", "com.example.notes", second)
        #expect(named.contains(other) && named.contains("'current': <false>"), "\(named)")
        let asSecond = try DBusAPITests.ok(
            h, "Request", "com.example.notes", "GET", "/api/me", "{'account': <'\(second)'>}")
        #expect(asSecond.contains(other), "\(asSecond)")
        let waited = try DBusAPITests.ok(h, "WaitSession", "com.example.notes", "{'account': <'\(second)'>}")
        #expect(DBusAPITests.member("accountKey", in: waited) == second)
        let unknown = try DBusAPITests.call(
            h, "GetAccountSession", "com.example.notes", "acct_" + String(repeating: "A", count: 22))
        #expect(unknown.err.contains("org.browserlogin.Error.ACCOUNT_UNKNOWN"), "\(unknown.err)")
        let out = try DBusAPITests.ok(h, "SignOutAccount", "com.example.notes", second)
        #expect(out.contains("'status': <'signedOut'>"), "\(out)")
        // SessionChanged carried each account's key.
        try waitUntil(10, "the signals") { listener.output.contains(second) && listener.output.contains(first) }
    }
}

/// Two users of one real provider (django-oauth-toolkit, Glewlwyd) signed in
/// to one `Accounts=multiple` client at once, each keyed by issuer + `sub`.
@Suite(.dedicatedThread) struct ProviderAccountsTests {
    @Test(arguments: TestProvider.Kind.runnable)
    func twoUsersOfOneProviderAreSignedInAtOnce(_ kind: TestProvider.Kind) throws {
        let world = try ProviderWorld(kind, extra: "Accounts=multiple")
        let rpc = try world.h.rpc()
        try world.signIn()
        let alice = try world.session()
        #expect(alice["account"]?["email"] == "alice@example.com", "\(alice)")
        let aliceKey = try #require(alice["accountKey"])

        // One more account: the provider is asked to let the user choose, the address filled in.
        let attempt = try rpc.call(
            "login.start",
            params: ["client": "com.example.chat", "openBrowser": false, "addAccount": true, "loginHint": "bob@example.com"])
        let url = try #require(attempt["authorizeUrl"]?.stringValue)
        #expect(url.contains("prompt=select_account") || url.contains("prompt=login"), "\(url)")
        #expect(url.contains("login_hint=bob%40example.com"), "\(url)")
        let delivered = try world.provider.authorizeDelivering(url, user: "bob", deliver: true)
        #expect(delivered.deliveryStatus?.contains("200") == true, "the loopback page: \(delivered)")
        try waitUntil(15, "bob's session") { try world.session()["account"]?["email"] == "bob@example.com" }
        let bob = try world.session()
        let bobKey = try #require(bob["accountKey"])
        #expect(bobKey != aliceKey && bob["current"] == true)

        let accounts = try rpc.call("session.list", params: ["client": "com.example.chat"]).arrayValue ?? []
        #expect(accounts.map { $0["accountKey"] } == [bobKey, aliceKey], "\(accounts)")
        #expect(accounts.allSatisfy { $0["status"] == "signedIn" })
        for (key, email) in [(aliceKey, "alice@example.com"), (bobKey, "bob@example.com")] {
            let answer = try rpc.call(
                "http.request",
                params: ["client": "com.example.chat", "method": "GET", "path": .string(kind.apiPath), "account": key])
            #expect(answer["status"] == 200, "\(answer)")
            #expect(answer["body"]?.stringValue?.contains(email) == true, "\(answer)")
        }
        // Signing bob out leaves alice working, and current.
        _ = try rpc.call("session.signOut", params: ["client": "com.example.chat", "account": bobKey])
        try waitUntil(20, "bob's revoke to reach the provider") {
            try world.provider.tokenCounts(user: "bob").refresh == 0
        }
        #expect(try world.session()["accountKey"] == aliceKey)
        let me = try rpc.call(
            "http.request", params: ["client": "com.example.chat", "method": "GET", "path": .string(kind.apiPath)])
        #expect(me["body"]?.stringValue?.contains("alice@example.com") == true, "\(me)")
        #expect(try world.provider.tokenCounts(user: "alice").refresh == 1)
    }
}

/// The CLI's accounts: `accounts`, `use`, `--account`, `start --add-account`, and `status`.
@Suite("Several accounts in the CLI", .dedicatedThread)
struct AccountsCLITests {
    @Test func theCLIListsSwitchesAndUsesAccounts() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient(extra: "Accounts=multiple")
        try h.startBroker()
        try h.signIn()
        let rpc = try h.rpc()
        let firstKey = try #require(
            try rpc.call("session.get", params: ["client": "com.example.notes"])["accountKey"]?.stringValue)
        // A second account through `start --add-account --login-hint --no-browser`.
        let other = h.testEmail.replacingOccurrences(of: "@", with: "cli@")
        let started = try h.cli(["start", "com.example.notes", "--add-account", "--login-hint", other, "--no-browser", "--json"])
        #expect(started.status == 0, "\(started.err)")
        let url = try #require(try JSONValue.parse(started.out)["authorizeUrl"]?.stringValue)
        let callback = try h.browser().signInAndAuthorize(authorizeURL: url, email: other, code: "000000")
        #expect(try h.cli(["finish", callback]).status == 0)

        let listed = try h.cli(["accounts", "com.example.notes"])
        #expect(listed.status == 0)
        #expect(listed.out.contains(other) && listed.out.contains(h.testEmail) && listed.out.contains(firstKey), "\(listed.out)")
        let json = try JSONValue.parse(try h.cli(["accounts", "com.example.notes", "--json"]).out).arrayValue ?? []
        #expect(json.count == 2 && json.first?["current"] == true)

        let used = try h.cli(["use", "com.example.notes", firstKey])
        #expect(used.status == 0 && used.out.contains(h.testEmail), "\(used.out + used.err)")
        let me = try h.cli(["request", "com.example.notes", "GET", "/api/me"])
        #expect(me.out.contains(h.testEmail))
        let secondKey = try #require(json.first?["accountKey"]?.stringValue)
        let asOther = try h.cli(["request", "com.example.notes", "GET", "/api/me", "--account", secondKey])
        #expect(asOther.status == 0 && asOther.out.contains(other), "\(asOther.out + asOther.err)")
        let session = try h.cli(["session", "com.example.notes", "--account", secondKey])
        #expect(session.status == 0 && session.out.contains(other) && session.out.contains("not the current account"))

        // `status` lists every client's accounts, with which is current, and no secret.
        let status = try h.cli(["status"])
        #expect(status.out.contains("accounts:") && status.out.contains(other) && status.out.contains(h.testEmail))
        let item = try #require(h.keyringLookup(["kind": "session", "client": "com.example.notes", "attempt": secondKey]))
        let token = try #require(try JSONValue.parse(item)["session"]?["accessToken"]?.stringValue)
        #expect(!status.out.contains(token) && !listed.out.contains(token))

        let out = try h.cli(["sign-out", "com.example.notes", "--account", secondKey])
        #expect(out.status == 0 && out.out.contains(other), "\(out.out)")
        #expect(try h.cli(["accounts", "com.example.notes", "--json"]).out.contains(secondKey) == false)
        let unknown = try h.cli(["use", "com.example.notes", secondKey])
        #expect(unknown.status != 0 && unknown.err.contains("ACCOUNT_UNKNOWN"), "\(unknown.err)")
        // A single client refuses --add-account, naming the setting.
        h.writeClient(file: "todo.conf", id: "com.example.todo", appName: "Todo", returnURL: "com.example.todo:/callback")
        try h.restartBroker()
        let single = try h.cli(["start", "com.example.todo", "--add-account", "--no-browser"])
        #expect(single.status != 0 && single.err.contains("Accounts=multiple"), "\(single.err)")
    }
}
