import BrokerRPC
import BrowserLoginProtocol
import BrowserLoginTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A reverse proxy in front of the real reference server that forwards by
/// default and can be switched, per native route, into a fault: a 5xx, a body
/// that is no protocol answer, a redirect, a slow-loris answer, no answer at
/// all, or a connection reset (with or without the request reaching the
/// server). It counts the requests it received per route, so a test can prove
/// that a request was never sent twice. Stopping it refuses connections; it
/// can be started again on the same port (its counts carry over).
final class HostileProxy: @unchecked Sendable {
    // Safe: a proxy belongs to one test, which uses it from one task.
    let dir: String
    let upstreamPort: Int
    private(set) var port = 0
    private var child: Child?

    /// Routes: `create`, `exchange`, `status`, `cancel`, `acknowledge`,
    /// `refresh`, `revoke`, `session` (GET session) and `other` (browser and API).
    /// Modes: `pass`, `500` (not forwarded), `500-after` (forwarded, the
    /// answer replaced by a 500), `garbage` (200, not JSON), `truncated`
    /// (forwarded, the answer's body cut in half), `html` (200, an HTML page),
    /// `redirect` (302), `slow` (headers, then one byte a second), `hang` (the
    /// request is read, no answer ever), `reset` (the request is read, then a
    /// TCP reset) and `reset-after` (forwarded, then a reset: a lost answer).
    static let script = #"""
        import http.client, http.server, json, os, socket, struct, sys, threading, time

        state_dir, upstream_port, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        lock = threading.Lock()
        counts_path = os.path.join(state_dir, 'counts.json')
        try:
            with open(counts_path) as f:
                counts = json.load(f)
        except Exception:
            counts = {}
        HOP = ('connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'upgrade')

        def route(path):
            p = path.split('?')[0]
            if '/native/' not in p:
                return 'other'
            tail = p.split('/native/', 1)[1]
            if tail == 'attempts':
                return 'create'
            if tail.startswith('attempts/'):
                return tail.rsplit('/', 1)[-1]
            return {'sessions/refresh': 'refresh', 'sessions/revoke': 'revoke', 'session': 'session'}.get(tail, 'native')

        def mode_for(r):
            try:
                with open(os.path.join(state_dir, 'faults.json')) as f:
                    return json.load(f).get(r, 'pass')
            except Exception:
                return 'pass'

        def count(r):
            with lock:
                counts[r] = counts.get(r, 0) + 1
                tmp = counts_path + '.tmp'
                with open(tmp, 'w') as f:
                    json.dump(counts, f)
                os.replace(tmp, counts_path)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, fmt, *args):
                sys.stderr.write('proxy: ' + (fmt % args) + '\n')
                sys.stderr.flush()

            def finish(self):
                try:
                    super().finish()
                except Exception:
                    pass

