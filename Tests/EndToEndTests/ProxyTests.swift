import BrokerRPC
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Proxies (docs/operations.md, "Proxies"), against a real proxy: Debian's
/// tinyproxy on a loopback port of the test's own.
///
/// How a test knows a request went through the proxy without the internet:
/// the target is `login.proxy-test.invalid`, a name that never resolves
/// (RFC 6761). Sent directly, the request fails to resolve and the proxy sees
/// nothing; sent through the proxy, tinyproxy logs the `CONNECT` line (then
/// fails to resolve it itself). Loopback targets are the real reference server.
@Suite("Proxies", .dedicatedThread, .enabled(if: Tinyproxy.isInstalled))
struct ProxyTests {
    static let remote = "login.proxy-test.invalid"

    /// Every variable curl takes a proxy or an exemption from: the tests start from none of them.
    static let proxyVariables = [
        "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
    ]

    func writeClient(_ h: Harness, _ file: String, id: String, server: String) {
        let text = """
            [Client]
            Id=\(id)
            AppName=Example Notes
            Server=\(server)
            ReturnUrl=\(id):/callback
            """
        _ = FileManager.default.createFile(
            atPath: h.dir + "/config/browser-login/clients.d/" + file, contents: Data(text.utf8))
    }

    /// `browser-login-broker --check-servers --json` with exactly `proxy` as the proxy variables.
    func checkServers(_ h: Harness, _ proxy: [String: String]) throws -> (
        results: [String: JSONValue], out: String, err: String
    ) {
        var environment = h.environment()
        for name in Self.proxyVariables { environment[name] = nil }
        for (name, value) in proxy { environment[name] = value }
        let run = try runProgram(
            binDirectory + "/browser-login-broker", ["--check-servers", "--json"], environment: environment)
        var results: [String: JSONValue] = [:]
        for r in try JSONValue.parse(run.out).arrayValue ?? [] {
            if let id = r["client"]?.stringValue { results[id] = r }
        }
        return (results, run.out, run.err)
    }

    @Test func eachProxyVariableCarriesRequestsToOtherHostsAndItsCredentialsAreNeverShown() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let proxy = try Tinyproxy(dir: h.dir + "/proxy")
        defer { proxy.stop() }
        writeClient(h, "remote.conf", id: "com.example.remote", server: "https://\(Self.remote)")

