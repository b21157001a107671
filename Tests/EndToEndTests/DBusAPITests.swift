import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import SystemSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The broker's D-Bus API, org.browserlogin.Broker1 (docs/dbus.md), end to
/// end: the real daemon on the harness's private session bus (with its
/// headless keyring), called with `gdbus` and a GLib client in Python
/// (Tests/DBus/listen.py), signing in against the reference server.
@Suite("D-Bus API end to end", .dedicatedThread)
struct DBusAPITests {
    static let name = "org.browserlogin.Broker1"
    static let listener = repositoryRoot + "/Tests/DBus/listen.py"

    /// `gdbus call` of a Broker1 method; answers its exit status, output and errors.
    static func call(_ h: Harness, _ method: String, _ arguments: String..., timeout: Int = 25) throws -> (
        status: Int32, out: String, err: String
    ) {
        try runProgram(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--timeout", "\(timeout)", "--dest", name, "--object-path",
                "/org/browserlogin/Broker1", "--method", "\(name).\(method)",
            ] + arguments, environment: h.environment())
    }

    /// A call that must succeed: its output.
    static func ok(_ h: Harness, _ method: String, _ arguments: String...) throws -> String {
        let result = try runProgram(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", name, "--object-path", "/org/browserlogin/Broker1", "--method",
                "\(name).\(method)",
            ] + arguments, environment: h.environment())
        guard result.status == 0 else { throw HarnessError("\(method) failed: \(result.err)") }
        return result.out
    }

    /// Starts the broker and waits until it owns org.browserlogin.Broker1.
    static func start(_ h: Harness) throws {
        try h.startBroker()
        let waited = try runProgram(
            "/usr/bin/gdbus", ["wait", "--session", "--timeout", "15", name], environment: h.environment())
        guard waited.status == 0 else { throw HarnessError("the broker did not own \(name): \(waited.err)") }
    }

    /// The string member `key` of a `gdbus call` reply (`'key': <'value'>`).
    static func member(_ key: String, in output: String) -> String? {
        guard let start = output.range(of: "'\(key)': <'") else { return nil }
        let rest = output[start.upperBound...]
        return rest.range(of: "'>").map { String(rest[..<$0.lowerBound]) }
    }

    /// Runs the GLib listener (Tests/DBus/listen.py) until it prints "ready".
    static func listen(_ h: Harness, _ arguments: [String], log: String) throws -> Child {
        let child = try Child("/usr/bin/python3", [listener] + arguments, environment: h.environment(), log: log)
        try waitUntil(20, "the GLib listener to be ready") {
            guard child.isRunning || child.output.contains("ready") else {
                throw HarnessError("the listener ended: \(child.output)", fatal: true)
            }
            return child.output.contains("ready")
        }
        return child
    }

    /// The unique name a listener printed.
    static func uniqueName(of listener: Child) -> String? {
        for line in lines(listener) { if let name = line["uniqueName"]?.stringValue { return name } }
        return nil
    }

    /// The JSON lines a listener printed.
    static func lines(_ child: Child) -> [JSONValue] {
        child.output.split(separator: "\n").compactMap { try? JSONValue.parse(Array($0.utf8)) }
    }

    @Test func theMethodsMirrorTheRPCAndTheBusCarriesNoSecret() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let owner = try Self.owner(h)
        // What the bus carries to and from the broker's API.
        let rules = [
            "type='signal',interface='\(Self.name)'", "type='method_call',interface='\(Self.name)'",
            "type='method_return',sender='\(owner)'", "type='error',sender='\(owner)'",
        ]
        let monitor = try Child(
            "/usr/bin/dbus-monitor", ["--session"] + rules, environment: h.environment(), log: h.dir + "/monitor.log")
        defer { monitor.stop() }
        try waitUntil(10, "dbus-monitor to listen") {
            monitor.output.contains("NameAcquired") || monitor.output.contains("member=")
        }

        let info = try Self.ok(h, "Info")
        #expect(info.contains("'protocol': <int64 1>"))
        #expect(info.contains("'vaultAvailable': <true>"))
        #expect(try Self.ok(h, "ListClients").contains("'id': <'com.example.notes'>"))
        let signedOut = try Self.ok(h, "GetSession", "com.example.notes")
        #expect(signedOut.contains("'status': <'signedOut'>"))
        // Null members are left out.
        #expect(!signedOut.contains("'reason'"))

        // Errors: the broker's code, invalid params, a bad option.
        let unknown = try Self.call(h, "GetSession", "com.example.nope")
        #expect(unknown.status != 0)
        #expect(unknown.err.contains("org.browserlogin.Error.CLIENT_UNKNOWN"))
        let bogus = try Self.call(h, "Start", "com.example.notes", "{'bogus': <true>}")
        #expect(bogus.err.contains("org.freedesktop.DBus.Error.InvalidArgs"))
        #expect(bogus.err.contains("bogus"))
        let badType = try Self.call(h, "Start", "com.example.notes", "{'openBrowser': <'yes'>}")
        #expect(badType.err.contains("org.freedesktop.DBus.Error.InvalidArgs"))
        #expect(badType.err.contains("'openBrowser' must be true or false"))
        let noSubscription = try Self.call(h, "Unsubscribe", "sub-none")
        #expect(noSubscription.err.contains("org.freedesktop.DBus.Error.InvalidArgs"))
        let notSignedIn = try Self.call(h, "Request", "com.example.notes", "GET", "/api/me", "{}")
        #expect(notSignedIn.err.contains("org.browserlogin.Error.NOT_SIGNED_IN"))

        // A sign-in over D-Bus: Start, the user in the browser, Finish.
        let started = try Self.ok(h, "Start", "com.example.notes", "{'openBrowser': <false>}")
        let attemptId = try #require(Self.member("attemptId", in: started))
        let authorizeURL = try #require(Self.member("authorizeUrl", in: started))
        #expect(Self.member("state", in: started) == "waiting")
        let callback = try h.browser().signInAndAuthorize(authorizeURL: authorizeURL, email: h.testEmail, code: "000000")
        let finished = try Self.ok(h, "Finish", callback)
        #expect(Self.member("state", in: finished) == "completed")
        #expect(Self.member("attemptId", in: finished) == attemptId)
        let session = try Self.ok(h, "GetSession", "com.example.notes")
        #expect(session.contains("'status': <'signedIn'>"))
        #expect(session.contains("'email': <'\(h.testEmail)'>"))
        let status = try Self.ok(h, "Status", attemptId, "{'reconcile': <false>}")
        #expect(Self.member("state", in: status) == "completed")
        #expect(try Self.ok(h, "ListAttempts", "{'client': <'com.example.notes'>}").contains(attemptId))
        #expect(try Self.ok(h, "WaitSession", "com.example.notes", "{'timeoutMs': <int64 1000>}").contains("signedIn"))

        // The app's request through the broker: status x, headers a{ss}.
        let response = try Self.ok(h, "Request", "com.example.notes", "GET", "/api/me", "{}")
        #expect(response.contains("'status': <int64 200>"))
        #expect(response.contains("'content-type': 'application/json'"))
        #expect(response.contains(h.testEmail))
        let query = try Self.ok(
            h, "Request", "com.example.notes", "GET", "/api/notes", "{'query': <{'limit': '5'}>, 'timeoutMs': <5000>}")
        #expect(query.contains("'status': <int64 200>"))

        let secrets = try #require(h.keyringLookup(["kind": "session", "client": "com.example.notes"]))
        let stored = try JSONValue.parse(Array(secrets.utf8))["session"]
        let accessToken = try #require(stored?["accessToken"]?.stringValue)
        let refreshToken = try #require(stored?["refreshToken"]?.stringValue)
        let signedOutAgain = try Self.ok(h, "SignOut", "com.example.notes")
        #expect(signedOutAgain.contains("'status': <'signedOut'>"))
        let acknowledged = try Self.ok(h, "Acknowledge", attemptId)
        #expect(Self.member("state", in: acknowledged) == "acknowledged")

        // No token on the bus; the callback URL only in the Finish call that carried it; none in the log.
        Thread.sleep(forTimeInterval: 0.3)
        monitor.stop()
        let carried = monitor.output
        #expect(carried.contains("member=Finish"))
        #expect(carried.components(separatedBy: callback).count == 2, "the callback URL is on the bus only once")
        let code = try #require(URLComponents(string: callback)?.queryItems?.first { $0.name == "code" }?.value)
        #expect(carried.components(separatedBy: code).count == 2)
        for secret in [accessToken, refreshToken] { #expect(!carried.contains(secret)) }
        let log = h.broker?.output ?? ""
        #expect(!log.contains(callback))
        #expect(!log.contains(code))
        for secret in [accessToken, refreshToken] { #expect(!log.contains(secret)) }
    }

    @Test func introspectionMatchesTheInstalledInterface() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let introspected = try runProgram(
            "/usr/bin/gdbus",
            ["introspect", "--session", "--xml", "--dest", Self.name, "--object-path", "/org/browserlogin/Broker1"],
            environment: h.environment())
        #expect(introspected.status == 0, "\(introspected.err)")
        let installed = try String(
            contentsOfFile: repositoryRoot + "/dbus/org.browserlogin.Broker1.xml", encoding: .utf8)
        let served = Self.members(introspected.out)
        #expect(served.count == 21)
        #expect(served == Self.members(installed))
    }

    /// The methods and signals of interface org.browserlogin.Broker1 in introspection XML, one line
    /// each with its arguments ("method Start(client s in, options a{sv} in, attempt a{sv} out)"),
    /// sorted: comments, attribute order and the order of members do not count.
    static func members(_ xml: String) -> [String] {
        var text = xml
        while let open = text.range(of: "<!--"), let close = text.range(of: "-->", range: open.upperBound..<text.endIndex) {
            text.removeSubrange(open.lowerBound..<close.upperBound)
        }
        guard let start = text.range(of: "<interface name=\"\(name)\">"),
            let end = text.range(of: "</interface>", range: start.upperBound..<text.endIndex)
        else { return [] }
        var out: [String] = []
        var inSignal = false
        for tag in text[start.upperBound..<end.lowerBound].split(separator: "<").map({ String($0) }) {
            let kind = String(tag.prefix { $0.isLetter })
            func attribute(_ key: String) -> String {
                guard let r = tag.range(of: " \(key)=\"") else { return "" }
                let rest = tag[r.upperBound...]
                return String(rest[..<(rest.firstIndex(of: "\"") ?? rest.endIndex)])
            }
            switch kind {
            case "method", "signal":
                inSignal = kind == "signal"
                out.append("\(kind) \(attribute("name"))(")
            case "arg" where !out.isEmpty:
                let direction = inSignal ? "" : " " + attribute("direction")
                out[out.count - 1] +=
                    (out[out.count - 1].hasSuffix("(") ? "" : ", ")
                    + "\(attribute("name")) \(attribute("type"))\(direction)"
            default: break
            }
        }
        return out.map { $0 + ")" }.sorted()
    }

    @Test func aGLibClientSeesSessionChangedWhenTheUserSignsIn() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let listener = try Self.listen(h, ["--until-client", "com.example.notes"], log: h.dir + "/listener.log")
        defer { listener.stop() }
        try h.signIn()
        try waitUntil(20, "the listener to see the session signed in") { !listener.isRunning }
        let seen = Self.lines(listener)
        let sessions = seen.filter { $0["signal"] == "SessionChanged" }.compactMap { $0["payload"] }
        #expect(sessions.contains { $0["status"] == "signedIn" && $0["account"]?["email"]?.stringValue == h.testEmail })
        let attempts = seen.filter { $0["signal"] == "LoginChanged" }.compactMap { $0["payload"] }
        #expect(attempts.contains { $0["state"] == "completed" })
        #expect(!listener.output.contains("authorizeUrl"))
    }

    @Test func aPeersBoundClientIsRefusedOverDBusAndItsSignalsGoOnlyToSubscribersThatMayUseIt() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer(clients: [
            ("com.example.notes", "Example Notes", "com.example.notes:/callback"),
            ("com.example.bound", "Bound", "com.example.bound:/callback"),
        ])
        // The test itself (over the socket) and Python (the GLib listener) may use it; gdbus may not.
        let testProgram = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
        h.writeClient()
        h.writeClient(
            file: "bound.conf", id: "com.example.bound", appName: "Bound", returnURL: "com.example.bound:/callback",
            extra: "Peers=\(testProgram);\(python)")
        try Self.start(h)

        let refused = try Self.call(h, "GetSession", "com.example.bound")
        #expect(refused.err.contains("org.browserlogin.Error.CLIENT_FORBIDDEN"), "\(refused.err)")
        let start = try Self.call(h, "Start", "com.example.bound", "{'openBrowser': <false>}")
        #expect(start.err.contains("org.browserlogin.Error.CLIENT_FORBIDDEN"))
        let clients = try Self.ok(h, "ListClients")
        #expect(clients.contains("com.example.notes") && !clients.contains("com.example.bound"))
        let subscribe = try Self.call(h, "Subscribe", "{'clients': <['com.example.bound']>}")
        #expect(subscribe.err.contains("org.browserlogin.Error.CLIENT_FORBIDDEN"))

        // A subscriber that may use it, and a listener that did not subscribe.
        let subscriber = try Self.listen(
            h, ["--subscribe", "--until-client", "com.example.bound"], log: h.dir + "/subscriber.log")
        defer { subscriber.stop() }
        let bystander = try Self.listen(h, ["--until-client", "com.example.notes"], log: h.dir + "/bystander.log")
        defer { bystander.stop() }
        try h.signIn(client: "com.example.bound")
        try waitUntil(20, "the subscriber to see the bound client signed in") { !subscriber.isRunning }
        // The unbound client's sign-in after it: broadcast, and behind the bound one's signals on the bus.
        try h.signIn()
        try waitUntil(20, "the bystander to see the notes client signed in") { !bystander.isRunning }

        let subscribed = Self.lines(subscriber)
        #expect(subscribed.contains { $0["subscription"]?.stringValue != nil })
        #expect(
            subscribed.contains {
                $0["signal"] == "SessionChanged" && $0["payload"]?["client"] == "com.example.bound"
                    && $0["payload"]?["status"] == "signedIn"
            })
        let broadcast = Self.lines(bystander)
        #expect(broadcast.contains { $0["payload"]?["client"] == "com.example.notes" })
        #expect(!bystander.output.contains("com.example.bound"), "\(bystander.output)")
    }

    @Test func aCallerWithTooManyCallsInFlightIsAnsweredBusy() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let flood = try runProgram(
            "/usr/bin/python3", [Self.listener, "--flood", "40", "com.example.notes"], environment: h.environment())
        #expect(flood.status == 0, "\(flood.err)")
        let tally = try JSONValue.parse(Array(flood.out.utf8))
        // 16 wait (and time out); the others are refused at once.
        #expect(tally["errors"]?["org.browserlogin.Error.WAIT_TIMEOUT"] == .integer(16), "\(flood.out)")
        #expect(tally["errors"]?["org.browserlogin.Error.BUSY"] == .integer(24), "\(flood.out)")
        // The broker still answers that caller's next call.
        #expect(try Self.ok(h, "GetSession", "com.example.notes").contains("signedOut"))
    }

    @Test func theCallsOfACallerThatLeavesTheBusEnd() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let started = Date()
        let run = try runProgram(
            "/usr/bin/python3",
            [Self.listener, "--flood", "15", "com.example.notes", "--wait-ms", "300000", "--leave"],
            environment: h.environment())
        #expect(run.out.contains("left"), "\(run.err)")
        // Its 15 five-minute WaitSession calls end with it, not in five minutes.
        try waitUntil(10, "the broker to cancel the calls of the caller that left") {
            h.broker?.output.contains("dbus.calls=15") == true
        }
        #expect(h.broker?.output.contains("D-Bus calls cancelled: their caller left the bus") == true)
        #expect(Date().timeIntervalSince(started) < 60)
    }

    @Test func aCallerHasAtMost32SubscriptionsWhichEndWhenItLeavesTheBus() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let run = try runProgram(
            "/usr/bin/python3", [Self.listener, "--subscribe", "--subscriptions", "33", "--timeout", "0"],
            environment: h.environment())
        #expect(run.status == 4)
        #expect(run.out.components(separatedBy: "\"subscription\"").count == 33)
        #expect(run.out.contains("org.browserlogin.Error.BUSY"), "\(run.out)")
        // The listener has gone: the broker drops its 32 subscriptions.
        try waitUntil(10, "the broker to end the subscriptions of the caller that left") {
            h.broker?.output.contains("dbus.subscriptions=32") == true
        }
        #expect(h.broker?.output.contains("D-Bus subscriptions ended: their caller left the bus") == true)
    }

    /// The broker's unique name on the bus (the owner of org.browserlogin.Broker1).
    static func owner(_ h: Harness) throws -> String {
        let reply = try runProgram(
            "/usr/bin/gdbus",
            [
                "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                "--method", "org.freedesktop.DBus.GetNameOwner", name,
            ], environment: h.environment())
        return try #require(reply.out.split(separator: "'").dropFirst().first.map(String.init), "\(reply.err)")
    }

    /// Whose `NameOwnerChanged` the bus sends `connection` (the `arg0` of each such match rule, "*"
    /// for a rule with none: every process coming to the bus or leaving it), sorted.
    static func ownerChangesWatched(by connection: String, _ h: Harness) throws -> [String] {
        let run = try runProgram("/usr/bin/python3", [listener, "--match-rules", connection], environment: h.environment())
        let rules = try JSONValue.parse(Array(run.out.utf8))["rules"]?.arrayValue ?? []
        return rules.compactMap(\.stringValue).filter { $0.contains("member='NameOwnerChanged'") }.map { rule in
            guard let start = rule.range(of: "arg0='") else { return "*" }
            return String(rule[start.upperBound...].prefix { $0 != "'" })
        }.sorted()
    }

    /// The context switches of all the broker's threads so far.
    static func brokerSwitches(_ h: Harness) -> Int {
        ProcFS.contextSwitches(pid: h.broker?.pid ?? -1).values.reduce(0) { $0 + $1.count }
    }

    @Test func theBusTellsTheBrokerOfItsOwnCallersLeavingAndOfNoOtherProcess() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let broker = try Self.owner(h)
        // At rest the broker follows the keyring's name only.
        #expect(try Self.ownerChangesWatched(by: broker, h) == ["org.freedesktop.secrets"])
        // Twenty processes come to the bus and leave it, asking the broker nothing: the bus sends it
        // nothing, so none of its threads wakes for them (each did twice when it heard them all).
        _ = try Self.ok(h, "Info")
        let before = Self.brokerSwitches(h)
        for _ in 0..<20 {
            _ = try runProgram(
                "/usr/bin/gdbus",
                [
                    "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                    "--method", "org.freedesktop.DBus.GetId",
                ], environment: h.environment())
        }
        let woke = Self.brokerSwitches(h) - before
        #expect(woke < 20, "the broker's threads were switched \(woke) times while 20 other processes came and went")

        // A subscriber is followed while it is on the bus; so is a caller until it leaves (`gdbus call`
        // at once).
        let subscriber = try Self.listen(h, ["--subscribe", "--timeout", "600"], log: h.dir + "/subscriber.log")
        defer { subscriber.stop() }
        let subscriberName = try #require(Self.uniqueName(of: subscriber))
        #expect(try Self.ok(h, "GetSession", "com.example.notes").contains("signedOut"))
        try waitUntil(10, "the broker to follow the subscriber alone") {
            try Self.ownerChangesWatched(by: broker, h) == ["org.freedesktop.secrets", subscriberName].sorted()
        }
        // It leaves: its subscription ends, and so does the watch.
        subscriber.stop()
        try waitUntil(10, "the broker to end the subscription of the caller that left") {
            h.broker?.output.contains("dbus.subscriptions=1") == true
        }
        try waitUntil(10, "the broker to stop following the subscriber") {
            try Self.ownerChangesWatched(by: broker, h) == ["org.freedesktop.secrets"]
        }
    }

    @Test func aCallersCredentialsAreAskedOfTheBusOnlyOnItsFirstCall() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        try Self.start(h)
        let monitor = try Child(
            "/usr/bin/dbus-monitor",
            ["--session", "type='method_call',interface='org.freedesktop.DBus',member='GetConnectionCredentials'"],
            environment: h.environment(), log: h.dir + "/monitor.log")
        defer { monitor.stop() }
        try waitUntil(10, "dbus-monitor to listen") { monitor.output.contains("NameAcquired") }
        // One connection calls GetSession every 20 ms for a second: the broker asks the bus who it
        // is once, and keeps the answer while it follows the caller (its connection's credentials
        // cannot change).
        let probe = try runProgram(
            "/usr/bin/python3", [Self.listener, "--probe", "1", "com.example.notes"], environment: h.environment())
        let report = try JSONValue.parse(Array(probe.out.utf8))
        #expect((report["calls"]?.intValue ?? 0) >= 20, "\(probe.out) \(probe.err)")
        #expect(report["errors"]?.objectValue?.isEmpty == true, "\(probe.out)")
        try waitUntil(10, "dbus-monitor to show the broker's question") {
            monitor.output.contains("member=GetConnectionCredentials")
        }
        usleep(300_000)
        #expect(monitor.output.components(separatedBy: "member=GetConnectionCredentials").count - 1 == 1)
    }

    @Test func theFirstCallStartsTheBrokerByDBusActivation() throws {
        let h = try Harness()
        defer { h.stopAll() }
        try h.startServer()
        h.writeClient()
        let dataHome = h.dir + "/data-home"
        try FileManager.default.createDirectory(atPath: dataHome + "/dbus-1/services", withIntermediateDirectories: true)
        // dbus/org.browserlogin.Broker1.service.in with Exec= pointing at the built broker.
        let template = try String(
            contentsOfFile: repositoryRoot + "/dbus/org.browserlogin.Broker1.service.in", encoding: .utf8)
        let service = template.replacingOccurrences(of: "@bindir@", with: binDirectory)
            .replacingOccurrences(of: "browser-login-broker\n", with: "browser-login-broker --log-level debug\n")
        _ = FileManager.default.createFile(
            atPath: dataHome + "/dbus-1/services/\(Self.name).service", contents: Data(service.utf8))
        h.brokerEnvironment["XDG_DATA_HOME"] = dataHome
        let session = try PrivateSession(dir: h.dir, environment: h.environment())
        defer { session.stop() }
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = session.address
        #expect(try session.busCall("NameHasOwner", Self.name, environment: h.environment()).contains("false"))

        let info = try Self.ok(h, "Info")
        #expect(info.contains("'protocol': <int64 1>"))
        #expect(try session.busCall("NameHasOwner", Self.name, environment: h.environment()).contains("true"))
        // The same daemon serves the socket and owns the desktop name too.
        #expect(try session.busCall("NameHasOwner", "org.browserlogin.Broker", environment: h.environment()).contains("true"))
        let rpc = try h.rpc()
        #expect(try rpc.call("session.get", params: ["client": "com.example.notes"])["status"] == "signedOut")

        // The activated daemon stops on SIGTERM.
        let pidText = try session.busCall("GetConnectionUnixProcessID", Self.name, environment: h.environment())
        let pid = Int32(pidText.filter(\.isNumber).dropFirst(pidText.hasPrefix("(uint32") ? 2 : 0)) ?? 0
        #expect(pid > 0)
        if pid > 0 { kill(pid, SIGTERM) }
        try waitUntil(10, "the activated daemon to stop") { pid <= 0 || kill(pid, 0) != 0 }
    }

    @Test func theAPIIsServedAgainWhenTheSessionBusComesBack() throws {
        let h = try Harness()
        let keyring = try RestartableKeyring(dir: h.dir + "/keyring")
        defer { keyring.stopAll() }
        try keyring.startKeyring(.unlocked)
        try h.startServer()
        h.writeClient()
        h.brokerEnvironment["DBUS_SESSION_BUS_ADDRESS"] = keyring.address
        try Self.start(h)
        try h.signIn()
        let subscriber = try Self.listen(h, ["--subscribe"], log: h.dir + "/subscriber.log")
        defer { subscriber.stop() }

        keyring.stopKeyring()
        keyring.stopBus()
        // The bus took every caller with it: their subscriptions end.
        try waitUntil(10, "the broker to drop the subscriptions of the closed bus") {
            h.broker?.output.contains("dbus.sender=\"(the bus closed)\" dbus.subscriptions=1") == true
        }
        // broker.info asks the keyring at most every 2 s.
        let rpc = try h.rpc()
        try waitUntil(10, "the broker to see the keyring gone") { try rpc.call("broker.info")["vaultAvailable"] == false }
        try keyring.startBus()
        try keyring.startKeyring(.unlocked)
        try waitUntil(15, "the broker to own org.browserlogin.Broker1 again") { keyring.hasOwner(Self.name) }
        #expect(try Self.ok(h, "GetSession", "com.example.notes").contains("'status': <'signedIn'>"))
        // The keyring is back too.
        try waitUntil(15, "the keyring to be used again") {
            try Self.ok(h, "Info").contains("'vaultAvailable': <true>")
        }
        // Signals flow on the new bus.
        let listener = try Self.listen(
            h, ["--until-client", "com.example.notes", "--until-status", "signedOut"], log: h.dir + "/listener.log")
        defer { listener.stop() }
        #expect(try Self.ok(h, "SignOut", "com.example.notes").contains("'status': <'signedOut'>"))
        try waitUntil(10, "the listener to see the sign-out") { !listener.isRunning }
        #expect(listener.output.contains("\"signedOut\""))
        #expect(h.broker?.isRunning == true)
    }
}
