import BrokerCore
import BrokerCurl
import Foundation
import Synchronization
import Testing

@testable import BrokerHTTP

@Suite struct CurlTransportTests {
    let transport = CurlTransport()

    func get(_ url: String, timeout: Int = 5_000, limit: Int = 1 << 20) -> HTTPRequest {
        HTTPRequest(
            method: "GET", url: url, timeoutMilliseconds: timeout, connectTimeoutMilliseconds: 2_000,
            maximumResponseBytes: limit, changesState: false)
    }

    @Test func returnsStatusHeadersInOrderAndBody() async throws {
        let server = try TestHTTPServer { _ in
            .respond(
                status: 203, headers: [("X-First", "1"), ("Set-Cookie", "a=b"), ("X-Second", "two words")],
                body: Array("hello".utf8))
        }
        defer { server.stop() }
        let response = try await transport.send(get(server.url + "/hello?x=1"))
        #expect(response.status == 203)
        #expect(response.body == Array("hello".utf8))
        let names = response.headers.map(\.name)
        #expect(names == ["X-First", "Set-Cookie", "X-Second", "Content-Length", "Connection"])
        #expect(response.header("x-second") == "two words")
        let seen = try #require(server.requests.first)
        #expect(seen.method == "GET")
        #expect(seen.target == "/hello?x=1")
        #expect(seen.header("Cookie") == nil)
        #expect(seen.header("Expect") == nil)
    }

    @Test(arguments: ["POST", "PUT", "PATCH", "DELETE"])
    func sendsTheBodyWithTheMethod(_ method: String) async throws {
        let server = try TestHTTPServer { _ in .respond(status: 200) }
        defer { server.stop() }
        let body = Array(#"{"a":"\u0000 binary ok"}"#.utf8) + [0, 255, 10]
        let request = HTTPRequest(
            method: method, url: server.url + "/things",
            headers: [HTTPHeader("Content-Type", "application/json"), HTTPHeader("X-Empty", "")], body: body,
            changesState: true)
        let response = try await transport.send(request)
        #expect(response.status == 200)
        let seen = try #require(server.requests.first)
        #expect(seen.method == method)
        #expect(seen.body == body)
        #expect(seen.header("Content-Type") == "application/json")
        #expect(seen.header("X-Empty") == "")
        #expect(seen.header("Expect") == nil)
    }

    @Test func aBodyWithoutContentTypeGetsNoneInvented() async throws {
        let server = try TestHTTPServer { _ in .respond(status: 204) }
        defer { server.stop() }
        _ = try await transport.send(
            HTTPRequest(method: "POST", url: server.url + "/raw", body: [1, 2, 3], changesState: true))
        let seen = try #require(server.requests.first)
        #expect(seen.header("Content-Type") == nil)
        #expect(seen.header("Content-Length") == "3")
    }

    @Test func headHasNoBody() async throws {
        let server = try TestHTTPServer { _ in .respond(status: 200, body: Array("ignored".utf8)) }
        defer { server.stop() }
        let response = try await transport.send(
            HTTPRequest(method: "HEAD", url: server.url + "/", changesState: false))
        #expect(response.status == 200)
        #expect(response.body.isEmpty)
        #expect(server.requests.first?.method == "HEAD")
    }

    @Test func aRedirectIsReturnedNotFollowed() async throws {
        let server = try TestHTTPServer { request in
            request.target == "/start"
                ? .respond(status: 302, headers: [("Location", "/elsewhere")], body: Array("moved".utf8))
                : .respond(status: 200)
        }
        defer { server.stop() }
        let response = try await transport.send(get(server.url + "/start"))
        #expect(response.status == 302)
        #expect(response.header("Location") == "/elsewhere")
        #expect(server.requests.map(\.target) == ["/start"])
    }

    @Test func cookiesAreNeverStoredOrSent() async throws {
        let server = try TestHTTPServer { _ in
            .respond(status: 200, headers: [("Set-Cookie", "sid=secret; Path=/")], keepAlive: true)
        }
        defer { server.stop() }
        // One worker, so both requests go through the same easy handle.
        let transport = CurlTransport(configuration: .init(maximumConcurrentTransfers: 1))
        _ = try await transport.send(get(server.url + "/set"))
        _ = try await transport.send(get(server.url + "/next"))
        _ = try await transport.send(
            HTTPRequest(method: "POST", url: server.url + "/post", body: [], changesState: true))
        #expect(server.requests.count == 3)
        #expect(server.requests.allSatisfy { $0.header("Cookie") == nil })
    }

    @Test func anAnswerOverTheLimitIsRefused() async throws {
        let server = try TestHTTPServer { request in
            .respond(status: 200, body: Array(repeating: 65, count: 10_000), omitLength: request.target == "/stream")
        }
        defer { server.stop() }
        for path in ["/declared", "/stream"] {
            await #expect(throws: HTTPTransportError.responseTooLarge) {
                try await transport.send(get(server.url + path, limit: 9_999))
            }
        }
        let exact = try await transport.send(get(server.url + "/stream", limit: 10_000))
        #expect(exact.body.count == 10_000)
    }