            def any(self):
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else b''
                r = route(self.path)
                mode = mode_for(r)
                count(r)
                self.close_connection = True
                sys.stderr.write('proxy: %s %s -> %s\n' % (self.command, r, mode))
                sys.stderr.flush()
                if mode == 'pass':
                    self.reply(*self.forward(body))
                elif mode == '500':
                    self.reply(500, [('Content-Type', 'text/plain')], b'internal server error')
                elif mode == '500-after':
                    self.forward(body)
                    self.reply(500, [('Content-Type', 'text/plain')], b'internal server error')
                elif mode == 'garbage':
                    self.reply(200, [('Content-Type', 'application/json')], b'this is not json at all')
                elif mode == 'truncated':
                    status, headers, data = self.forward(body)
                    self.reply(status, headers, data[: len(data) // 2])
                elif mode == 'html':
                    self.reply(200, [('Content-Type', 'text/html')], b'<html><body><h1>Wi-Fi login</h1></body></html>')
                elif mode == 'redirect':
                    self.reply(302, [('Location', 'http://127.0.0.1:9/elsewhere')], b'')
                elif mode == 'slow':
                    self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{')
                    for _ in range(300):
                        try:
                            time.sleep(1)
                            self.wfile.write(b' ')
                            self.wfile.flush()
                        except OSError:
                            return
                elif mode == 'hang':
                    self.connection.settimeout(1)
                    deadline = time.time() + 300
                    while time.time() < deadline:
                        try:
                            if self.connection.recv(1) == b'':
                                return
                        except socket.timeout:
                            continue
                        except OSError:
                            return
                elif mode == 'reset':
                    self.reset()
                elif mode == 'reset-after':
                    self.forward(body)
                    self.reset()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = any

            def forward(self, body):
                conn = http.client.HTTPConnection('127.0.0.1', upstream_port, timeout=60)
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    if k.lower() not in HOP:
                        conn.putheader(k, v)
                conn.endheaders(body if body else None)
                resp = conn.getresponse()
                data = resp.read()
                headers = [(k, v) for k, v in resp.getheaders()
                           if k.lower() not in HOP + ('content-length', 'date', 'server')]
                conn.close()
                return resp.status, headers, data

            def reply(self, status, headers, data):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header('Content-Length', str(len(data)))
                self.send_header('Connection', 'close')
                self.end_headers()
                if self.command != 'HEAD':
                    self.wfile.write(data)

            def reset(self):
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                self.connection.close()

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        server = Server(('127.0.0.1', port), Handler)
        ready = os.path.join(state_dir, 'ready')
        with open(ready + '.tmp', 'w') as f:
            f.write(str(server.server_address[1]))
        os.replace(ready + '.tmp', ready)
        server.serve_forever()
        """#

    init(dir: String, upstreamPort: Int) throws {
        self.dir = dir
        self.upstreamPort = upstreamPort
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir + "/proxy.py", contents: Data(Self.script.utf8))
        try start()
    }

    deinit { stop() }

    var origin: String { "http://127.0.0.1:\(port)" }

    /// Starts listening (again, on the same port once it had one).
    func start() throws {
        unlink(dir + "/ready")
        child = try Child(
            "/usr/bin/python3", ["-u", dir + "/proxy.py", dir, "\(upstreamPort)", "\(port)"],
            environment: ProcessInfo.processInfo.environment, log: dir + "/proxy.log")
        try waitUntil(15, "the hostile proxy to listen") {
            guard child?.isRunning == true else { throw HarnessError("the proxy exited:\n\(child?.output ?? "")") }
            return FileManager.default.fileExists(atPath: dir + "/ready")
        }
        port = Int((try? String(contentsOfFile: dir + "/ready", encoding: .utf8)) ?? "") ?? 0
    }

    /// Stops listening: connections are refused until `start()`.
    func stop() { child?.stop(SIGKILL) }

    /// Sets the fault of each named route; every other route passes.
    func fault(_ faults: [String: String]) {
        let data = (try? JSONSerialization.data(withJSONObject: faults)) ?? Data("{}".utf8)
        _ = FileManager.default.createFile(atPath: dir + "/faults.json.tmp", contents: data)
        rename(dir + "/faults.json.tmp", dir + "/faults.json")
    }

    /// The requests received so far for `route` (faulted or not).
    func count(_ route: String) -> Int {
        guard let data = FileManager.default.contents(atPath: dir + "/counts.json"),
            let counts = try? JSONSerialization.jsonObject(with: data) as? [String: Int]
        else { return 0 }
        return counts[route] ?? 0
    }

    var log: String { child?.output ?? "" }
}

/// The client of the fault tests: its own id and return URL, so that its
/// keyring items are its own.
enum FaultClient {
    static let id = "com.example.faults"
    static let returnURL = "com.example.faults:/callback"
    static let clients = [(id: id, name: "Fault Notes", returnURL: returnURL)]
}

extension Harness {
    /// The reference server behind a hostile proxy: the server's public
    /// origin (its issuer) is the proxy's, and the client file points at the
    /// proxy. Starts the broker.
    func startBehindProxy(
        accessTokenMs: Int? = nil, sessionMs: Int? = nil, brokerEnvironment: [String: String] = [:]
    ) throws -> HostileProxy {
        try startServer(accessTokenMs: accessTokenMs, sessionMs: sessionMs, clients: FaultClient.clients)
        let proxy = try HostileProxy(dir: dir + "/proxy", upstreamPort: serverPort)
        stopServer()
        serverArguments += ["--public-origin", proxy.origin]
        try launchServer()
        serverOrigin = proxy.origin
        writeClient(file: "faults.conf", id: FaultClient.id, appName: "Fault Notes", returnURL: FaultClient.returnURL)
        for (k, v) in brokerEnvironment { self.brokerEnvironment[k] = v }
        try startBroker()
        return proxy
    }

    /// Starts a login for the fault client and authorizes it in the browser.
    func authorizeFaultClient(_ rpc: RPCClient) throws -> (id: String, callback: String) {
        let (attempt, callback) = try startAndAuthorize(client: FaultClient.id, rpc: rpc)
        return (try #require(attempt["attemptId"]?.stringValue), callback)
    }
}

/// The error an RPC call failed with (the call must fail).
func rpcFailure(_ rpc: RPCClient, _ method: String, _ params: JSONValue) throws -> RPCError {
    do {
        let result = try rpc.call(method, params: params)
        throw HarnessError("\(method) should have failed, answered \(result)")
    } catch let error as RPCError {
        return error
    }
}

func attemptState(_ rpc: RPCClient, _ id: String, reconcile: Bool = false) throws -> String? {
    try rpc.call("login.status", params: ["attemptId": .string(id), "reconcile": .bool(reconcile)])["state"]?.stringValue
}
