import BrokerRPC
import Foundation
import Synchronization

/// One blocking connection to the broker, handed between the pool and the
/// thread that runs a call on it.
// Safe (@unchecked Sendable): it has one owner at a time — the pool, under
// its lock, or the one call that took it out — and is never shared.
final class Connection: @unchecked Sendable {
    let rpc: RPCClient
    init(_ rpc: RPCClient) { self.rpc = rpc }

    /// False once the broker closed it (restarted, or closed it to make
    /// room at its connection limit): a zero-wait read sees the end of the
    /// stream, or the `BUSY` notice sent before it.
    var isOpen: Bool {
        do throws(RPCClientError) {
            _ = try rpc.nextMessage(timeout: .zero)
            return false
        } catch .timedOut {
            return true
        } catch {
            return false
        }
    }
}

/// Idle connections kept for the next calls. A call takes one (or opens a
/// new one), so calls never wait for each other: the broker handles each
/// connection's requests concurrently, and each call here has a connection
/// of its own for as long as it runs.
final class ConnectionPool: Sendable {
    /// Connections kept idle; more are opened while more calls run at once.
    static let maxIdle = 4
    /// How long a call waits for its answer beyond the broker's own limit.
    static let answerMargin: Duration = .seconds(30)

    let path: String?
    private let idle = Mutex<[Connection]>([])

    init(path: String?) { self.path = path }

    /// Opens a connection (blocking).
    func open() throws(BrowserLoginError) -> Connection {
        guard let path else {
            throw BrowserLoginError(
                .noSocket,
                "the broker's socket cannot be found: neither BROWSER_LOGIN_SOCKET nor XDG_RUNTIME_DIR is set")
        }
        do {
            return Connection(try RPCClient(socketPath: path, timeout: .seconds(130)))
        } catch {
            throw BrowserLoginError(connecting: error, path: path)
        }
    }

    /// Calls `method` on an idle or new connection (blocking: run it on a thread of its own).
    func call(_ method: String, _ params: JSONValue?, timeout: Duration) -> Result<JSONValue, BrowserLoginError> {
        var reused: Connection?
        while let candidate = idle.withLock({ $0.popLast() }) {
            if candidate.isOpen {
                reused = candidate
                break
            }
        }
        let connection: Connection
        if let reused {
            connection = reused
        } else {
            do throws(BrowserLoginError) { connection = try open() } catch { return .failure(error) }
        }
        do {
            let value = try connection.rpc.call(method, params: params, timeout: timeout)
            release(connection)
            return .success(value)
        } catch let error as RPCError {
            // After `BUSY` the broker may have closed the connection (at its connection limit).
            if error.applicationCode != BrowserLoginError.Code.busy.rawValue { release(connection) }
            return .failure(BrowserLoginError(error))
        } catch let error as RPCClientError {
            // The connection may still carry the late answer: it is not reused.
            return .failure(BrowserLoginError(calling: error))
        } catch {
            return .failure(.unreadable(error))
        }
    }

    private func release(_ connection: Connection) {
        idle.withLock { if $0.count < Self.maxIdle { $0.append(connection) } }
    }
}

/// The outcome of a blocking call, delivered once: by the thread that ran
/// it, or by the task's cancellation, whichever comes first.
private final class Outcome<T: Sendable>: Sendable {
    private enum State {
        case pending
        case waiting(CheckedContinuation<Result<T, BrowserLoginError>, Never>)
        case resolved(Result<T, BrowserLoginError>)
        case delivered
    }
    private let state = Mutex<State>(.pending)

    /// Parks the caller; false when the outcome was already there (and delivered).
    func wait(_ continuation: CheckedContinuation<Result<T, BrowserLoginError>, Never>) -> Bool {
        let resolved: Result<T, BrowserLoginError>? = state.withLock { state in
            guard case .resolved(let result) = state else {
                state = .waiting(continuation)
                return nil
            }
            state = .delivered
            return result
        }
        guard let resolved else { return true }
        continuation.resume(returning: resolved)
        return false
    }

    func resolve(_ result: Result<T, BrowserLoginError>) {
        let continuation: CheckedContinuation<Result<T, BrowserLoginError>, Never>? = state.withLock { state in
            switch state {
            case .pending:
                state = .resolved(result)
                return nil
            case .waiting(let continuation):
                state = .delivered
                return continuation
            case .resolved, .delivered:
                return nil
            }
        }
        continuation?.resume(returning: result)
    }
}

/// Runs blocking `work` on a thread of its own, never on one of Swift's
/// cooperative threads. Cancelling the task answers `CANCELLED` at once; the
/// thread finishes its call in the background and its answer is dropped.
func runBlocking<T: Sendable>(
    _ work: @escaping @Sendable () -> Result<T, BrowserLoginError>
) async throws(BrowserLoginError) -> T {
    let outcome = Outcome<T>()
    let result = await withTaskCancellationHandler {
        await withCheckedContinuation { continuation in
            if outcome.wait(continuation) {
                Thread { outcome.resolve(work()) }.start()
            }
        }
    } onCancel: {
        outcome.resolve(.failure(BrowserLoginError(.cancelled, "the call was cancelled")))
    }
    return try result.get()
}
