import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Sessions apps can use (issue 5): refresh, `http.request`, verification,
/// revocation from outside, `session.wait`, restarts.
@Suite("Sessions end to end", .dedicatedThread)
struct SessionTests {
    func signedIn(accessTokenMs: Int? = nil, sessionMs: Int? = nil, brokerArgs: [String] = []) throws -> Harness {
        let h = try Harness()
        try h.startServer(accessTokenMs: accessTokenMs, sessionMs: sessionMs)
        h.writeClient()
        try h.startBroker(arguments: ["--log-level", "debug"] + brokerArgs)
        try h.signIn()
        return h
    }

    func accessToken(_ h: Harness) -> String? {
        guard let item = h.keyringLookup(["kind": "session", "client": "com.example.notes"]) else { return nil }
        return (try? JSONValue.parse(item))?["session"]?["accessToken"]?.stringValue
    }

    @Test func accessTokensAreRefreshedBeforeTheyExpire() throws {
        let h = try signedIn(accessTokenMs: 3000)
        let first = try #require(accessToken(h))
        try waitUntil(10, "a refresh") { accessToken(h) != nil && accessToken(h) != first }
        // The new token works at the API, and the session never left signedIn.
        let rpc = try h.rpc()
        let me = try rpc.call(
            "http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
        #expect(me["status"] == 200)
        #expect(me["body"]?.stringValue?.contains(h.testEmail) == true)
        usleep(3_500_000)
        let again = try rpc.call(
            "http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
        #expect(again["status"] == 200)
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
    }

    @Test func aSessionEndsAtItsAbsoluteExpiry() throws {
        let h = try signedIn(accessTokenMs: 2000, sessionMs: 4000)
        let rpc = try h.rpc()
        try waitUntil(15, "the session to expire") {
            try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "expired"
        }
        #expect(h.keyringLookup(["kind": "session", "client": "com.example.notes"]) == nil)
        #expect(
            try errorCode(rpc, "http.request", ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
                == "NOT_SIGNED_IN")
    }

    @Test func httpRequestReachesTheDemoAPIWithTheBrokersToken() throws {
        let h = try signedIn()
        let rpc = try h.rpc()
        let created = try rpc.call(
            "http.request",
            params: [
                "client": "com.example.notes", "method": "POST", "path": "/api/notes",
                "headers": ["Content-Type": "application/json"], "body": #"{"text":"hello from the broker"}"#,
            ])
        #expect(created["status"] == 201)
        let notes = try rpc.call(
            "http.request",
            params: ["client": "com.example.notes", "method": "GET", "path": "/api/notes", "query": ["limit": "10"]])
        #expect(notes["status"] == 200)
        #expect(notes["body"]?.stringValue?.contains("hello from the broker") == true)
        #expect(notes["headers"]?["set-cookie"] == nil)
    }

    @Test(arguments: [
        ("//evil.example.com/x", "-32602"), ("/api/../browser-login/native/session", "-32602"),
        ("/api/%2e%2e/x", "-32602"), ("/api/x#frag", "-32602"), ("http://evil.example.com/", "-32602"),
        ("/browser-login/native/session", "-32602"), ("/api\\x", "-32602"),
    ])
    func httpRequestRefusesPathsThatLeaveTheAPI(path: String, code: String) throws {
        let h = try signedIn()
        #expect(
            try errorCode(try h.rpc(), "http.request", ["client": "com.example.notes", "method": "GET", "path": .string(path)])
                == code)
    }

    @Test func httpRequestRefusesCallerCredentialsAndSmuggling() throws {
        let h = try signedIn()
        let rpc = try h.rpc()
        for header in ["Authorization", "Cookie", "Host", "Transfer-Encoding", "Proxy-Authorization", "Bad Name"] {
            #expect(
                try errorCode(
                    rpc, "http.request",
                    ["client": "com.example.notes", "method": "GET", "path": "/api/me", "headers": [header: "x"]])
                    == "-32602", "\(header)")
        }
        #expect(
            try errorCode(
                rpc, "http.request",
                ["client": "com.example.notes", "method": "GET", "path": "/api/me", "headers": ["X-A": "a\r\nX-B: b"]])
                == "-32602")
        #expect(
            try errorCode(rpc, "http.request", ["client": "com.example.notes", "method": "TRACE", "path": "/api/me"])
                == "-32602")
    }

    @Test func aRedirectComesBackUnfollowedAndCookiesAreStripped() throws {
        let h = try Harness()
        try h.startServer()
        let api = try PythonAPI(dir: h.dir)
        defer { api.stop() }
        h.writeClient(extra: "ApiOrigin=http://127.0.0.1:\(api.port)")
        try h.startBroker()
        try h.signIn()
        let answer = try h.rpc().call(
            "http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/redirect"])
        #expect(answer["status"] == 302)
        #expect(answer["headers"]?["location"]?.stringValue == "http://127.0.0.1:\(api.port)/elsewhere")
        #expect(answer["headers"]?["set-cookie"] == nil)
        let log = api.requests()
        #expect(log.contains("GET /redirect Bearer"))
        #expect(!log.contains("/elsewhere"))
    }

    @Test func aUserDisabledAtTheServerIsSeenAsRevokedWithTheCode() throws {
        let h = try signedIn(brokerArgs: ["--verify-interval", "1"])
        let watcher = try h.rpc()
        _ = try watcher.call("events.subscribe", params: ["clients": ["com.example.notes"]])
        let admin = Child.Termination(
            terminationStatus: try runProgram(
                binDirectory + "/browser-login-server",
                ["users", "disable", h.testEmail, "--database", h.dir + "/server/server.sqlite"]
            ).status)
        #expect(admin.terminationStatus == 0)
        var seen: JSONValue?
        let deadline = Date().addingTimeInterval(15)
        while seen == nil, Date() < deadline {
            if case .notification("session.changed", let params) = try watcher.nextMessage(timeout: .seconds(15)),
                params?["session"]?["status"] == "revoked"
            {
                seen = params?["session"]
            }
        }
        #expect(seen?["reason"] == "AUTH_USER_DISABLED")
        #expect(h.keyringLookup(["kind": "session", "client": "com.example.notes"]) == nil)
    }

    @Test func sessionsSurviveARestart() throws {
        let h = try signedIn()
        try h.restartBroker()
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedIn")
        let me = try rpc.call("http.request", params: ["client": "com.example.notes", "method": "GET", "path": "/api/me"])
        #expect(me["status"] == 200)
    }

    @Test func sessionWaitResolvesForASignInThatStartsAfterTheCall() throws {
        let h = try Harness()
        try h.startServer()
        h.writeClient()
        try h.startBroker()
        let rpc = try h.rpc()
        #expect(
            try errorCode(rpc, "session.wait", ["client": "com.example.notes", "timeoutMs": 200]) == "WAIT_TIMEOUT")
        let waiter = try h.rpc()
        try waiter.send(
            RPCRequest(id: .integer(7), method: "session.wait", params: ["client": "com.example.notes", "timeoutMs": 60_000]))
        try h.signIn()
        guard case .response(let response) = try waiter.nextMessage(timeout: .seconds(30)) else {
            throw HarnessError("no response")
        }
        let session = try response.outcome.get()
        #expect(session["status"] == "signedIn")
        #expect(session["account"]?["email"]?.stringValue == h.testEmail)
    }

    @Test func signOutRevokesAtTheServerOrLaterWhenItIsDown() throws {
        let h = try signedIn()
        let token = try #require(accessToken(h))
        h.stopServer()
        let rpc = try h.rpc()
        let out = try rpc.call("session.signOut", params: ["client": "com.example.notes"])
        #expect(out["status"] == "signedOut")
        #expect(h.keyringLookup(["kind": "session", "client": "com.example.notes"]) == nil)
        #expect(h.keyringLookup(["kind": "revoke", "client": "com.example.notes"]) != nil)
        try h.launchServer()
        try waitUntil(15, "the owed revoke") { h.keyringLookup(["kind": "revoke", "client": "com.example.notes"]) == nil }
        // The token no longer works at the server.
        let answer = try RawGET(h.serverOrigin + "/api/me", bearer: token)
        #expect(answer == 401)
    }

    /// Issue 29: a sign-out while a refresh's answer is held back (sent,
    /// rotated at the server, not yet used) signs out at once; the answer,
    /// when it comes, is revoked and kept nowhere: no live session at the
    /// server, no session item in the keyring.
    @Test func aSignOutWhileARefreshAnswerIsHeldBackLeavesNoLiveTokenBehind() throws {
        let h = try Harness()
        try h.startServer(accessTokenMs: 3000)
        h.writeClient()
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT"] = "pause:answer:refresh"
        h.brokerEnvironment["BROWSER_LOGIN_TEST_FAULT_DIR"] = h.dir
        try h.startBroker()
        try h.signIn()
        let marker = h.dir + "/answer:refresh.paused"
        try waitUntil(15, "the refresh's answer to be held back") { FileManager.default.fileExists(atPath: marker) }
        let rpc = try h.rpc()
        #expect(try rpc.call("session.signOut", params: ["client": "com.example.notes"])["status"] == "signedOut")
        unlink(marker)
        try waitUntil(15, "the late answer to be dealt with") {
            (h.broker?.output ?? "").contains("a refresh was answered after its session ended")
                || h.keyringLookup(["kind": "session", "client": "com.example.notes"]) != nil
        }
        try waitUntil(15, "nothing owed") { h.keyringLookup(["kind": "revoke", "client": "com.example.notes"]) == nil }
        #expect(h.keyringLookup(["kind": "session", "client": "com.example.notes"]) == nil)
        #expect(try Self.liveServerSessions(h) == 0)
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")
    }

    /// The reference server's sessions that are not revoked.
    static func liveServerSessions(_ h: Harness) throws -> Int {
        let out = try spawnAndWait(
            ["/usr/bin/sqlite3", h.dir + "/server/server.sqlite", "SELECT count(*) FROM sessions WHERE revoked_at IS NULL"],
            environment: ProcessInfo.processInfo.environment
        ).stdout
        return Int(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }
}

