import BrokerCore
import BrowserLoginProtocol
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// An `HTTPTransport` that hands each request to the HTTP helper,
/// `browser-login-http`: a child process that runs libcurl (the broker does
/// not link it), started on the first request and ended after `idleSeconds`
/// without one. The daemon that stays resident all day thus carries no HTTP
/// or TLS stack, and no byte a server sends is parsed by libcurl in the
/// process that holds the keyring's session and the state database.
///
/// What a request may do is the helper's `CurlTransport`'s: no redirect, no
/// cookie, no retry; state-changing requests on a fresh connection.
/// - The helper's answer is the request's answer, including its error.
/// - If the helper dies or is killed while a request is in flight, that request
///   fails with `noAnswer` (it may have been sent); one whose frame could not
///   be written fails with `notSent`. The next request starts a new helper.
/// - Cancelling the sending task sends a cancellation; the helper then answers
///   as libcurl's abort ends (`notSent` before any byte was written, else `noAnswer`).
/// - Proxies: with a `proxyLookup`, the broker names each request's proxy
///   (the lookup may block: it runs on a queue of its own); without one,
///   libcurl reads the environment in the helper, which inherits the broker's.
public final class HelperTransport: HTTPTransport {
    public typealias ProxyLookup = @Sendable (_ origin: String) -> String?

    /// At most this many requests in flight at once (each an RPC call's
    /// work; more fail with `notSent` rather than queue without bound).
    public static let maximumInFlight = 1024
    /// A helper that does not take a frame within this time is killed.
    static let writeTimeoutSeconds = 10

    /// The helper's path, or nil when it was not found (then every request fails, saying so).
    public let program: String?
    private let searched: [String]
    private let environment: [String: String]
    private let idleSeconds: Int
    private let proxyLookup: ProxyLookup?
    /// Where the proxy look-ups run (they may block): up to 4 threads of their own, started as
    /// look-ups need them, shared by every transport of the process.
    private static let lookupPool = ThreadPool(name: "bl-proxy", maximumThreads: 4)
    private let state = Mutex(State())
    private let log: @Sendable (_ message: String, _ metadata: [String: String]) -> Void

    /// `program`: the helper's path; nil looks next to this executable (see `locate`).
    public init(
        program: String? = nil, environment: [String: String], idleSeconds: Int = 10, proxyLookup: ProxyLookup? = nil,
        log: @escaping @Sendable (_ message: String, _ metadata: [String: String]) -> Void = { _, _ in }
    ) {
        let candidates = program.map { [$0] } ?? Self.candidates()
        searched = candidates
        self.program = candidates.first { access($0, X_OK) == 0 }
        self.environment = environment
        self.idleSeconds = max(1, idleSeconds)
        self.proxyLookup = proxyLookup
        self.log = log
    }

    /// Where the helper is looked for, in order: `../libexec/browser-login/`
    /// beside this executable's directory (an installed package), then this
    /// executable's directory (a build tree).
    public static func candidates() -> [String] {
        guard let executable = FileSystem.symbolicLinkTarget("/proc/self/exe") else { return [] }
        let directory = FileSystem.parent(of: executable)
        return [
            FileSystem.parent(of: directory) + "/libexec/browser-login/browser-login-http",
            directory + "/browser-login-http",
        ]
    }

    /// The helper's process id while one runs (tests, diagnostics).
    public var helperProcess: pid_t? { state.withLock { $0.helper?.pid } }

