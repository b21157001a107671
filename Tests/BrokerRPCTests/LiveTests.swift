import BrowserLoginTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

@testable import BrokerRPC

/// Collects server events.
final class EventLog: Sendable {
    private let events = Mutex<[RPCServerEvent]>([])
    func record(_ event: RPCServerEvent) { events.withLock { $0.append(event) } }
    var all: [RPCServerEvent] { events.withLock { $0 } }

    /// Waits (polling) until `predicate` holds for the events.
    func wait(timeout: Duration = .seconds(5), _ predicate: ([RPCServerEvent]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if predicate(all) { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return predicate(all)
    }
}

/// A counter shared with a handler.
final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}

/// A live server over a real socket in its own temporary directory.
final class LiveServer: Sendable {
    let directory: String
    let path: String
    let server: RPCServer
    let log = EventLog()
    let calls = Counter()
    private let task: Mutex<Task<Void, any Error>?> = Mutex(nil)

    init(configure: (inout RPCServerConfiguration) -> Void = { _ in }, handler: RPCHandler? = nil) throws {
        directory = try makeTemporaryDirectory("blrpc")
        path = directory + "/s.sock"
        var configuration = RPCServerConfiguration(listen: .path(path))
        configure(&configuration)
        let log = self.log
        let calls = self.calls
        let chosen = handler ?? LiveServer.standardHandler
        server = try RPCServer(configuration: configuration, events: { log.record($0) }) {
            context, method, params throws(RPCError) in
            calls.increment()
            return try await chosen(context, method, params)
        }
        let server = self.server
        task.withLock { $0 = Task { try await server.run() } }
    }

    /// Stops the server, waits for `run()` to return and removes the directory.
    func stop() async throws {
        server.shutdown()
        try await task.withLock { $0 }?.value
        try? FileManager.default.removeItem(atPath: directory)
    }

    func client(framing: RPCFraming = .ndjson, timeout: Duration = .seconds(10)) throws -> RPCClient {
        try RPCClient(socketPath: path, framing: framing, timeout: timeout)
    }

    static let standardHandler: RPCHandler = { context, method, params throws(RPCError) in
        switch method {
        case "echo":
            return params ?? nil
        case "sleep":
            let ms = params?["ms"]?.intValue ?? 100
            try? await Task.sleep(for: .milliseconds(ms))
            return "slept"
        case "fail":
            throw .application(code: "ATTEMPT_EXPIRED", message: "The attempt expired; start again.")
        case "ticks":
            let count = params?["count"]?.intValue ?? 10
            for n in 0..<count { context.notify(method: "tick", params: ["n": .integer(n)]) }
            return "done"
        case "whoami":
            return [
                "uid": .integer(Int64(context.peer.uid)), "pid": .integer(Int64(context.peer.pid)),
                "connection": .integer(Int64(context.connectionID)),
            ]
        case "big":
            return .string(String(repeating: "x", count: Int(params?["size"]?.intValue ?? 1000)))
        default:
            throw .methodNotFound(method)
        }
    }
}

@Suite struct LiveTests {
    @Test func bindsWithOwnerOnlyModesAndRemovesTheSocket() async throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/run/s.sock"
        let server = try RPCServer(configuration: .init(listen: .path(path))) { _, _, _ throws(RPCError) in nil }
        let task = Task { try await server.run() }
        let directoryMode = try FileManager.default.attributesOfItem(atPath: base + "/run")[.posixPermissions] as? Int
        let socketMode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(directoryMode == 0o700)
        #expect(socketMode == 0o600)
        let result = try await onThread { try RPCClient(socketPath: path).call("x") }
        #expect(result == nil)
        server.shutdown()
        try await task.value
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(throws: RPCClientError.socketMissing) { try RPCClient(socketPath: path) }
    }

    @Test func replacesAStaleSocketButNotAFile() async throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/s.sock"
        // A stale socket: bound, then its server gone.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try Syscalls.bind(stale, path: path)
        close(stale)
        let server = try RPCServer(configuration: .init(listen: .path(path))) { _, _, _ throws(RPCError) in "fresh" }
        let task = Task { try await server.run() }
        #expect(try await onThread { try RPCClient(socketPath: path).call("x") } == "fresh")
        server.shutdown()
        try await task.value

