import BrowserLoginProtocol
import BrowserLoginTestSupport
import BrowserLoginTestTraits
import Foundation
import ScriptedBrowser
import Synchronization
import SystemSupport
import Testing

@testable import LoginServer

/// Runs `body(i)` for i in 0..<count, `threads` at a time, each on a thread of its own.
private func onThreads(_ count: Int, threads: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let next = Atomic<Int>(0)
    let done = DispatchGroup()
    for _ in 0..<threads {
        done.enter()
        Thread {
            while true {
                let i = next.add(1, ordering: .relaxed).oldValue
                guard i < count else { break }
                body(i)
            }
            done.leave()
        }.start()
    }
    done.wait()
}

/// Waits (at most `seconds`) until `condition` holds; false if it never did.
private func eventually(_ seconds: Double = 30, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        if condition() { return true }
        usleep(2000)
    }
    return condition()
}

/// A handler that holds every request to `/block` until `release()`, and answers any other at once.
private final class Turnstile: Sendable {
    private let held = Mutex(0)
    private let open = DispatchSemaphore(value: 0)

    var heldNow: Int { held.withLock { $0 } }

    func handle(_ request: HTTPServerRequest) -> HTTPServerResponse {
        if request.path == "/block" {
            held.withLock { $0 += 1 }
            open.wait()
            open.signal()  // the next held request goes too
        }
        return HTTPServerResponse(status: 200, body: Array(("answered " + request.path).utf8))
    }

    func release() { open.signal() }
}