    public func send(_ request: HTTPRequest) async throws(HTTPTransportError) -> HTTPResponse {
        let proxy = await proxyChoice(for: request.url)
        let ticket = Ticket()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<HTTPResponse, HTTPTransportError>, Never>) in
                start(request, proxy: proxy, ticket: ticket, continuation: continuation)
            }
        } onCancel: {
            if let sent = ticket.cancel() { sent.helper.write(HTTPHelperWire.encode(.cancel(id: sent.id))) }
        }
        return try result.get()
    }

    /// What the broker decides about the request's proxy (loopback: never one).
    private func proxyChoice(for url: String) async -> HTTPHelperWire.Proxy {
        guard let proxyLookup, let parts = URLParts(splitting: url), let authority = parts.authority,
            !Self.isLoopback(authority: authority)
        else { return .environment }
        let origin = parts.scheme.lowercased() + "://" + authority
        let queue = Self.lookupPool
        return await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: proxyLookup(origin).map { .url($0) } ?? .direct) }
        }
    }

    /// A cheap pre-check that spares the desktop's proxy lookup for loopback
    /// hosts (the helper keeps them off proxies in any case).
    static func isLoopback(authority: String) -> Bool {
        var host = Substring(authority)
        if let at = host.lastIndex(of: "@") { host = host[host.index(after: at)...] }
        if host.hasPrefix("[") {
            return host.hasPrefix("[::1]")
        }
        if let colon = host.firstIndex(of: ":") { host = host[..<colon] }
        let name = host.lowercased()
        return name == "localhost" || name.hasSuffix(".localhost") || name.hasPrefix("127.")
    }

    private func start(
        _ request: HTTPRequest, proxy: HTTPHelperWire.Proxy, ticket: Ticket,
        continuation: CheckedContinuation<Result<HTTPResponse, HTTPTransportError>, Never>
    ) {
        guard let program else {
            continuation.resume(
                returning: .failure(
                    .notSent(
                        "the HTTP helper browser-login-http is not installed (looked for \(searched.joined(separator: ", "))); reinstall browser-login"
                    )))
            return
        }
        let outcome = state.withLock { state -> Result<(Helper, UInt64), HTTPTransportError> in
            guard state.inFlight < Self.maximumInFlight else {
                return .failure(.notSent("too many HTTP requests in flight; try again"))
            }
            let helper: Helper
            if let running = state.helper {
                helper = running
            } else {
                guard let started = Helper.start(program: program, environment: environment) else {
                    return .failure(.notSent("the HTTP helper \(program) could not be started"))
                }
                helper = started
                state.helper = helper
                PosixThread.detach(name: "bl-http-reader") { [weak self] in
                    if let self { self.read(helper) } else { helper.drain() }
                }
            }
            state.nextID += 1
            let id = state.nextID
            state.pending[id] = Pending(helper: helper, continuation: continuation)
            state.inFlight += 1
            state.idleGeneration += 1
            return .success((helper, id))
        }
        guard case .success(let (helper, id)) = outcome else {
            if case .failure(let error) = outcome { continuation.resume(returning: .failure(error)) }
            return
        }
        if !helper.write(HTTPHelperWire.encode(.request(id: id, request, proxy: proxy))) {
            // Not written whole: the helper never saw it, so it was not sent.
            finish(id, .failure(.notSent("the HTTP helper did not take the request; it was not sent")))
            retire(helper, kill: true)
            return
        }
        if ticket.register(helper: helper, id: id) {
            helper.write(HTTPHelperWire.encode(.cancel(id: id)))
        }
    }

    /// Resumes request `id`'s caller, once; schedules the idle stop when none is left.
    private func finish(_ id: UInt64, _ result: Result<HTTPResponse, HTTPTransportError>) {
        let (pending, generation) = state.withLock { state -> (Pending?, UInt64?) in
            guard let pending = state.pending.removeValue(forKey: id) else { return (nil, nil) }
            state.inFlight -= 1
            state.idleGeneration += 1
            return (pending, state.inFlight == 0 ? state.idleGeneration : nil)
        }
        pending?.continuation.resume(returning: result)
        if let generation { scheduleIdleStop(generation) }
    }

    private func scheduleIdleStop(_ generation: UInt64) {
        ThreadPool.shared.asyncAfter(.seconds(idleSeconds)) { [weak self] in
            guard let self else { return }
            let idle = self.state.withLock { state -> Helper? in
                guard state.idleGeneration == generation, state.inFlight == 0, let helper = state.helper else { return nil }
                state.helper = nil
                return helper
            }
            // Its reader sees the end of the stream once the helper has exited, and reaps it.
            idle?.closeForWriting()
        }
    }

    /// Takes `helper` out of service: no new request goes to it; `kill` ends it now.
    private func retire(_ helper: Helper, kill: Bool) {

        state.withLock { state in
            if state.helper === helper { state.helper = nil }
        }
        if kill { helper.kill() } else { helper.closeForWriting() }
    }

    /// The helper's answers, until it closes its end (on its reader thread); then
    /// fails what it still owed, and reaps it.
    private func read(_ helper: Helper) {
        var stream = HTTPHelperWire.Stream()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        reading: while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(helper.fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            buffer.withUnsafeBytes { stream.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            while let payload = stream.next() {
                switch HTTPHelperWire.decode(payload) {
                case .response(let id, let response): finish(id, .success(response))
                case .failure(let id, let error): finish(id, .failure(error))
                default:
                    log("the HTTP helper sent a frame that is not an answer; restarting it", [:])
                    break reading
                }
            }
            if stream.broken {
                log("the HTTP helper sent an oversized frame; restarting it", [:])
                break
            }
        }
        retire(helper, kill: true)
        let owed = state.withLock { state in state.pending.filter { $0.value.helper === helper }.map(\.key) }
        for id in owed {
            finish(id, .failure(.noAnswer("the HTTP helper stopped while the request was in flight; it may have been sent")))
        }
        let status = helper.reap()
        if status != 0, status != 128 + SIGKILL {
            log("the HTTP helper ended with a failure", ["status": "\(status)"])
        }
    }

    private struct State {
        var helper: Helper?
        var nextID: UInt64 = 0
        var pending: [UInt64: Pending] = [:]
        var inFlight = 0
        var idleGeneration: UInt64 = 0
    }

    private struct Pending {
        let helper: Helper
        let continuation: CheckedContinuation<Result<HTTPResponse, HTTPTransportError>, Never>
    }
}