        var sent = 0
        for name in ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
            let check = try checkServers(h, [name: "http://alice:s3cret-pass@127.0.0.1:\(proxy.port)"])
            sent += 1
            let result = try #require(check.results["com.example.remote"], "\(name): \(check.out) \(check.err)")
            #expect(result["ok"] == false, "\(name): the proxy cannot resolve the name either")
            #expect(
                proxy.requests.filter { $0.contains("CONNECT \(Self.remote):443") }.count == sent,
                "\(name): the request went to the proxy:\n\(proxy.logText)")
            #expect(!(check.out + check.err).contains("s3cret"), "\(name): the proxy's password is never shown")
        }
    }

    @Test func noProxyIsHonouredForTheHostsItNames() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let proxy = try Tinyproxy(dir: h.dir + "/proxy")
        defer { proxy.stop() }
        writeClient(h, "remote.conf", id: "com.example.remote", server: "https://\(Self.remote)")
        let via = "http://127.0.0.1:\(proxy.port)"

        for exemption in [
            ["no_proxy": "example.org,\(Self.remote)"], ["NO_PROXY": ".proxy-test.invalid"], ["no_proxy": "*"],
        ] {
            let check = try checkServers(h, ["https_proxy": via].merging(exemption) { a, _ in a })
            let problem = check.results["com.example.remote"]?["problem"]?.stringValue ?? ""
            #expect(problem.contains("could not resolve \(Self.remote)"), "\(exemption): went direct: \(problem)")
            #expect(proxy.requests.isEmpty, "\(exemption): nothing reached the proxy:\n\(proxy.logText)")
        }
        // A no_proxy naming another host leaves this one to the proxy.
        _ = try checkServers(h, ["https_proxy": via, "no_proxy": "example.org"])
        #expect(proxy.requests.contains { $0.contains("CONNECT \(Self.remote):443") }, "\(proxy.logText)")
    }

    @Test func loopbackNeverGoesThroughAProxyWhateverTheVariablesSay() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let proxy = try Tinyproxy(dir: h.dir + "/proxy")
        defer { proxy.stop() }
        try h.startServer()
        h.writeClient()
        writeClient(h, "v6.conf", id: "com.example.v6", server: "http://[::1]:9")
        let via = "http://127.0.0.1:\(proxy.port)"
        let all = ["http_proxy": via, "https_proxy": via, "HTTPS_PROXY": via, "all_proxy": via, "ALL_PROXY": via]

        // Even with an empty no_proxy, or one that names something else.
        for exemption in [[:], ["no_proxy": ""], ["no_proxy": "example.org"]] {
            let check = try checkServers(h, all.merging(exemption) { a, _ in a })
            #expect(check.results["com.example.notes"]?["ok"] == true, "\(exemption): \(check.out) \(check.err)")
            let v6 = check.results["com.example.v6"]?["problem"]?.stringValue ?? ""
            #expect(v6.contains("could not connect to [::1]:9"), "\(exemption): direct to ::1: \(v6)")
        }
        #expect(proxy.connections.isEmpty, "no connection reached the proxy:\n\(proxy.logText)")

        // The daemon, with the variables set, signs in against the loopback server directly.
        for (name, value) in all { h.brokerEnvironment[name] = value }
        h.brokerEnvironment["no_proxy"] = ""
        h.brokerEnvironment["NO_PROXY"] = ""
        try h.startBroker()
        let attempt = try h.signIn()
        #expect(attempt["attemptId"]?.stringValue?.isEmpty == false)
        #expect(proxy.connections.isEmpty, "no connection reached the proxy:\n\(proxy.logText)")
    }

    /// Without a proxy variable the daemon asks the desktop (GIO's default
    /// proxy resolver) per origin. Here GIO has no proxy module, so the
    /// answer is "direct"; the daemon's debug log shows it asked.
    @Test func withoutVariablesTheDaemonAsksTheDesktopsResolver() throws {
        let h = try Harness()
        defer { h.stopAll() }
        let proxy = try Tinyproxy(dir: h.dir + "/proxy")
        defer { proxy.stop() }
        writeClient(h, "remote.conf", id: "com.example.remote", server: "https://\(Self.remote)")
        for name in Self.proxyVariables { h.brokerEnvironment[name] = "" }
        h.brokerEnvironment["GIO_USE_PROXY_RESOLVER"] = "dummy"
        try h.startBroker()
        #expect(throws: RPCError.self) {
            try h.rpc().call("login.start", params: ["client": "com.example.remote", "openBrowser": false])
        }
        let log = h.broker?.output ?? ""
        #expect(
            log.contains("proxy from the desktop's settings") && log.contains("https://\(Self.remote)")
                && log.contains("direct"),
            "\(log)")
        #expect(proxy.connections.isEmpty, "\(proxy.logText)")
    }

    /// The desktop's settings with a real proxy: GNOME's resolver
    /// (glib-networking) reading `org.gnome.system.proxy` from a key file of
    /// the test's own (`GSETTINGS_BACKEND=keyfile`); its http proxy, with a
    /// password, serves https too. The user's `no_proxy` still exempts a host
    /// from the desktop's proxy.
    @Test(.enabled(if: Tinyproxy.gnomeResolverIsInstalled))
    func theDesktopsProxyCarriesRequestsAndNoProxyStillExempts() throws {
        for exempt in [false, true] {
            let h = try Harness()
            defer { h.stopAll() }
            let proxy = try Tinyproxy(dir: h.dir + "/proxy")
            defer { proxy.stop() }
            writeClient(h, "remote.conf", id: "com.example.remote", server: "https://\(Self.remote)")
            try h.startServer()
            h.writeClient()
            try FileManager.default.createDirectory(
                atPath: h.dir + "/config/glib-2.0/settings", withIntermediateDirectories: true)
            let keyfile = """
                [system/proxy]
                mode='manual'

                [system/proxy/http]
                host='127.0.0.1'
                port=\(proxy.port)
                use-authentication=true
                authentication-user='alice'
                authentication-password='s3cret-pass'
                """
            _ = FileManager.default.createFile(
                atPath: h.dir + "/config/glib-2.0/settings/keyfile", contents: Data(keyfile.utf8))
            for name in Self.proxyVariables { h.brokerEnvironment[name] = "" }
            if exempt { h.brokerEnvironment["no_proxy"] = Self.remote }
            // GNOME's resolver serves only a GNOME session.
            h.brokerEnvironment["GIO_USE_PROXY_RESOLVER"] = "gnome"
            h.brokerEnvironment["XDG_CURRENT_DESKTOP"] = "GNOME"
            h.brokerEnvironment["GSETTINGS_BACKEND"] = "keyfile"
            // The harness's XDG_DATA_DIRS hides the system's schemas (org.gnome.system.proxy).
            h.brokerEnvironment["GSETTINGS_SCHEMA_DIR"] = "/usr/share/glib-2.0/schemas"
            try h.startBroker()
            #expect(throws: RPCError.self) {
                try h.rpc().call("login.start", params: ["client": "com.example.remote", "openBrowser": false])
            }
            let log = h.broker?.output ?? ""
            #expect(log.contains("proxy=http://127.0.0.1:\(proxy.port)"), "the desktop's proxy was chosen: \(log)")
            #expect(!log.contains("s3cret"), "the proxy's password is never logged: \(log)")
            let connected = proxy.requests.contains { $0.contains("CONNECT \(Self.remote):443") }
            #expect(connected == !exempt, "exempt by no_proxy: \(exempt)\n\(proxy.logText)")
            // The loopback server is reached directly: the only connection the proxy saw was the one above.
            try h.signIn()
            #expect(proxy.connections.count == (exempt ? 0 : 1), "\(proxy.logText)")
        }
    }
}