    @Test func aRefusedConnectionIsNotSent() async throws {
        let port = try unusedPort()
        let error = await #expect(throws: HTTPTransportError.self) {
            try await transport.send(
                HTTPRequest(method: "POST", url: "http://127.0.0.1:\(port)/x", body: [], changesState: true))
        }
        guard case .notSent(let message) = error else {
            Issue.record("expected notSent, got \(String(describing: error))")
            return
        }
        #expect(message.contains("127.0.0.1:\(port)"))
        #expect(!message.contains("/x"))
    }

    @Test func aServerThatClosesWithoutAnsweringIsNoAnswer() async throws {
        let server = try TestHTTPServer { _ in .close }
        defer { server.stop() }
        let error = await #expect(throws: HTTPTransportError.self) {
            try await transport.send(
                HTTPRequest(
                    method: "POST", url: server.url + "/attempts/SECRETID/exchange", body: [1],
                    changesState: true))
        }
        guard case .noAnswer(let message) = error else {
            Issue.record("expected noAnswer, got \(String(describing: error))")
            return
        }
        #expect(!message.contains("SECRETID"))
        #expect(server.requests.count == 1)
    }

    @Test func aServerThatNeverAnswersTimesOutAsNoAnswer() async throws {
        let server = try TestHTTPServer { _ in .hang }
        defer { server.stop() }
        let start = ContinuousClock.now
        let error = await #expect(throws: HTTPTransportError.self) {
            try await transport.send(get(server.url + "/slow", timeout: 400))
        }
        guard case .noAnswer = error else {
            Issue.record("expected noAnswer, got \(String(describing: error))")
            return
        }
        // The server never answers: only the 400 ms timeout ends the call
        // (the bound is loose: the test machine may be loaded).
        #expect(ContinuousClock.now - start < .seconds(15))
    }

    @Test func aStateChangingRequestIsSentOnceOnAFreshConnection() async throws {
        // The server keeps the first connection alive, then drops every
        // POST without answering. A transport that reused the connection
        // and re-sent on failure would show two POSTs.
        let server = try TestHTTPServer { request in
            request.method == "POST" ? .close : .respond(status: 200, keepAlive: true)
        }
        defer { server.stop() }
        let transport = CurlTransport(configuration: .init(maximumConcurrentTransfers: 1))
        _ = try await transport.send(get(server.url + "/warm"))
        _ = try await transport.send(get(server.url + "/again"))
        await #expect(throws: HTTPTransportError.self) {
            try await transport.send(
                HTTPRequest(method: "POST", url: server.url + "/exchange", body: [1], changesState: true))
        }
        let requests = server.requests
        #expect(requests.filter { $0.method == "POST" }.count == 1)
        // The safe GETs shared a connection; the POST had its own.
        #expect(requests[0].connection == requests[1].connection)
        #expect(requests[2].connection != requests[0].connection)
    }

    @Test func refusesRequestsThatCouldSmuggleAnything() async throws {
        let bad: [HTTPRequest] = [
            HTTPRequest(
                method: "GET", url: "http://127.0.0.1:1/", headers: [HTTPHeader("X", "a\r\nB: c")],
                changesState: false),
            HTTPRequest(
                method: "GET", url: "http://127.0.0.1:1/", headers: [HTTPHeader("Bad Name", "v")],
                changesState: false),
            HTTPRequest(method: "GET", url: "ftp://127.0.0.1/file", changesState: false),
            HTTPRequest(method: "GET", url: "http://user:pw@127.0.0.1/", changesState: false),
            HTTPRequest(method: "GET", url: "http://127.0.0.1/", body: [1], changesState: false),
            HTTPRequest(method: "TRACE", url: "http://127.0.0.1/", changesState: false),
            HTTPRequest(method: "GET", url: "/relative", changesState: false),
        ]
        for request in bad {
            let error = await #expect(throws: HTTPTransportError.self) { try await transport.send(request) }
            guard case .invalidRequest = error else {
                Issue.record("expected invalidRequest, got \(String(describing: error))")
                continue
            }
        }
    }

    @Test func trustsAPrivateCAOnlyWhenGiven() async throws {
        let pki = try TestPKI()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let server = try TestTLSServer(pki: pki)
        defer { server.stop() }
        let url = "https://127.0.0.1:\(server.port)/"
        var trusted = get(url)
        trusted.caFile = pki.caFile
        let response = try await transport.send(trusted)
        #expect(response.status == 200)
        #expect(response.body == Array("tls ok".utf8))
        for host in ["127.0.0.1", "localhost"] {
            var untrusted = get("https://\(host):\(server.port)/")
            untrusted.changesState = true
            let error = await #expect(throws: HTTPTransportError.self) { try await transport.send(untrusted) }
            guard case .notSent(let message) = error else {
                Issue.record("expected notSent, got \(String(describing: error))")
                continue
            }
            #expect(message.contains("TLS"))
        }
        var missing = get(url)
        missing.caFile = pki.directory.appendingPathComponent("absent.pem").path
        let error = await #expect(throws: HTTPTransportError.self) { try await transport.send(missing) }
        guard case .notSent(let message) = error else {
            Issue.record("expected notSent, got \(String(describing: error))")
            return
        }
        #expect(!message.contains("absent.pem"))
    }

    @Test func aTLSHandshakeThatStallsTimesOutAsNotSent() async throws {
        let server = try TestHTTPServer(readsRequests: false) { _ in .hang }
        defer { server.stop() }
        var request = HTTPRequest(
            method: "POST", url: "https://127.0.0.1:\(server.port)/x", body: [1], timeoutMilliseconds: 400,
            changesState: true)
        request.connectTimeoutMilliseconds = 400
        let error = await #expect(throws: HTTPTransportError.self) { try await transport.send(request) }
        guard case .notSent = error else {
            Issue.record("expected notSent, got \(String(describing: error))")
            return
        }
    }

    @Test func cancellingTheTaskAbortsTheTransfer() async throws {
        let server = try TestHTTPServer { _ in .hang }
        defer { server.stop() }
        let transport = transport
        let start = ContinuousClock.now
        let task = Task {
            try await transport.send(
                HTTPRequest(
                    method: "POST", url: server.url + "/slow", body: [1], timeoutMilliseconds: 20_000,
                    changesState: true))
        }
        try await Task.sleep(for: .milliseconds(200))
        task.cancel()
        let result = await task.result
        guard case .failure(let error as HTTPTransportError) = result, case .noAnswer = error else {
            Issue.record("expected noAnswer, got \(result)")
            return
        }
        // Well before the request's own 20 s timeout: the cancel ended it.
        #expect(ContinuousClock.now - start < .seconds(15))
    }

    @Test func runsRequestsConcurrently() async throws {
        // Counts requests in the server at once, rather than timing them.
        let inFlight = Mutex((now: 0, most: 0))
        let server = try TestHTTPServer { request in
            if request.target == "/slow" {
                inFlight.withLock {
                    $0.now += 1
                    $0.most = max($0.most, $0.now)
                }
                Thread.sleep(forTimeInterval: 0.5)
                inFlight.withLock { $0.now -= 1 }
            }
            return .respond(status: 200)
        }
        defer { server.stop() }
        let transport = transport
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<4 {
                group.addTask { try await transport.send(self.get(server.url + "/slow")).status }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(inFlight.withLock { $0.most } >= 2)
    }
}