/// Which helper and id a request went to, and whether its task was cancelled
/// before that was known: the cancellation is sent by whichever comes second.
private final class Ticket: Sendable {
    private struct Fields {
        var sent: (helper: Helper, id: UInt64)?
        var cancelled = false
    }
    private let fields = Mutex(Fields())

    /// The request went out; true when it had already been cancelled (send the cancellation now).
    func register(helper: Helper, id: UInt64) -> Bool {
        fields.withLock {
            $0.sent = (helper, id)
            return $0.cancelled
        }
    }

    /// The task was cancelled: where to send the cancellation, if the request already went out.
    func cancel() -> (helper: Helper, id: UInt64)? {
        fields.withLock {
            $0.cancelled = true
            return $0.sent
        }
    }
}

/// One running helper: its process and the broker's end of the socket pair.
final class Helper: Sendable {
    let process: Subprocess
    let fd: Int32
    var pid: pid_t { process.pid }
    /// Frames are written whole, one writer at a time (the reader never takes this lock).
    private let writeLock = Mutex(false)

    private init(process: Subprocess, fd: Int32) {
        self.process = process
        self.fd = fd
    }

    /// Starts `program` with one end of a socket pair as its standard input and output.
    static func start(program: String, environment: [String: String]) -> Helper? {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            return nil
        }
        var timeout = timeval(tv_sec: HelperTransport.writeTimeoutSeconds, tv_usec: 0)
        _ = setsockopt(fds[0], SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let child = Subprocess.spawn(
            program: program, arguments: [], environment: environment, stdin: fds[1], stdout: fds[1],
            inheritStandardError: true)
        close(fds[1])
        guard let child else {
            close(fds[0])
            return nil
        }
        return Helper(process: child, fd: fds[0])
    }

    /// Writes one frame whole; false if the helper did not take all of it.
    @discardableResult
    func write(_ frame: [UInt8]) -> Bool {
        writeLock.withLock { _ in
            var offset = 0
            while offset < frame.count {
                let n = frame[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
    }

    /// No more requests: the helper reads the end of its input and exits.
    func closeForWriting() { _ = shutdown(fd, Int32(SHUT_WR)) }

    func kill() { _ = Glibc.kill(pid, SIGKILL) }

    /// Without a transport left to read for: end it and reap it.
    func drain() {
        kill()
        _ = reap()
    }

    /// Waits for the process (it has closed its end, or was killed), closes the socket: its exit status.
    func reap() -> Int32 {
        let status = process.wait()
        close(fd)
        return status
    }
}
