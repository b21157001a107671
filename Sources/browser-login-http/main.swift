// browser-login-http: the broker's HTTP helper. browser-login-broker starts it
// on its first HTTP request, with one end of a socket pair as standard input
// and output, and closes that socket after a few idle seconds; the helper then
// exits. It runs each request with libcurl (BrokerCurl's CurlTransport: no
// redirect, no cookie, no retry) and writes the answer back
// (BrokerHTTP/HTTPHelperWire.swift has the frames). It writes nothing else
// anywhere: requests carry tokens.
import BrokerCore
import BrokerCurl
import BrokerHTTP
import CurlSupport
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

if CommandLine.arguments.count > 1 {
    let usage = """
        browser-login-http — the broker's HTTP helper (not for use by hand)

        browser-login-broker starts it when it needs to reach a login server or
        an OAuth provider, and ends it when idle. It reads requests on standard
        input and writes answers to standard output, in the broker's own framing.

        """
    let wanted = CommandLine.arguments.count == 2 && ["--help", "-h"].contains(CommandLine.arguments[1])
    let bytes = Array(usage.utf8)
    _ = bytes.withUnsafeBytes { write(wanted ? 1 : 2, $0.baseAddress, $0.count) }
    exit(wanted ? 0 : 64)
}

signal(SIGPIPE, SIG_IGN)

/// Answers go out whole, one at a time.
final class Output: Sendable {
    private let lock = Mutex(())

    func write(_ frame: [UInt8]) {
        lock.withLock { _ in
            var offset = 0
            while offset < frame.count {
                let n = frame[offset...].withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                // The broker is gone: nobody wants the answers.
                if n <= 0 { exit(0) }
                offset += n
            }
        }
    }
}

func curlProxy(_ proxy: HTTPHelperWire.Proxy) -> CurlProxy {
    switch proxy {
    case .environment: .environment
    case .direct: .direct
    case .url(let url): .url(url)
    }
}

let transport = CurlTransport()
let output = Output()

/// The transfers in flight, by request id: each one's cancellation, for the
/// broker's `cancel` frame. The broker keeps at most `maximumInFlight` in
/// flight; one it gave up on may still be ending here, hence twice that.
/// Each transfer runs on a CurlTransport worker, which writes its answer as
/// soon as libcurl is done (no task between the read loop and the answer).
final class Transfers: Sendable {
    private let running = Mutex<[UInt64: CancellationFlag]>([:])
    private let limit = 2 * HelperTransport.maximumInFlight

    /// Starts request `id`; false when it was refused (too many in flight, or an id in flight already).
    func start(_ id: UInt64, _ request: HTTPRequest, proxy: HTTPHelperWire.Proxy) -> Bool {
        let cancellation = CancellationFlag()
        let taken = running.withLock { running -> Bool in
            guard running.count < limit, running[id] == nil else { return false }
            running[id] = cancellation
            return true
        }
        guard taken else { return false }
        transport.start(request, proxy: curlProxy(proxy), cancellation: cancellation) { [self] result in
            running.withLock { _ = $0.removeValue(forKey: id) }
            let frame: HTTPHelperWire.Frame =
                switch result {
                case .success(let response): .response(id: id, response)
                case .failure(let error): .failure(id: id, error)
                }
            output.write(HTTPHelperWire.encode(frame))
        }
        return true
    }

    /// The broker gave up on request `id`: its transfer is aborted (it still answers).
    func cancel(_ id: UInt64) {
        running.withLock { $0[id] }?.cancel()
    }
}

let transfers = Transfers()
var stream = HTTPHelperWire.Stream()
var buffer = [UInt8](repeating: 0, count: 64 * 1024)
while true {
    let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
    if count < 0, errno == EINTR { continue }
    // The broker closed its end (idle, or it exited): nothing is left to answer.
    if count <= 0 { exit(0) }
    buffer.withUnsafeBytes { stream.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    while let payload = stream.next() {
        switch HTTPHelperWire.decode(payload) {
        case .request(let id, let request, let proxy):
            if !transfers.start(id, request, proxy: proxy) {
                let refused = HTTPTransportError.notSent("the HTTP helper has too many requests in flight; try again")
                output.write(HTTPHelperWire.encode(.failure(id: id, refused)))
            }
        case .cancel(let id):
            transfers.cancel(id)
        default:
            // Not the broker's framing: a broken or foreign peer.
            exit(65)
        }
    }
    if stream.broken { exit(65) }
}