/// A tiny HTTP API on loopback (Python) that logs what it receives, redirects
/// `/redirect` and sets a cookie on every answer.
final class PythonAPI: @unchecked Sendable {
    // Safe: used by one test from one task.
    let process: SpawnedProcess
    let port: Int
    let logPath: String

    init(dir: String) throws {
        logPath = dir + "/api.log"
        let script = """
            import http.server, sys
            log = open(sys.argv[1], "a", buffering=1)
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    auth = self.headers.get("Authorization", "")
                    log.write("GET %s %s\\n" % (self.path, auth.split(" ")[0]))
                    if self.path == "/redirect":
                        self.send_response(302)
                        self.send_header("Location", "http://127.0.0.1:%d/elsewhere" % self.server.server_port)
                    else:
                        self.send_response(200)
                    self.send_header("Set-Cookie", "tracking=1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                def log_message(self, *a):
                    pass
            s = http.server.HTTPServer(("127.0.0.1", 0), H)
            open(sys.argv[2], "w").write(str(s.server_port))
            s.serve_forever()
            """
        let portFile = dir + "/api.port"
        let process = try SpawnedProcess(
            ["/usr/bin/python3", "-c", script, logPath, portFile], environment: ProcessInfo.processInfo.environment,
            log: "/dev/null")
        self.process = process
        do {
            try waitUntil(10, "the Python API") {
                ((try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) } ?? 0) > 0
            }
        } catch {
            process.stop(SIGKILL)
            throw error
        }
        port = Int(try String(contentsOfFile: portFile, encoding: .utf8)) ?? 0
    }

    func requests() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func stop() {
        process.stop(SIGKILL)
    }
}

/// The status of a GET with a bearer token, through curl(1).
func RawGET(_ url: String, bearer: String) throws -> Int {
    let out = try spawnAndWait(
        ["/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer \(bearer)", url],
        environment: ProcessInfo.processInfo.environment
    ).stdout
    return Int(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
}
