import BrowserLoginTestSupport
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A request as the test server read it.
struct RecordedRequest: Sendable {
    var method: String
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// Which accepted connection carried it (0, 1, 2, … in accept order).
    var connection: Int

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// What the test server does with a request.
enum Reply: Sendable {
    /// Answers. `keepAlive` keeps the connection open for the next request;
    /// `omitLength` sends no Content-Length and closes after the body.
    case respond(
        status: Int, headers: [(String, String)] = [], body: [UInt8] = [], keepAlive: Bool = false,
        omitLength: Bool = false)
    /// Closes the connection without a byte of answer.
    case close
    /// Never answers; holds the connection until the client or `stop()` closes it.
    case hang
}

/// A small HTTP/1.1 server on 127.0.0.1 with a port chosen by the kernel,
/// a thread per connection, that records every request it reads.
final class TestHTTPServer: Sendable {
    let port: Int
    private let listener: Int32
    private let handler: @Sendable (RecordedRequest) -> Reply
    private struct State {
        var requests: [RecordedRequest] = []
        var connections: [Int32] = []
        var accepted = 0
        var stopped = false
    }
    private let state = Mutex(State())

    /// With `readsRequests == false` the server accepts connections and never
    /// reads or writes (a peer that stalls a TLS handshake).
    init(readsRequests: Bool = true, handler: @escaping @Sendable (RecordedRequest) -> Reply) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestServerError.socket(errno) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw TestServerError.socket(errno)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        let thread = Thread { [self] in acceptLoop(readsRequests: readsRequests) }
        thread.start()
    }

    var requests: [RecordedRequest] { state.withLock { $0.requests } }
    var connectionCount: Int { state.withLock { $0.accepted } }
    var url: String { "http://127.0.0.1:\(port)" }

    func stop() {
        let fds = state.withLock { s -> [Int32] in
            s.stopped = true
            return s.connections
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in fds { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit {
        stop()
        close(listener)
    }

    private func acceptLoop(readsRequests: Bool) {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let (index, stopped) = state.withLock { s -> (Int, Bool) in
                s.connections.append(fd)
                s.accepted += 1
                return (s.accepted - 1, s.stopped)
            }
            if stopped {
                close(fd)
                return
            }
            let thread = Thread { [self] in
                if readsRequests {
                    serve(fd, connection: index)
                } else {
                    var byte: UInt8 = 0
                    while recv(fd, &byte, 1, 0) > 0 {}
                }
                state.withLock { $0.connections.removeAll { $0 == fd } }
                close(fd)
            }
            thread.start()
        }
    }

    private func serve(_ fd: Int32, connection: Int) {
        var buffer: [UInt8] = []
        while let request = readRequest(fd, &buffer, connection: connection) {
            state.withLock { $0.requests.append(request) }
            switch handler(request) {
            case .close:
                return
            case .hang:
                var byte: UInt8 = 0
                while recv(fd, &byte, 1, 0) > 0 {}
                return
            case .respond(let status, let headers, let body, let keepAlive, let omitLength):
                var head = "HTTP/1.1 \(status) Test\r\n"
                for (name, value) in headers { head += "\(name): \(value)\r\n" }
                if !omitLength { head += "Content-Length: \(body.count)\r\n" }
                let keep = keepAlive && !omitLength
                head += "Connection: \(keep ? "keep-alive" : "close")\r\n\r\n"
                guard writeAll(fd, Array(head.utf8)), request.method == "HEAD" || writeAll(fd, body) else { return }
                if !keep { return }
            }
        }
    }

    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8], connection: Int) -> RecordedRequest? {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while headEnd == nil {
            if let range = find(separator, in: buffer) {
                headEnd = range
                break
            }
            guard readMore(fd, &buffer) else { return nil }
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append(
                (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let length = headers.first { $0.name.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? 0
        let bodyStart = headEnd! + 4
        while buffer.count < bodyStart + length {
            guard readMore(fd, &buffer) else { return nil }
        }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return RecordedRequest(
            method: String(requestLine[0]), target: String(requestLine[1]), headers: headers, body: body,
            connection: connection)
    }

    private func readMore(_ fd: Int32, _ buffer: inout [UInt8]) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return false }
        buffer.append(contentsOf: chunk[..<n])
        return true
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i..<(i + needle.count)].elementsEqual(needle) {
            return i
        }
        return nil
    }
}

enum TestServerError: Error {
    case socket(Int32)
    case process(String)
}

/// A port that nothing listens on (bound, then closed).
func unusedPort() throws -> Int {
    let server = try TestHTTPServer { _ in .close }
    let port = server.port
    server.stop()
    return port
}

/// A fresh private directory for one test.
func makeTemporaryDirectory() throws -> URL {
    URL(fileURLWithPath: try makeTemporaryDirectory("bl-http"))
}

/// Runs a program to its end; throws with its output when it fails.
@discardableResult
func run(_ executable: String, _ arguments: [String], in directory: URL? = nil) throws -> String {
    let result = try runProgram(executable, arguments, directory: directory?.path)
    let text = result.out + result.err
    guard result.status == 0 else {
        throw TestServerError.process("\(executable) \(arguments.joined(separator: " ")) failed: \(text)")
    }
    return text
}

/// A private CA and a server certificate for 127.0.0.1 / localhost, made with `openssl`.
struct TestPKI {
    let directory: URL
    var caFile: String { directory.appendingPathComponent("ca.pem").path }
    var certificateFile: String { directory.appendingPathComponent("server.pem").path }
    var keyFile: String { directory.appendingPathComponent("server.key").path }

    init() throws {
        directory = try makeTemporaryDirectory()
        let script = """
            set -e
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
              -days 2 -subj '/CN=browser-login test CA' \
              -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign'
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr \
              -subj '/CN=127.0.0.1'
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
              -extfile ext.cnf
            """
        try run("/bin/sh", ["-c", script], in: directory)
    }
}

/// An https server (Python's http.server over ssl) answering `GET` with 200 "tls ok".
final class TestTLSServer {
    let port: Int
    private let process: SpawnedProcess

    init(pki: TestPKI) throws {
        let script = pki.directory.appendingPathComponent("tls_server.py")
        try """
        import http.server, ssl, sys
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def do_GET(self):
                body = b"tls ok"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1], sys.argv[2])
        server.socket = context.wrap_socket(server.socket, server_side=True)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """.write(to: script, atomically: true, encoding: .utf8)
        // Standard output to a pipe (the port), standard error to /dev/null.
        let pipe = try closeOnExecPipe()
        defer { close(pipe.read) }
        let process: SpawnedProcess
        do {
            defer { close(pipe.write) }
            process = try SpawnedProcess(
                ["/usr/bin/env", "python3", script.path, pki.certificateFile, pki.keyFile],
                environment: ProcessInfo.processInfo.environment, log: "/dev/null", dup2: [(pipe.write, 1)])
        }
        guard let port = Int(readLine(pipe.read)) else {
            process.stop()
            throw TestServerError.process("the python3 TLS test server did not start")
        }
        self.port = port
        self.process = process
    }

    /// SIGKILL: a child of the test runner may inherit a blocked SIGTERM.
    func stop() {
        process.stop(SIGKILL)
    }
}