/// tinyproxy in the foreground on a free loopback port, logging every
/// connection and request line to a file in the test's directory.
final class Tinyproxy {
    static let program = "/usr/bin/tinyproxy"
    static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: program) }
    /// glib-networking's GNOME proxy resolver module.
    static var gnomeResolverIsInstalled: Bool {
        FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/gio/modules/libgiognomeproxy.so")
    }

    let port: Int
    let logPath: String
    private let child: Child

    init(dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        logPath = dir + "/tinyproxy.log"
        var lastError = ""
        // A free port may be taken between the probe and tinyproxy's bind: try again.
        for _ in 0..<5 {
            let port = try freeLoopbackPort()
            let config = """
                Port \(port)
                Listen 127.0.0.1
                LogFile "\(logPath)"
                LogLevel Connect
                MaxClients 20
                Timeout 15
                """
            _ = FileManager.default.createFile(atPath: dir + "/tinyproxy.conf", contents: Data(config.utf8))
            try? FileManager.default.removeItem(atPath: logPath)
            let child = try Child(
                Tinyproxy.program, ["-d", "-c", dir + "/tinyproxy.conf"], environment: [:], log: dir + "/tinyproxy.out")
            do {
                try waitUntil(10, "tinyproxy to listen") {
                    guard child.isRunning else { throw HarnessError("tinyproxy exited", fatal: true) }
                    return Tinyproxy.accepts(port)
                }
                self.port = port
                self.child = child
                return
            } catch {
                child.stop(SIGKILL)
                lastError = "\(error): \(child.output)"
            }
        }
        throw HarnessError("tinyproxy did not start: \(lastError)")
    }

    func stop() { child.stop(SIGKILL) }

    var logText: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    private var lines: [String] { logText.split(separator: "\n").map(String.init) }
    /// Accepted connections (`Connect (file descriptor N): 127.0.0.1`), the readiness probe's excepted.
    var connections: [String] { lines.filter { $0.contains("Connect (file descriptor") }.dropFirst(probes).map { $0 } }
    /// Request lines (`Request (file descriptor N): CONNECT host:443 HTTP/1.1`).
    var requests: [String] { lines.filter { $0.contains("Request (file descriptor") } }
    /// The readiness probe connects once without a request.
    private let probes = 1

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    static func accepts(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