/// The reference server's HTTP listener: libmicrohttpd's polling threads
/// with the answers made on handler threads (suspend/resume).
@Suite(.dedicatedThread) struct HTTPListenerTests {
    @Test func manyConcurrentClientsEachGetTheirOwnAnswer() throws {
        let server = try HTTPServer(address: "127.0.0.1", port: 0, tls: nil, maximumBody: 1024, pollingThreads: 2) {
            request in
            HTTPServerResponse(
                status: 200, headers: [("X-Path", request.path)],
                body: Array("\(request.method) \(request.path) \(String(decoding: request.body, as: UTF8.self))".utf8))
        }
        defer { server.stop() }
        let origin = "http://127.0.0.1:\(server.port)"
        let wrong = Mutex<[String]>([])
        onThreads(64 * 20, threads: 64) { i in
            let path = "/echo/\(i)"
            let body = "body-\(i)-" + String(repeating: "x", count: i % 300)
            let answer = try? RawHTTP.postJSON(origin + path, body)
            if answer?.status != 200 || answer?.text != "POST \(path) \(body)" || answer?.header("x-path") != path {
                wrong.withLock { $0.append("\(i): \(answer.map { "\($0.status) \($0.text)" } ?? "no answer")") }
            }
        }
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0.prefix(5) })")
        // The handler threads are reused: never more than the requests in flight at once.
        #expect(server.handlerThreadCount <= 64)
    }

    @Test func blockedHandlersHoldUpNoOtherRequest() throws {
        let turnstile = Turnstile()
        // One polling thread, and more held requests than CPUs: nothing else answers them.
        let server = try HTTPServer(
            address: "127.0.0.1", port: 0, tls: nil, maximumBody: 1024, pollingThreads: 1, handler: turnstile.handle)
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        let heldAnswers = Mutex<[Int]>([])
        let held = DispatchGroup()
        for _ in 0..<16 {
            held.enter()
            Thread {
                let status = (try? RawHTTP.send("GET", base + "/block"))?.status ?? 0
                heldAnswers.withLock { $0.append(status) }
                held.leave()
            }.start()
        }
        #expect(eventually { turnstile.heldNow == 16 })
        // Every one of the 16 handlers is still blocked, and other requests are answered.
        for i in 0..<20 {
            let answer = try RawHTTP.send("GET", base + "/fast/\(i)")
            #expect(answer.status == 200 && answer.text == "answered /fast/\(i)")
        }
        #expect(heldAnswers.withLock { $0 }.isEmpty)
        turnstile.release()
        held.wait()
        #expect(heldAnswers.withLock { $0 } == Array(repeating: 200, count: 16))
    }

    @Test func stopAnswersTheRequestsInFlightFirst() throws {
        let turnstile = Turnstile()
        let server = try HTTPServer(
            address: "127.0.0.1", port: 0, tls: nil, maximumBody: 1024, pollingThreads: 2, handler: turnstile.handle)
        let base = "http://127.0.0.1:\(server.port)"
        let answer = Mutex<HTTPAnswer?>(nil)
        let answered = DispatchGroup()
        answered.enter()
        Thread {
            let got = try? RawHTTP.send("GET", base + "/block")
            answer.withLock { $0 = got }
            answered.leave()
        }.start()
        #expect(eventually { turnstile.heldNow == 1 })
        let stopped = Atomic<Bool>(false)
        let stopping = DispatchGroup()
        stopping.enter()
        Thread {
            server.stop()
            stopped.store(true, ordering: .releasing)
            stopping.leave()
        }.start()
        // stop() waits for the held request (libmicrohttpd must not stop with it suspended).
        usleep(300_000)
        let stoppedEarly = stopped.load(ordering: .acquiring)
        #expect(!stoppedEarly)
        turnstile.release()
        stopping.wait()
        answered.wait()
        #expect(answer.withLock { $0 }?.status == 200)
        #expect(answer.withLock { $0 }?.text == "answered /block")
        #expect(server.handlerThreadCount == 0)
        // Nothing listens any more.
        #expect(throws: ScriptedBrowserError.self) { try RawHTTP.send("GET", base + "/fast") }
    }

    @Test func handlerThreadsAreReusedAndEndWhenIdle() throws {
        let threads = HandlerThreads(maximum: 8, idleTimeout: .milliseconds(200))
        let ran = Atomic<Int>(0)
        // One job after another: one thread does them all.
        for _ in 0..<50 {
            let done = DispatchSemaphore(value: 0)
            threads.submit {
                ran.add(1, ordering: .relaxed)
                done.signal()
            }
            done.wait()
            // Idle again before the next one comes.
            #expect(eventually { threads.counts == (threads: 1, idle: 1) })
        }
        #expect(ran.load(ordering: .relaxed) == 50)
        // Eight blocked jobs take eight threads; two more wait in the queue for a free one.
        let gate = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        for _ in 0..<10 {
            finished.enter()
            threads.submit {
                gate.wait()
                gate.signal()
                finished.leave()
            }
        }
        #expect(threads.counts.threads == 8)
        gate.signal()
        finished.wait()
        // Idle threads end after the timeout.
        #expect(eventually { threads.counts.threads == 0 })
        threads.submit {}
        threads.stop()
        #expect(threads.counts.threads == 0)
    }

    @Test func requestsAcceptedInPlaceAreAnsweredWithoutAHandlerThread() throws {
        let server = try HTTPServer(
            address: "127.0.0.1", port: 0, tls: nil, maximumBody: 1024, pollingThreads: 2,
            answersInPlace: { $0.path.hasPrefix("/here/") }
        ) { request in
            HTTPServerResponse(
                status: 200, body: Array("answered \(request.path) \(String(decoding: request.body, as: UTF8.self))".utf8))
        }
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        let wrong = Mutex<[String]>([])
        onThreads(640, threads: 32) { i in
            let answer = try? RawHTTP.postJSON(base + "/here/\(i)", "body-\(i)")
            if answer?.status != 200 || answer?.text != "answered /here/\(i) body-\(i)" {
                wrong.withLock { $0.append("\(i): \(answer.map { "\($0.status) \($0.text)" } ?? "no answer")") }
            }
        }
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0.prefix(5) })")
        // Every one was answered on a polling thread: no handler thread was made.
        #expect(server.handlerThreadCount == 0)
        // A request the predicate refuses still goes to a handler thread.
        let elsewhere = try RawHTTP.postJSON(base + "/there", "x")
        #expect(elsewhere.status == 200 && elsewhere.text == "answered /there x")
        #expect(server.handlerThreadCount == 1)
    }

    @Test func onlyTheNativeRoutesOfOneShortTransactionAreAnsweredInPlace() throws {
        let server = try TestServer()
        let base = server.server.configuration.basePath
        func short(_ service: LoginService, _ method: String, _ path: String) -> Bool {
            service.isShortTransaction(HTTPServerRequest(method: method, path: base + path))
        }
        let service = server.server.service
        for path in [
            "/native/attempts", "/native/attempts/at_1/exchange", "/native/attempts/at_1/status",
            "/native/attempts/at_1/cancel", "/native/attempts/at_1/acknowledge",
        ] {
            #expect(short(service, "POST", path), "\(path)")
            #expect(!short(service, "GET", path), "\(path)")
        }
        // Mail, refreshes, revocations, the page and unknown routes go to a handler thread.
        for path in [
            "/native/session", "/native/sessions/refresh", "/native/sessions/revoke", "/native/attempts//exchange",
            "/native/attempts/at_1/other", "/browser/signin/start", "/browser/authorize", "/health",
        ] {
            #expect(!short(service, "POST", path), "\(path)")
            #expect(!service.answersInPlace(HTTPServerRequest(method: "POST", path: base + path)), "\(path)")
        }
        // A short one is answered in place once the SQLite writer is idle (the start-up sweep may
        // still run); never on PostgreSQL, whose transactions wait on the network.
        let create = HTTPServerRequest(method: "POST", path: base + "/native/attempts")
        if PostgresCluster.selectedForTests {
            #expect(!service.answersInPlace(create))
        } else {
            #expect(eventually { service.answersInPlace(create) })
        }
        // The test-only exchange delay sleeps: such an exchange is not answered in place.
        let delayed = try TestServer { $0.testExchangeDelayMillis = 50 }
        #expect(!short(delayed.server.service, "POST", "/native/attempts/at_1/exchange"))
        #expect(short(delayed.server.service, "POST", "/native/attempts"))
    }

    @Test func theServerAnswersManyConcurrentNativeHostsCorrectly() throws {
        let server = try TestServer { $0.rateLimits.create = RateLimit(burst: 10_000, perMinute: 100_000) }
        // The threads hold only the URL: the server (and its directory) ends with the test.
        let native = server.base + "/native"
        let wrong = Mutex<[String]>([])
        // 64 native hosts at once, each creating an attempt and reading its own status with its own key.
        onThreads(256, threads: 64) { i in
            do {
                let verifier = try ProofSecret.generate()
                let recovery = try ProofSecret.generate()
                let body = try JSONEncoder().encode(
                    CreateAttemptRequest(
                        clientId: confirmClient, returnUrl: confirmReturn, codeChallenge: verifier.challenge,
                        recoveryChallenge: recovery.challenge))
                let created = try RawHTTP.postJSON(native + "/attempts", String(decoding: body, as: UTF8.self))
                    .decode(CreateAttemptResponse.self)
                let status = try RawHTTP.postJSON(
                    native + "/attempts/\(created.attemptId)/status", #"{"recoveryKey":"\#(recovery.value)"}"#)
                if try status.decode(StatusResponse.self).state != .pending {
                    wrong.withLock { $0.append("\(i): \(status.text)") }
                }
                let other = try RawHTTP.postJSON(
                    native + "/attempts/\(created.attemptId)/status", #"{"recoveryKey":"\#(verifier.value)"}"#)
                if other.status == 200 { wrong.withLock { $0.append("\(i): another key was accepted") } }
            } catch {
                wrong.withLock { $0.append("\(i): \(error)") }
            }
        }
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0.prefix(5) })")
    }
}

