import BrokerCore
import BrowserLoginProtocol
import Synchronization

/// Each client's current public session view and its JSON form, behind a
/// lock: written by the engine inside each store write, read by `session.get`
/// from any thread. The JSON is made once per change (through the same
/// `Codable` encoding as before), not once per call.
public final class SessionBoard: Sendable {
    /// An object: `session.get` takes it out of the lock with one reference, not a copy of each member.
    public final class Entry: Sendable {
        public let view: SessionView
        public let json: JSONValue
        /// `json.serialized()`, for the RPC fast path.
        public let bytes: [UInt8]

        init(view: SessionView, json: JSONValue, bytes: [UInt8]) {
            self.view = view
            self.json = json
            self.bytes = bytes
        }
    }

    private let entries = Mutex<[String: Entry]>([:])

    public init() {}

    func set(_ view: SessionView) {
        guard let json = try? JSONValue(encoding: view) else {
            remove(view.client)
            return
        }
        entries.withLock { $0[view.client] = Entry(view: view, json: json, bytes: json.serialized()) }
    }

    func remove(_ client: String) { _ = entries.withLock { $0.removeValue(forKey: client) } }

    public func entry(_ client: String) -> Entry? { entries.withLock { $0[client] } }

    public func view(_ client: String) -> SessionView? { entry(client)?.view }
}
