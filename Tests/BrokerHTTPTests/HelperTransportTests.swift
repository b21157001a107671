import BrokerCore
import BrowserLoginTestSupport
import Foundation
import Synchronization
import Testing

@testable import BrokerHTTP

/// The broker's transport through the real helper (`browser-login-http` of this build) against a real HTTP server.
@Suite struct HelperTransportTests {
    static let helper = binDirectory + "/browser-login-http"

    func transport(idleSeconds: Int = 10) -> HelperTransport {
        HelperTransport(program: Self.helper, environment: ["PATH": "/usr/bin:/bin"], idleSeconds: idleSeconds)
    }

    func get(_ url: String, timeout: Int = 5_000, limit: Int = 1 << 20) -> HTTPRequest {
        HTTPRequest(
            method: "GET", url: url, timeoutMilliseconds: timeout, connectTimeoutMilliseconds: 2_000,
            maximumResponseBytes: limit, changesState: false)
    }

    @Test func answersComeBackWhole() async throws {
        let server = try TestHTTPServer { request in
            .respond(status: 201, headers: [("X-Echo", request.target)], body: request.body + [0, 255, 10])
        }
        defer { server.stop() }
        let http = transport()
        let body = Array(#"{"code":"x"}"#.utf8)
        let response = try await http.send(
            HTTPRequest(
                method: "POST", url: server.url + "/exchange?x=1",
                headers: [HTTPHeader("Content-Type", "application/json")], body: body, changesState: true))
        #expect(response.status == 201)
        #expect(response.body == body + [0, 255, 10])
        #expect(response.header("x-echo") == "/exchange?x=1")
        let seen = try #require(server.requests.first)
        #expect(seen.method == "POST")
        #expect(seen.header("Content-Type") == "application/json")
    }

    @Test func manyRequestsAtOnceShareOneHelper() async throws {
        let server = try TestHTTPServer { request in .respond(status: 200, body: Array(request.target.utf8)) }
        defer { server.stop() }
        let http = transport()
        let bodies = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<40 {
                group.addTask { (i, String(decoding: try await http.send(get(server.url + "/n/\(i)")).body, as: UTF8.self)) }
            }
            var all: [Int: String] = [:]
            for try await (i, body) in group { all[i] = body }
            return all
        }
        #expect(bodies.count == 40)
        #expect(bodies.allSatisfy { $0.value == "/n/\($0.key)" })
        let pid = try #require(http.helperProcess)
        #expect(kill(pid, 0) == 0)
    }