/// The server's stderr log lines, written without a lock held across the write.
@Suite(.dedicatedThread) struct ServerLogLineTests {
    @Test func linesFromManyThreadsAtOnceStayWhole() throws {
        let directory = try TemporaryDirectory("server-log")
        let path = directory.path + "/stderr"
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let handler = ServerStderrLogHandler(prefixes: true, fileDescriptor: fd)
        onThreads(32 * 200, threads: 32) { i in
            handler.handle(
                LogEntry(
                    level: .info, label: "browser-login-server", message: "request",
                    metadata: ["n": "\(i)", "pad": String(repeating: "p", count: 1 + i % 700)]))
        }
        // One line past PIPE_BUF goes whole too.
        handler.handle(
            LogEntry(
                level: .warning, label: "browser-login-server", message: "long",
                metadata: ["pad": String(repeating: "q", count: 9000)]))
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.last == "")
        var seen = Set<Int>()
        for line in lines.dropLast() where !line.hasPrefix("<4>") {
            let fields = line.split(separator: " ")
            guard fields.count == 4, fields[0] == "<6>browser-login-server:", fields[1] == "request",
                let n = Int(fields[2].dropFirst(2)), fields[3] == "pad=" + String(repeating: "p", count: 1 + n % 700)
            else {
                Issue.record("a broken line: \(line.prefix(80))")
                continue
            }
            seen.insert(n)
        }
        #expect(seen.count == 32 * 200)
        #expect(lines.contains { $0 == "<4>browser-login-server: long pad=" + String(repeating: "q", count: 9000) })
    }
}
