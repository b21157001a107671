import BrokerRPC
import BrowserLoginAPI
import Foundation
import Synchronization

/// A change the broker announces (docs/rpc.md "Notifications").
public enum BrokerEvent: Sendable, Equatable {
    /// `session.changed`: a client's session, as it now is.
    case sessionChanged(SessionView)
    /// `login.changed`: an attempt, as it now is.
    case loginChanged(AttemptView)

    /// The client it concerns.
    public var client: String {
        switch self {
        case .sessionChanged(let session): session.client
        case .loginChanged(let attempt): attempt.client
        }
    }
}

/// A notification as it came: for the project's CLI (`watch --json`).
package struct RawNotification: Sendable {
    package var method: String
    package var params: JSONValue
}

extension BrowserLoginClient {
    /// The broker's events for `clients` (nil: every client this program may
    /// use), in the order the changes were committed, on a connection of
    /// their own. The subscription is in place when this returns, so no
    /// change after it is missed. The stream ends, and the connection
    /// closes, when the stream is dropped or its task cancelled; it throws
    /// `CONNECTION_LOST` when the broker goes away.
    public func events(clients: [String]? = nil) async throws(BrowserLoginError)
        -> AsyncThrowingStream<BrokerEvent, any Error>
    {
        try await subscribe(clients: clients) { method, params throws(BrowserLoginError) -> BrokerEvent? in
            do {
                switch RPCNotification(rawValue: method) {
                case .sessionChanged?: return .sessionChanged(try params.decode(SessionChanged.self).session)
                case .loginChanged?: return .loginChanged(try params.decode(LoginChanged.self).attempt)
                case nil: return nil
                }
            } catch {
                throw .unreadable(error)
            }
        }
    }

    /// The events as the broker sent them.
    package func rawEvents(clients: [String]? = nil) async throws(BrowserLoginError)
        -> AsyncThrowingStream<RawNotification, any Error>
    {
        try await subscribe(clients: clients) { method, params in RawNotification(method: method, params: params) }
    }

    private func subscribe<Event: Sendable>(
        clients: [String]?, _ transform: @escaping @Sendable (String, JSONValue) throws(BrowserLoginError) -> Event?
    ) async throws(BrowserLoginError) -> AsyncThrowingStream<Event, any Error> {
        let connection = try await openConnection()
        let params: JSONValue
        do { params = try JSONValue(encoding: SubscribeParams(clients: clients)) } catch { throw .unreadable(error) }
        try await runBlocking { () -> Result<Void, BrowserLoginError> in
            do {
                _ = try connection.rpc.call(RPCMethod.eventsSubscribe.rawValue, params: params)
                return .success(())
            } catch let error as RPCError {
                return .failure(BrowserLoginError(error))
            } catch let error as RPCClientError {
                return .failure(BrowserLoginError(calling: error))
            } catch {
                return .failure(.unreadable(error))
            }
        }
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Event.self)
        let stop = StopFlag()
        continuation.onTermination = { _ in stop.set() }
        // The reader checks the flag between short waits, so a dropped
        // stream closes its connection within half a second.
        Thread {
            defer { connection.rpc.close() }
            while !stop.isSet {
                let message: RPCClientMessage
                do throws(RPCClientError) {
                    message = try connection.rpc.nextMessage(timeout: .milliseconds(500))
                } catch .timedOut {
                    continue
                } catch {
                    continuation.finish(throwing: BrowserLoginError(calling: error))
                    return
                }
                guard case .notification(let method, let params) = message else { continue }
                do throws(BrowserLoginError) {
                    if let event = try transform(method, params ?? .null) { continuation.yield(event) }
                } catch {
                    continuation.finish(throwing: error)
                    return
                }
            }
            continuation.finish()
        }.start()
        return stream
    }
}

/// Set once, when a stream's consumer goes away.
private final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}