        let file = base + "/file.sock"
        #expect(FileManager.default.createFile(atPath: file, contents: Data("keep".utf8)))
        #expect(throws: RPCServerError.pathOccupied) {
            _ = try RPCServer(configuration: .init(listen: .path(file))) { _, _, _ throws(RPCError) in nil }
        }
        #expect(FileManager.default.contents(atPath: file) == Data("keep".utf8))
    }

    @Test func servesAnAlreadyListeningDescriptor() async throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/s.sock"
        let fd = try Syscalls.unixStreamSocket()
        try Syscalls.bind(fd, path: path)
        try Syscalls.listen(fd, backlog: 16)
        let server = try RPCServer(configuration: .init(listen: .fileDescriptor(fd))) { _, method, _ throws(RPCError) in
            .string(method)
        }
        let task = Task { try await server.run() }
        #expect(try await onThread { try RPCClient(socketPath: path).call("passed") } == "passed")
        server.shutdown()
        try await task.value
        // Not bound by the server, so not removed by it.
        #expect(FileManager.default.fileExists(atPath: path))

        let notListening = try Syscalls.unixStreamSocket()
        defer { close(notListening) }
        #expect(throws: RPCServerError.notAListeningSocket) {
            _ = try RPCServer(configuration: .init(listen: .fileDescriptor(notListening))) { _, _, _ throws(RPCError) in nil }
        }
    }

    @Test func callsErrorsAndPeerCredentials() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            #expect(try client.call("echo", params: ["a": [1, true]]) == ["a": [1, true]])
            let me = try client.call("whoami")
            #expect(me["uid"]?.intValue == Int64(getuid()))
            #expect(me["pid"]?.intValue == Int64(getpid()))
            do {
                _ = try client.call("fail")
                Issue.record("no error")
            } catch let error as RPCError {
                #expect(error.code == .applicationError)
                #expect(error.applicationCode == "ATTEMPT_EXPIRED")
            }
            #expect(throws: RPCError.methodNotFound("nope")) { try client.call("nope") }
            // Raw malformed JSON on the same connection: -32700, and the connection goes on.
            try client.sendRaw(Array("{nope\n".utf8))
            guard case .response(let response) = try client.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(response == RPCResponse(id: .null, error: .parseError()))
            #expect(try client.call("echo", params: ["still": true]) == ["still": true])
        }
        try await live.stop()
    }

    @Test func manyConcurrentClientsPipelining() async throws {
        let live = try LiveServer()
        let path = live.path
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for clientNumber in 0..<50 {
                group.addTask {
                    try await onThread {
                        let client = try RPCClient(socketPath: path)
                        for n in 0..<20 {
                            try client.send(
                                RPCRequest(
                                    id: .integer(Int64(n)), method: "echo",
                                    params: ["c": .integer(Int64(clientNumber)), "n": .integer(Int64(n))]))
                        }
                        var seen = Set<Int64>()
                        for _ in 0..<20 {
                            guard case .response(let response) = try client.nextMessage(),
                                case .integer(let id) = response.id
                            else { throw RPCClientError.invalidMessage }
                            #expect(try response.outcome.get() == ["c": .integer(Int64(clientNumber)), "n": .integer(id)])
                            seen.insert(id)
                        }
                        #expect(seen == Set(0..<20))
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - start
        print("50 clients x 20 pipelined requests: \(elapsed)")
        #expect(live.calls.count == 1000)
        try await live.stop()
    }

    @Test func slowCallStallsNeitherOtherConnectionsNorTheSameOne() async throws {
        let live = try LiveServer()
        let path = live.path
        let slowDone = Counter()
        // Timing is judged by order, not by absolute times: the machine may be busy.
        async let slow: JSONValue = onThread {
            defer { slowDone.increment() }
            return try RPCClient(socketPath: path).call("sleep", params: ["ms": 3000])
        }
        #expect(await live.log.wait { $0.contains { if case .connectionOpened = $0 { true } else { false } } })
        try await onThread {
            let other = try RPCClient(socketPath: path)
            #expect(try other.call("echo", params: ["fast": true]) == ["fast": true])
            #expect(slowDone.count == 0, "the fast call on another connection waited for the slow one")

            // Same connection: the fast call's reply overtakes the slow one's.
            let same = try RPCClient(socketPath: path)
            try same.send(RPCRequest(id: .integer(1), method: "sleep", params: ["ms": 1500]))
            try same.send(RPCRequest(id: .integer(2), method: "echo", params: ["n": 2]))
            guard case .response(let first) = try same.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(first.id == .integer(2))
            guard case .response(let second) = try same.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(second.id == .integer(1))
        }
        #expect(try await slow == "slept")
        try await live.stop()
    }

    @Test func notificationsArriveInOrderBeforeTheReply() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            try client.send(RPCRequest(id: .integer(9), method: "ticks", params: ["count": 300]))
            for n in 0..<300 {
                #expect(try client.nextMessage() == .notification(method: "tick", params: ["n": .integer(Int64(n))]))
            }
            #expect(try client.nextMessage() == .response(RPCResponse(id: .integer(9), result: "done")))
            // call() keeps the notifications it passes for nextMessage.
            #expect(try client.call("ticks", params: ["count": 2]) == "done")
            #expect(try client.nextMessage() == .notification(method: "tick", params: ["n": 0]))
            #expect(try client.nextMessage() == .notification(method: "tick", params: ["n": 1]))
        }
        try await live.stop()
    }

    @Test func connectionNotifyAndOnClose() async throws {
        let closed = Mutex(false)
        let held = Mutex<RPCConnection?>(nil)
        let live = try LiveServer(handler: { context, method, _ throws(RPCError) in
            held.withLock { $0 = context.connection }
            context.onClose { closed.withLock { $0 = true } }
            return "subscribed"
        })
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            #expect(try client.call("events.subscribe") == "subscribed")
            let connection = try #require(held.withLock { $0 })
            connection.notify(method: "session.changed", params: ["session": ["status": "signedIn"]])
            #expect(
                try client.nextMessage() == .notification(method: "session.changed", params: ["session": ["status": "signedIn"]]))
            client.close()
        }
        #expect(await live.log.wait { $0.contains { if case .connectionClosed(_, .peerClosed) = $0 { true } else { false } } })
        #expect(closed.withLock { $0 })
        #expect(held.withLock { $0 }?.isClosed == true)
        // Registering on a closed connection runs at once; notifying it does nothing.
        let late = Mutex(false)
        held.withLock { $0 }?.onClose { late.withLock { $0 = true } }
        held.withLock { $0 }?.notify(method: "ignored")
        #expect(late.withLock { $0 })
        try await live.stop()
    }

    @Test func onCloseRunsWhenOnlyTheHookIsKept() async throws {
        let closed = Counter()
        let live = try LiveServer(handler: { context, _, _ throws(RPCError) in
            context.onClose { closed.increment() }
            return true
        })
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            #expect(try client.call("events.subscribe") == true)
        }
        #expect(await live.log.wait { _ in closed.count == 1 })
        try await live.stop()
    }

    @Test func bothFramingsFromOneServer() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let lsp = try RPCClient(socketPath: path, framing: .contentLength)
            let ndjson = try RPCClient(socketPath: path)
            #expect(try lsp.call("echo", params: ["é": "☃"]) == ["é": "☃"])
            #expect(try ndjson.call("echo", params: ["é": "☃"]) == ["é": "☃"])
            #expect(try lsp.call("ticks", params: ["count": 1]) == "done")
            #expect(try lsp.nextMessage() == .notification(method: "tick", params: ["n": 0]))

            // A jsonrpc-glib style client: odd header case, Content-Type, "params": null.
            let raw = try RPCClient(socketPath: path, framing: .contentLength)
            let body = #"{"jsonrpc":"2.0","id":1,"method":"echo","params":null}"#
            try raw.sendRaw(Array("content-type: application/json\r\nCONTENT-LENGTH: \(body.utf8.count)\r\n\r\n\(body)".utf8))
            #expect(try raw.nextMessage() == .response(RPCResponse(id: .integer(1), result: nil)))

            // NDJSON with CRLF and empty lines, written byte by byte.
            let crlf = try RPCClient(socketPath: path)
            for byte in Array("\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"echo\",\"params\":[1]}\r\n".utf8) {
                try crlf.sendRaw([byte])
            }
            #expect(try crlf.nextMessage() == .response(RPCResponse(id: .string("s"), result: [1])))
        }
        try await live.stop()
    }

    @Test func batchesOverTheSocket() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            let batch =
                #"[{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":200}},{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","id":2,"method":"nope"},5]"#
            try client.sendBody(Array(batch.utf8))
            guard case .batch(let responses) = try client.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(responses.map(\.id) == [.integer(1), .integer(2), .null])
            // Only notifications: no reply at all; the next call is answered normally.
            try client.sendBody(Array(#"[{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"echo"}]"#.utf8))
            try client.sendBody(Array("[]".utf8))
            #expect(
                try client.nextMessage()
                    == .response(RPCResponse(id: .null, error: .invalidRequest("Invalid Request: empty batch"))))
            #expect(try client.call("echo", params: [:]) == [:])
        }
        try await live.stop()
    }

    @Test func oversizeClosesOnlyThatConnection() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let bystander = try RPCClient(socketPath: path)
            #expect(try bystander.call("echo", params: ["n": 1]) == ["n": 1])

            let big = try RPCClient(socketPath: path)
            let chunk = [UInt8](repeating: UInt8(ascii: " "), count: 65_536)
            try big.sendRaw(Array("[".utf8))
            // More than the limit: the server stops reading with bytes still unread.
            for _ in 0..<40 { try? big.sendRaw(chunk) }
            guard case .response(let response) = try big.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(response.id == .null)
            #expect(
                response.outcome
                    == .failure(RPCError(code: .invalidRequest, message: "Invalid Request: message over 1048576 bytes")))
            #expect(throws: RPCClientError.connectionClosed) { try big.nextMessage(timeout: .seconds(5)) }

            let header = try RPCClient(socketPath: path, framing: .contentLength)
            try header.sendRaw(Array("Content-Length: 1048577\r\n\r\n".utf8))
            guard case .response(let second) = try header.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(second.id == .null)
            #expect((try? second.outcome.get()) == nil)
            #expect(throws: RPCClientError.connectionClosed) { try header.nextMessage(timeout: .seconds(5)) }

            let broken = try RPCClient(socketPath: path, framing: .contentLength)
            try broken.sendRaw(Array("Content-Length: lots\r\n\r\n".utf8))
            guard case .response(let third) = try broken.nextMessage() else { throw RPCClientError.invalidMessage }
            #expect(third == RPCResponse(id: .null, error: .parseError("Parse error: malformed Content-Length header")))
            #expect(throws: RPCClientError.connectionClosed) { try broken.nextMessage(timeout: .seconds(5)) }

            #expect(try bystander.call("echo", params: ["n": 2]) == ["n": 2])
        }
        #expect(live.log.all.contains(.frameRejected(connectionID: 2, error: .oversize)))
        try await live.stop()
    }

    @Test func aClientThatNeverReadsIsClosedPastTheOutputBound() async throws {
        let live = try LiveServer(configure: { $0.maxQueuedOutput = 2 * 1_048_576 })
        let path = live.path
        let log = live.log
        try await onThread {
            let hog = try RPCClient(socketPath: path)
            for n in 0..<12 {
                try hog.send(RPCRequest(id: .integer(Int64(n)), method: "big", params: ["size": 500_000]))
            }
            // The hog stays connected (and never reads) until the server gives up on it.
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline,
                !log.all.contains(where: { if case .connectionClosed(_, .outputOverflow) = $0 { true } else { false } })
            {
                usleep(5_000)
            }
            let other = try RPCClient(socketPath: path)
            #expect(try other.call("echo", params: ["ok": true]) == ["ok": true])
            withExtendedLifetime(hog) {}
        }
        #expect(live.log.all.contains { if case .connectionClosed(_, .outputOverflow) = $0 { true } else { false } })
        try await live.stop()
    }

    @Test func aConnectionPastItsInFlightBoundIsPausedNotDropped() async throws {
        let live = try LiveServer(configure: { $0.maxInFlightPerConnection = 4 })
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path)
            for n in 0..<40 {
                try client.send(RPCRequest(id: .integer(Int64(n)), method: "sleep", params: ["ms": 20]))
            }
            var seen = Set<RPCID>()
            for _ in 0..<40 {
                guard case .response(let response) = try client.nextMessage() else { throw RPCClientError.invalidMessage }
                seen.insert(response.id)
            }
            #expect(seen.count == 40)
        }
        try await live.stop()
    }

    @Test func clientsVanishingMidRequestHarmNobody() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            for n in 0..<30 {
                let client = try RPCClient(socketPath: path)
                try client.send(
                    RPCRequest(id: .integer(1), method: n % 2 == 0 ? "sleep" : "big", params: ["ms": 30, "size": 300_000]))
                try client.sendRaw(Array("{\"jsonrpc\":\"2.0\",\"id\":2,\"meth".utf8))
                client.close()
            }
            let survivor = try RPCClient(socketPath: path)
            #expect(try survivor.call("echo", params: ["alive": true]) == ["alive": true])
        }
        #expect(await live.log.wait { _ in live.server.statistics.open == 0 || live.server.statistics.open == 1 })
        try await live.stop()
        #expect(live.server.statistics.open == 0)
        #expect(live.server.statistics.accepted == 31)
    }

    @Test func refusesAPeerOfAnotherUIDBeforeReading() async throws {
        let otherUID = getuid() == 4242 ? 4243 : 4242
        let live = try LiveServer(configure: { $0.allowedUID = UInt32(otherUID) })
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path, timeout: .seconds(5))
            try? client.send(RPCRequest(id: .integer(1), method: "echo"))
            #expect(throws: RPCClientError.connectionClosed) { try client.nextMessage() }
        }
        #expect(
            await live.log.wait {
                $0.contains {
                    if case .peerRefused(let peer) = $0 { peer.uid == getuid() && peer.pid == getpid() } else { false }
                }
            })
        #expect(live.calls.count == 0)
        #expect(live.server.statistics.refused == 1)
        #expect(live.server.statistics.accepted == 0)
        #expect(!live.log.all.contains { if case .connectionOpened = $0 { true } else { false } })
        try await live.stop()
    }

    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
    func refusesARealClientOfAnotherUID() async throws {
        let live = try LiveServer()
        // Let uid 65534 reach the socket, so that only the peer check stops it.
        chmod(live.directory, 0o755)
        chmod(live.path, 0o666)
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            s.settimeout(5)
            try:
                s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"echo"}\\n')
                data = s.recv(4096)
                print("EOF" if data == b"" else "DATA")
            except ConnectionResetError:
                print("EOF")
            except BrokenPipeError:
                print("EOF")
            """
        let path = live.path
        let output = try await onThread {
            try runProgram(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, path]
            ).out
        }
        #expect(output.trimmingCharacters(in: .whitespacesAndNewlines) == "EOF")
        #expect(
            await live.log.wait {
                $0.contains(where: { if case .peerRefused(let peer) = $0 { peer.uid == 65534 } else { false } })
            })
        #expect(live.calls.count == 0)
        try await live.stop()
    }

    @Test func aHalfClosedClientStillGetsItsReplies() async throws {
        // What `socat - UNIX-CONNECT:…` does when its input ends.
        let live = try LiveServer()
        let path = live.path
        let received = try await onThread { () -> String in
            let fd = try Syscalls.unixStreamSocket()
            defer { close(fd) }
            try Syscalls.connect(fd, path: path)
            let requests = Array(
                #"{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":100}}\#n{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}\#n"#
                    .utf8)
            _ = try Syscalls.send(fd, requests, from: 0)
            Syscalls.shutdownWrite(fd)
            var all: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = try Syscalls.read(fd, into: &chunk)
                if count == 0 { break }
                all += chunk[0..<count]
            }
            return String(decoding: all, as: UTF8.self)
        }
        #expect(
            received == #"{"id":2,"jsonrpc":"2.0","result":[2]}"# + "\n" + #"{"id":1,"jsonrpc":"2.0","result":"slept"}"# + "\n")
        try await live.stop()
    }

    @Test func shutdownClosesIdleConnections() async throws {
        let live = try LiveServer()
        let path = live.path
        let log = live.log
        try await onThread {
            let client = try RPCClient(socketPath: path)
            #expect(try client.call("echo", params: [1]) == [1])
            live.server.shutdown()
            #expect(throws: RPCClientError.connectionClosed) { try client.nextMessage(timeout: .seconds(5)) }
            #expect(log.all.contains { if case .connectionClosed(_, .serverShutdown) = $0 { true } else { false } })
        }
        try await live.stop()
    }

    @Test func shutdownLetsInFlightRequestsFinish() async throws {
        let live = try LiveServer()
        let path = live.path
        async let reply: JSONValue = onThread { try RPCClient(socketPath: path).call("sleep", params: ["ms": 400]) }
        #expect(await live.log.wait { $0.contains { if case .connectionOpened = $0 { true } else { false } } })
        try await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        try await live.stop()
        // Far less than a hang; loose because the machine may be loaded.
        #expect(ContinuousClock.now - start < .seconds(10))
        #expect(try await reply == "slept")
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func shutdownIsBoundedAndCancelsHandlers() async throws {
        let live = try LiveServer(configure: { $0.shutdownGracePeriod = .milliseconds(200) })
        let path = live.path
        async let reply: JSONValue = onThread { try RPCClient(socketPath: path).call("sleep", params: ["ms": 60_000]) }
        #expect(await live.log.wait { $0.contains { if case .connectionOpened = $0 { true } else { false } } })
        try await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        try await live.stop()
        // Far less than the handler's 60 s: the grace period ended it.
        #expect(ContinuousClock.now - start < .seconds(30))
        // The cancelled handler still answers before the connection closes.
        #expect(try await reply == "slept")
    }

    @Test func cancellingRunIsAHardStop() async throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/s.sock"
        let log = EventLog()
        let server = try RPCServer(
            configuration: .init(listen: .path(path)), events: { log.record($0) }, handler: LiveServer.standardHandler)
        let task = Task { try await server.run() }
        async let reply: JSONValue = onThread { try RPCClient(socketPath: path).call("sleep", params: ["ms": 60_000]) }
        #expect(await log.wait { $0.contains { if case .connectionOpened = $0 { true } else { false } } })
        try await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        task.cancel()
        try await task.value
        // Not the 5 s grace period: the handler was cancelled at once (and still answered).
        #expect(ContinuousClock.now - start < .milliseconds(4_500))
        #expect(try await reply == "slept")
        #expect(!FileManager.default.fileExists(atPath: path))
        await #expect(throws: RPCServerError.alreadyRunning) { try await server.run() }
    }
}

@Suite struct ClientErrorTests {
    @Test func missingSocket() throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(throws: RPCClientError.socketMissing) { try RPCClient(socketPath: base + "/none.sock") }
        #expect(throws: RPCClientError.socketMissing) { try RPCClient(socketPath: base + "/no/dir/s.sock") }
        #expect(RPCClientError.socketMissing.meansNotRunning)
    }

    @Test func refusedWhenNobodyListens() throws {
        let base = try makeTemporaryDirectory("blrpc")
        defer { try? FileManager.default.removeItem(atPath: base) }
        let fd = try Syscalls.unixStreamSocket()
        defer { close(fd) }
        try Syscalls.bind(fd, path: base + "/s.sock")
        #expect(throws: RPCClientError.connectionRefused) { try RPCClient(socketPath: base + "/s.sock") }
    }

    @Test func pathTooLong() {
        #expect(throws: RPCClientError.pathTooLong) {
            try RPCClient(socketPath: "/tmp/" + String(repeating: "a", count: 120))
        }
    }

    @Test(arguments: [
        (Errno.noSuchFile, RPCClientError.socketMissing),
        (.notDirectory, .socketMissing),
        (.connectionRefused, .connectionRefused),
        (.permissionDenied, .permissionDenied),
        (.notPermitted, .permissionDenied),
        (.nameTooLong, .pathTooLong),
        (.addressInUse, .io(.addressInUse)),
    ])
    func connectFailures(errno: Errno, expected: RPCClientError) {
        #expect(RPCClientError(connectFailure: errno) == expected)
    }

    /// Root passes every permission check, so this one runs only as another user
    /// (`connectFailures` covers the mapping of EACCES everywhere).
    @Test(.enabled(if: geteuid() != 0)) func permissionDenied() async throws {
        let live = try LiveServer()
        chmod(live.path, 0o000)
        #expect(throws: RPCClientError.permissionDenied) { try live.client() }
        try await live.stop()
    }

    @Test func timesOut() async throws {
        let live = try LiveServer()
        let path = live.path
        try await onThread {
            let client = try RPCClient(socketPath: path, timeout: .milliseconds(200))
            let start = ContinuousClock.now
            #expect(throws: RPCClientError.timedOut) { try client.call("sleep", params: ["ms": 30_000]) }
            #expect(ContinuousClock.now - start < .seconds(15))
            #expect(throws: RPCClientError.timedOut) { try client.nextMessage(timeout: .milliseconds(50)) }
        }
        try await live.stop()
    }
}
