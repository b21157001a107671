import BrokerCore
import BrokerOAuth
import BrokerStore
import BrowserLoginProtocol
import Engine
import Synchronization

/// Standard providers' metadata in the state database (docs/providers.md):
/// its own connection, opened on first use, because providers read and write
/// it from their own tasks rather than from the engine actor.
///
/// `@unchecked Sendable`: `store` is read and written only while `lock` is
/// held, so one caller at a time uses the connection.
final class StoreMetadataCache: ProviderMetadataCache, @unchecked Sendable {
    let path: String
    private let lock = Mutex<Void>(())
    private var store: BrokerStore?

    init(path: String) { self.path = path }

    private func withStore<T>(_ body: (BrokerStore) throws -> T?) -> T? {
        lock.withLock { _ in
            if store == nil { store = try? BrokerStore(path: path) }
            guard let store else { return nil }
            return try? body(store)
        }
    }

    func load(issuer: String) -> (json: String, fetchedAt: Timestamp)? {
        withStore { try $0.providerMetadata(issuer: issuer) }
    }

    func save(issuer: String, json: String, fetchedAt: Timestamp) {
        // A cache: a write that fails (a full disk) only means a fetch next time.
        _ = withStore { try $0.saveProviderMetadata(issuer: issuer, json: json, fetchedAt: fetchedAt) }
    }
}