    @Test func errorsKeepTheirKind() async throws {
        let http = transport()
        let port = try unusedPort()
        await #expect(throws: HTTPTransportError.self) { _ = try await http.send(get("http://127.0.0.1:\(port)/x")) }
        do {
            _ = try await http.send(get("http://127.0.0.1:\(port)/x"))
        } catch {
            guard case .notSent(let message) = error else { Issue.record("expected notSent, got \(error)"); return }
            #expect(message.contains("could not connect"))
        }
        let server = try TestHTTPServer { _ in .respond(status: 200, body: [UInt8](repeating: 65, count: 5000)) }
        defer { server.stop() }
        await #expect(throws: HTTPTransportError.responseTooLarge) {
            _ = try await http.send(get(server.url + "/big", limit: 100))
        }
        await #expect(throws: HTTPTransportError.self) {
            _ = try await http.send(HTTPRequest(method: "TRACE", url: server.url, changesState: false))
        }
    }

    @Test func aHelperKilledMidRequestGivesNoAnswerAndTheNextRequestStartsAnother() async throws {
        let release = Mutex(false)
        let server = try TestHTTPServer { request in
            if request.target == "/slow" {
                while !release.withLock({ $0 }) { usleep(10_000) }
            }
            return .respond(status: 200)
        }
        defer {
            release.withLock { $0 = true }
            server.stop()
        }
        let http = transport()
        let slow = Task { try await http.send(get(server.url + "/slow", timeout: 20_000)) }
        var first: pid_t?
        for _ in 0..<500 where first == nil || server.requests.isEmpty {
            first = http.helperProcess
            try await Task.sleep(for: .milliseconds(10))
        }
        let killed = try #require(first)
        kill(killed, SIGKILL)
        do {
            _ = try await slow.value
            Issue.record("the request succeeded without a helper")
        } catch let error as HTTPTransportError {
            guard case .noAnswer = error else { Issue.record("expected noAnswer, got \(error)"); return }
        }
        release.withLock { $0 = true }
        let next = try await http.send(get(server.url + "/again"))
        #expect(next.status == 200)
        #expect(http.helperProcess != killed)
    }

    @Test func cancellingTheTaskAbortsTheTransfer() async throws {
        let release = Mutex(false)
        let server = try TestHTTPServer { _ in
            while !release.withLock({ $0 }) { usleep(10_000) }
            return .respond(status: 200)
        }
        defer {
            release.withLock { $0 = true }
            server.stop()
        }
        let http = transport()
        let started = ContinuousClock.now
        let slow = Task { try await http.send(get(server.url + "/slow", timeout: 30_000)) }
        for _ in 0..<500 where server.requests.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        slow.cancel()
        await #expect(throws: HTTPTransportError.self) { _ = try await slow.value }
        #expect(ContinuousClock.now - started < .seconds(20))
    }

    @Test func anIdleHelperExitsAndIsReaped() async throws {
        let server = try TestHTTPServer { _ in .respond(status: 200) }
        defer { server.stop() }
        let http = transport(idleSeconds: 2)
        _ = try await http.send(get(server.url + "/one"))
        let pid = try #require(http.helperProcess)
        var gone = false
        for _ in 0..<500 where !gone {
            try await Task.sleep(for: .milliseconds(20))
            // Reaped: no process (not even a zombie) with that id.
            gone = http.helperProcess == nil && kill(pid, 0) != 0
        }
        #expect(gone)
        let again = try await http.send(get(server.url + "/two"))
        #expect(again.status == 200)
    }

    @Test func aMissingHelperFailsEveryRequestSayingSo() async throws {
        let http = HelperTransport(program: "/nonexistent/browser-login-http", environment: [:])
        #expect(http.program == nil)
        do {
            _ = try await http.send(get("http://127.0.0.1:1/x"))
            Issue.record("sent without a helper")
        } catch {
            guard case .notSent(let message) = error else { Issue.record("expected notSent, got \(error)"); return }
            #expect(message.contains("not installed"))
        }
    }

    @Test func framesRoundTripAndBrokenOnesAreRefused() throws {
        let request = HTTPRequest(
            method: "POST", url: "https://example.test/a", headers: [HTTPHeader("A", "b c"), HTTPHeader("X", "")],
            body: [0, 1, 255], timeoutMilliseconds: 7, connectTimeoutMilliseconds: 3, maximumResponseBytes: 99,
            caFile: "/etc/ca.pem", changesState: true)
        let frames: [HTTPHelperWire.Frame] = [
            .request(id: 1, request, proxy: .environment),
            .request(id: 2, get("http://127.0.0.1/"), proxy: .direct),
            .request(id: 3, request, proxy: .url("socks5h://proxy:1080")),
            .cancel(id: 4),
            .response(id: 5, HTTPResponse(status: 204, headers: [HTTPHeader("K", "v")], body: [])),
            .failure(id: 6, .notSent("n")), .failure(id: 7, .noAnswer("a")), .failure(id: 8, .responseTooLarge),
            .failure(id: 9, .invalidRequest("i")),
        ]
        var stream = HTTPHelperWire.Stream()
        let bytes = frames.flatMap(HTTPHelperWire.encode)
        // Fed a byte at a time: frames come out whole and in order.
        var decoded: [HTTPHelperWire.Frame] = []
        for byte in bytes {
            [byte].withUnsafeBytes { stream.append($0) }
            while let payload = stream.next() { decoded.append(try #require(HTTPHelperWire.decode(payload))) }
        }
        #expect(decoded == frames)
        // Every truncation, and a byte too many, is refused.
        let one = Array(HTTPHelperWire.encode(frames[0]).dropFirst(4))
        for cut in 0..<one.count { #expect(HTTPHelperWire.decode(one[0..<cut]) == nil) }
        #expect(HTTPHelperWire.decode(ArraySlice(one + [0])) == nil)
        // A length over the limit breaks the stream.
        var huge = HTTPHelperWire.Stream()
        [UInt8]([0xFF, 0xFF, 0xFF, 0x7F, 1]).withUnsafeBytes { huge.append($0) }
        #expect(huge.next() == nil)
        #expect(huge.broken)
    }
}
