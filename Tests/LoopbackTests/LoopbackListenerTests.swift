import BrokerLoopback
import BrowserLoginTestTraits
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The loopback redirect listener (RFC 8252 §7.3) over real sockets. The
/// tests block on sockets, so each runs on a thread of its own; deliveries run
/// in the cooperative pool.
@Suite(.dedicatedThread)
struct LoopbackListenerTests {
    @Test func anEphemeralPortIsBoundOnLoopbackAndAnswers() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        #expect(listener.port != 0)
        #expect(listener.listeningAddress()?.address == "127.0.0.1")
        let response = try #require(try get("/callback?code=abc&state=xyz", port: listener.port))
        #expect(response.status == 200)
        #expect(response.body.contains("<h1>Signed in</h1>"))
        #expect(response.body.contains("You can close this tab."))
        #expect(deliveries.all == ["http://127.0.0.1:\(listener.port)/callback?code=abc&state=xyz"])
    }

    /// The broker loads libmicrohttpd when a listener opens (it does not link it): a missing library is named.
    @Test func aMissingLibraryIsNamedWithItsPackage() {
        #expect(LoopbackListener.loadError(soname: "libmicrohttpd.so.12") == nil)
        let error = LoopbackListener.loadError(soname: "libmicrohttpd-missing.so.0")
        let text = error?.description ?? ""
        #expect(text.hasPrefix("libmicrohttpd (libmicrohttpd12) could not be loaded: libmicrohttpd-missing.so.0"), "\(text)")
        #expect(text.hasSuffix("; install it"))
    }

    @Test func theExactPathDeliversTheTargetByteForByte() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/oauth/cb", deliver: deliveries.deliver)
        defer { listener.close() }
        let target = "/oauth/cb?code=a%2Fb%20c%2b&state=x%3D%3D&iss=https%3A%2F%2Fid.example.com&empty=&code=again"
        let response = try #require(try get(target, port: listener.port))
        #expect(response.status == 200)
        #expect(deliveries.all == ["http://127.0.0.1:\(listener.port)\(target)"])
        // No query at all is the exact path too.
        _ = try get("/oauth/cb", port: listener.port)
        #expect(deliveries.all.last == "http://127.0.0.1:\(listener.port)/oauth/cb")
    }

    @Test(arguments: ["/other", "/callbackx?code=1", "/callback/", "/%63allback?code=1", "/Callback", "/", "//callback"])
    func anyOtherPathIs404WithoutDelivery(target: String) throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let response = try #require(try get(target, port: listener.port))
        #expect(response.status == 404)
        #expect(deliveries.all.isEmpty)
    }

    @Test(arguments: ["POST", "HEAD", "PUT", "OPTIONS", "DELETE"])
    func anyOtherMethodIs405WithoutDelivery(method: String) throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let body = method == "POST" ? "code=abc" : ""
        let response = try #require(
            try get(
                "/callback?code=abc", port: listener.port, method: method,
                extraHeaders: body.isEmpty ? "" : "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 8\r\n",
                body: body))
        #expect(response.status == 405)
        #expect(response.header("Allow") == "GET")
        #expect(deliveries.all.isEmpty)
    }

    @Test func aGetWithABodyIsRefusedWithoutDelivery() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let sized = try #require(
            try get("/callback?code=1", port: listener.port, extraHeaders: "Content-Length: 5\r\n", body: "hello"))
        #expect(sized.status == 400)
        let chunked = try #require(
            try get(
                "/callback?code=1", port: listener.port, extraHeaders: "Transfer-Encoding: chunked\r\n",
                body: "5\r\nhello\r\n0\r\n\r\n"))
        #expect(chunked.status == 400)
        #expect(deliveries.all.isEmpty)
    }

    @Test func aMalformedRequestIs400WithoutDelivery() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        for request in [
            "GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\nBad Header\r\n\r\n",
            "GET /callback?c\u{7}=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\n\r\n",
        ] {
            let connection = try RawConnection(host: .ipv4, port: listener.port)
            connection.send(request)
            let response = try #require(try connection.response())
            #expect(response.status == 400)
        }
        #expect(deliveries.all.isEmpty)
    }

    @Test func everyAnswerCarriesTheSecurityHeaders() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let answers = [
            try get("/callback?code=1", port: listener.port), try get("/favicon.ico", port: listener.port),
            try get("/callback", port: listener.port, method: "POST"),
        ]
        #expect(answers.map { $0?.status } == [200, 404, 405])
        for answer in answers {
            let answer = try #require(answer)
            #expect(answer.header("Cache-Control") == "no-store")
            #expect(answer.header("Referrer-Policy") == "no-referrer")
            #expect(answer.header("Content-Security-Policy") == "default-src 'none'; style-src 'unsafe-inline'")
            #expect(answer.header("X-Content-Type-Options") == "nosniff")
            #expect(answer.header("Content-Type") == "text/html; charset=utf-8")
            #expect(!answer.body.lowercased().contains("<script"))
            #expect(!answer.body.contains("http://") && !answer.body.contains("https://"))
        }
    }

    @Test func theRefusalPageIsEscaped() throws {
        let deliveries = Deliveries(
            page: LoopbackPage(
                status: 400, title: "Sign-in <failed>",
                message: "The provider said: <script>alert('x')</script> & \"more\""))
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let response = try #require(try get("/callback?error=access_denied", port: listener.port))
        #expect(response.status == 400)
        #expect(!response.body.contains("<script>"))
        #expect(!response.body.contains("<failed>"))
        #expect(response.body.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;more&quot;"))
        #expect(response.body.contains("<title>Sign-in &lt;failed&gt;</title>"))
    }

    @Test func anOversizedRequestIsRefusedWithoutDelivery() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let big = String(repeating: "a", count: 16 * 1024)
        let longQuery = try get("/callback?code=\(big)", port: listener.port)
        let longHeader = try get("/callback?code=1", port: listener.port, extraHeaders: "X-Filler: \(big)\r\n")
        // libmicrohttpd refuses them itself (414 URI Too Long, 431 Request Header Fields Too Large).
        #expect(longQuery.map { (400..<500).contains($0.status) } == true)
        #expect(longHeader.map { (400..<500).contains($0.status) } == true)
        #expect(deliveries.all.isEmpty)
        // Under the limit is fine.
        let fits = String(repeating: "b", count: 4 * 1024)
        #expect(try get("/callback?code=\(fits)", port: listener.port)?.status == 200)
        #expect(deliveries.all.count == 1)
    }

    @Test func anIdleConnectionIsClosed() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(
            host: .ipv4, port: 0, path: "/callback", idleTimeoutSeconds: 1, deliver: deliveries.deliver)
        defer { listener.close() }
        let idle = try RawConnection(host: .ipv4, port: listener.port)
        let (bytes, eof) = idle.readToEnd()
        #expect(eof, "the listener closed the idle connection")
        #expect(bytes.isEmpty)
        #expect(deliveries.all.isEmpty)
    }

    @Test func aFixedPortInUseIsReported() throws {
        let deliveries = Deliveries()
        let first = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { first.close() }
        #expect(throws: LoopbackError.portInUse(first.port)) {
            _ = try LoopbackListener.open(host: .ipv4, port: first.port, path: "/callback", deliver: deliveries.deliver)
        }
        #expect(LoopbackError.portInUse(first.port).description.contains("\(first.port)"))
    }

    @Test func aBadPathIsRefusedAtOpen() {
        for path in ["callback", "/cb?x=1", "/cb#f", "/a b", ""] {
            #expect(throws: LoopbackError.self) {
                _ = try LoopbackListener.open(host: .ipv4, port: 0, path: path) { _ in .init(status: 200, title: "", message: "")
                }
            }
        }
    }

    @Test(.enabled(if: ipv6LoopbackAvailable, "::1 cannot be bound on this machine"))
    func ipv6Works() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv6, port: 0, path: "/callback", deliver: deliveries.deliver)
        defer { listener.close() }
        let bound = try #require(listener.listeningAddress())
        #expect(bound.address == "::1")
        #expect(bound.ipv6Only == true)
        let response = try #require(try get("/callback?code=6", host: .ipv6, port: listener.port))
        #expect(response.status == 200)
        #expect(deliveries.all == ["http://[::1]:\(listener.port)/callback?code=6"])
        // Not reachable over IPv4.
        #expect(throws: TestError.self) { _ = try RawConnection(host: .ipv4, port: listener.port) }
    }

    @Test func closeReleasesThePortAndIsIdempotent() throws {
        let deliveries = Deliveries()
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback", deliver: deliveries.deliver)
        let port = listener.port
        #expect(try get("/callback?code=1", port: port)?.status == 200)
        let keptAlive = try RawConnection(host: .ipv4, port: port)
        listener.close()
        listener.close()
        #expect(keptAlive.readToEnd().eof)
        #expect(throws: TestError.self) { _ = try RawConnection(host: .ipv4, port: port) }
        let again = try LoopbackListener.open(host: .ipv4, port: port, path: "/callback", deliver: deliveries.deliver)
        defer { again.close() }
        #expect(again.port == port)
        #expect(try get("/callback?code=2", port: port)?.status == 200)
    }

    @Test func aSlowDeliveryBlocksNoOtherRequest() async throws {
        let gate = Gate()
        let (started, startedContinuation) = AsyncStream.makeStream(of: String.self)
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback") { url in
            startedContinuation.yield(url)
            await gate.wait()
            return LoopbackPage(status: 200, title: "Signed in", message: "Done.")
        }
        defer { listener.close() }
        var events = started.makeAsyncIterator()
        let first = try RawConnection(host: .ipv4, port: listener.port)
        first.send("GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\nConnection: close\r\n\r\n")
        #expect(await events.next()?.hasSuffix("/callback?code=1") == true)
        // While the first delivery waits: another path is answered, and the same path is delivered again.
        #expect(try get("/elsewhere", port: listener.port)?.status == 404)
        let second = try RawConnection(host: .ipv4, port: listener.port)
        second.send("GET /callback?code=2 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\nConnection: close\r\n\r\n")
        #expect(await events.next()?.hasSuffix("/callback?code=2") == true)
        await gate.open()
        #expect(try first.response()?.status == 200)
        #expect(try second.response()?.status == 200)
    }

    @Test func closeDuringADeliveryDoesNotWaitForIt() async throws {
        let gate = Gate()
        let finished = Mutex(false)
        let (started, startedContinuation) = AsyncStream.makeStream(of: Void.self)
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback") { _ in
            startedContinuation.yield()
            await gate.wait()
            finished.withLock { $0 = true }
            return LoopbackPage(status: 200, title: "Signed in", message: "Done.")
        }
        let waiting = try RawConnection(host: .ipv4, port: listener.port)
        waiting.send("GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\n\r\n")
        var events = started.makeAsyncIterator()
        _ = await events.next()
        listener.close()  // returns with the delivery still waiting
        #expect(!finished.withLock { $0 })
        let (bytes, eof) = waiting.readToEnd()
        #expect(eof && bytes.isEmpty, "the waiting connection is closed without an answer")
        await gate.open()
    }

    @Test func closeFromInsideDeliverStillAnswersThenStops() async throws {
        let holder = Mutex<LoopbackListener?>(nil)
        let calls = Atomic<Int>(0)
        let listener = try LoopbackListener.open(host: .ipv4, port: 0, path: "/callback") { _ in
            calls.add(1, ordering: .relaxed)
            holder.withLock { $0 }?.close()  // the attempt ends while its callback is handled
            return LoopbackPage(status: 200, title: "Signed in", message: "Done.")
        }
        holder.withLock { $0 = listener }
        defer { holder.withLock { $0 = nil } }
        let connection = try RawConnection(host: .ipv4, port: listener.port)
        connection.send("GET /callback?code=1 HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\n\r\n")
        let response = try #require(try connection.response())
        #expect(response.status == 200)
        #expect(response.body.contains("Signed in"))
        // Closed: nothing more is delivered (the connection is refused, or closed unanswered).
        let again = try? get("/callback?code=2", port: listener.port)
        #expect(again == nil)
        #expect(calls.load(ordering: .relaxed) == 1)
    }
}
