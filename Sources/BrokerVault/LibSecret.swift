import BrokerCore
import CSecret

// Every call into libsecret goes through this file. Each operation blocks
// its caller until it ends (a keyring prompt may keep it waiting for the
// user), so it runs only on the vault's own queue (`SecretServiceVault`).
//
// libsecret's `_sync` functions are not used. Each of them builds a private
// GLib main context for the one call and drops it afterwards, while GDBus
// keeps a reference to that context for the signal subscriptions of the
// proxies made during the call; what GDBus queues there is never dispatched,
// and about 1 KiB is lost per call (measured: docs/performance.md). Instead,
// every call is libsecret's async variant, started with the vault's one
// long-lived context as the thread-default context and waited for by
// iterating that context, so everything GDBus schedules for the proxies is
// eventually run and freed.

/// The attribute names of the broker's schema (`bl_broker_schema`).
public let schemaAttributeNames = ["client", "attempt", "kind"]

/// A GObject reference with one owner, released in `deinit`.
final class GObjectRef<T> {
    let pointer: UnsafeMutablePointer<T>
    init(taking pointer: UnsafeMutablePointer<T>) { self.pointer = pointer }
    deinit { g_object_unref(UnsafeMutableRawPointer(pointer)) }
}

/// The attributes as a GHashTable that owns its strings; one owner.
final class AttributeTable {
    let table: OpaquePointer

    init(_ attributes: [String: String]) {
        table = bl_secret_attributes_new()
        for name in schemaAttributeNames {
            bl_secret_attributes_insert(table, name, attributes[name] ?? "")
        }
    }

    deinit { g_hash_table_unref(table) }
}

/// A GError taken over from a libsecret call; freed here, once.
struct CapturedError: Sendable {
    enum Kind: Sendable { case unavailable, locked, other }
    let kind: Kind
    let detail: String

    /// Takes ownership of `error` and frees it.
    init(taking error: UnsafeMutablePointer<GError>, whileConnecting: Bool) {
        defer { g_error_free(error) }
        let domain = error.pointee.domain
        let code = error.pointee.code
        detail = error.pointee.message.map { String(cString: $0) } ?? "unknown error"
        if whileConnecting {
            kind = .unavailable
        } else if domain == secret_error_get_quark() && code == Int32(SECRET_ERROR_IS_LOCKED.rawValue) {
            kind = .locked
        } else if domain == g_dbus_error_quark() && CapturedError.missingService.contains(code) {
            kind = .unavailable
        } else if domain == g_io_error_quark() && CapturedError.lostConnection.contains(code) {
            kind = .unavailable
        } else if detail.contains("is locked") || detail.contains("locked collection") {
            kind = .locked
        } else {
            kind = .other
        }
    }

    static let missingService: Set<Int32> = [
        G_DBUS_ERROR_SERVICE_UNKNOWN, G_DBUS_ERROR_NAME_HAS_NO_OWNER, G_DBUS_ERROR_NO_SERVER,
        G_DBUS_ERROR_DISCONNECTED, G_DBUS_ERROR_SPAWN_EXEC_FAILED, G_DBUS_ERROR_SPAWN_FAILED,
        G_DBUS_ERROR_SPAWN_CHILD_EXITED, G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND, G_DBUS_ERROR_UNKNOWN_OBJECT,
        G_DBUS_ERROR_UNKNOWN_INTERFACE, G_DBUS_ERROR_UNKNOWN_METHOD, G_DBUS_ERROR_ADDRESS_IN_USE,
    ].reduce(into: []) { $0.insert(Int32($1.rawValue)) }

    static let lostConnection: Set<Int32> = [G_IO_ERROR_CLOSED, G_IO_ERROR_NOT_CONNECTED, G_IO_ERROR_NOT_FOUND]
        .reduce(into: []) { $0.insert(Int32($1.rawValue)) }

    var vaultError: VaultError {
        switch kind {
        case .unavailable: .unavailable(VaultMessages.unavailable(detail))
        case .locked: .locked(VaultMessages.locked)
        case .other: .failed(VaultMessages.failed(detail))
        }
    }
}

/// The vault's messages; each says how to fix the problem.
public enum VaultMessages {
    public static func unavailable(_ detail: String) -> String {
        "The Secret Service is not available (\(detail)). Start gnome-keyring-daemon or another Secret Service "
            + "provider (KeePassXC, KWallet) in this desktop session, and check that DBUS_SESSION_BUS_ADDRESS "
            + "names the session bus."
    }
    public static let locked =
        "The login keyring is locked. Unlock it (for example with Seahorse, or with `secret-tool lookup` in a "
        + "terminal that can show the unlock prompt) and try again."
    public static func failed(_ detail: String) -> String {
        "The Secret Service failed (\(detail)). Try again; if it keeps failing, check gnome-keyring-daemon "
            + "(journalctl --user) or restart the keyring."
    }
    static let noDefaultCollection =
        "The Secret Service has no default keyring. Create one and make it the default (Seahorse: "
        + "\"+\" → Password keyring, then \"Set as default\") and try again."
    static let itemUnreadable = "The keyring item could not be read. Unlock the login keyring and try again."
}

/// Synchronous libsecret operations. Only ever used on the vault's queue.
enum LibSecret {
    private static var schema: UnsafePointer<SecretSchema> { bl_broker_schema() }

    /// The vault's main context: every libsecret call is started and waited
    /// for on it. Safe without isolation: it is created once and only used on
    /// the vault's serial queue, one call at a time (GLib's own locking covers
    /// the GDBus worker thread that queues replies on it).
    nonisolated(unsafe) private static let context: OpaquePointer = g_main_context_new()

    /// Starts one async libsecret call, `start(callback, userData)`, with the
    /// vault's context as the thread-default one, iterates the context until
    /// the call ends, and hands its result to `finish`.
    private static func wait<T>(
        _ start: (GAsyncReadyCallback, gpointer) -> Void, finish: (OpaquePointer) -> T
    ) -> T {
        g_main_context_push_thread_default(context)
        defer { g_main_context_pop_thread_default(context) }
        var slot: OpaquePointer? = nil
        let result: OpaquePointer = withUnsafeMutablePointer(to: &slot) { pointer in
            start(bl_secret_keep_result, UnsafeMutableRawPointer(pointer))
            return bl_secret_wait(context, pointer)
        }
        defer { g_object_unref(UnsafeMutableRawPointer(result)) }
        return finish(result)
    }

    /// Registers GLib's types for libsecret on this thread (see `bl_secret_prepare_types`).
    static func prepareTypes() { bl_secret_prepare_types() }

    /// The process's shared Secret Service connection, with a session open.
    static func connect() throws(VaultError) -> GObjectRef<SecretService> {
        var error: UnsafeMutablePointer<GError>? = nil
        let service = wait({ secret_service_get(SECRET_SERVICE_OPEN_SESSION, nil, $0, $1) }) {
            secret_service_get_finish($0, &error)
        }
        if let error { throw CapturedError(taking: error, whileConnecting: true).vaultError }
        guard let service else {
            throw .unavailable(VaultMessages.unavailable("no Secret Service answered"))
        }
        if bl_secret_connection_closed(service) != 0 {
            // The cached service lives on a bus that died: drop it; the next call connects afresh.
            g_object_unref(UnsafeMutableRawPointer(service))
            secret_service_disconnect()
            throw .unavailable(VaultMessages.unavailable("the session bus connection closed"))
        }
        bl_secret_keep_running_on_close(service)
        return GObjectRef(taking: service)
    }

    /// The default collection, or nil when there is none.
    static func defaultCollection(_ service: GObjectRef<SecretService>) throws(VaultError)
        -> GObjectRef<SecretCollection>?
    {
        var error: UnsafeMutablePointer<GError>? = nil
        let collection = wait({ secret_collection_for_alias(service.pointer, "default", SECRET_COLLECTION_NONE, nil, $0, $1) }) {
            secret_collection_for_alias_finish($0, &error)
        }
        if let error { throw CapturedError(taking: error, whileConnecting: false).vaultError }
        return collection.map { GObjectRef(taking: $0) }
    }

    static func isLocked(_ collection: GObjectRef<SecretCollection>) -> Bool {
        secret_collection_get_locked(collection.pointer) != 0
    }

    /// Asks the service to unlock the collection (a prompt on a desktop,
    /// which blocks until the user answers); true when it is unlocked.
    static func unlock(_ collection: GObjectRef<SecretCollection>, service: GObjectRef<SecretService>)
        throws(VaultError) -> Bool
    {
        var error: UnsafeMutablePointer<GError>? = nil
        let objects = g_list_append(nil, UnsafeMutableRawPointer(collection.pointer))
        defer { g_list_free(objects) }  // the list only borrows `collection`
        let count = wait({ secret_service_unlock(service.pointer, objects, nil, $0, $1) }) {
            secret_service_unlock_finish(service.pointer, $0, nil, &error)
        }
        if let error { throw CapturedError(taking: error, whileConnecting: false).vaultError }
        return count > 0
    }

    /// Runs `body` with the shared connection. When a call fails other than
    /// for a locked keyring (the keyring restarted, the bus went away),
    /// libsecret's cached connection is dropped so that the next call
    /// connects afresh.
    static func withService<T>(_ body: (GObjectRef<SecretService>) throws(VaultError) -> T) throws(VaultError) -> T {
        do {
            return try body(try connect())
        } catch {
            // Anything but a locked keyring may mean the service behind the
            // cached proxy is gone or was replaced (a restarted keyring keeps
            // the bus name but not the proxy's session): connect afresh next time.
            if case .locked = error {} else { secret_service_disconnect() }
            throw error
        }
    }

    static func store(_ secret: [UInt8], label: String, attributes: [String: String]) throws(VaultError) {
        try withService { service throws(VaultError) in
            try requireUnlockedDefaultCollection(service)
            let table = AttributeTable(attributes)
            // Binary: the value is copied by secret_value_new, with its length, so NUL bytes are kept.
            // An empty secret still needs a valid pointer (with length 0).
            let storage = secret.isEmpty ? [0] : secret
            let created: OpaquePointer? = storage.withUnsafeBufferPointer { bytes in
                bytes.withMemoryRebound(to: CChar.self) { chars in
                    secret_value_new(chars.baseAddress, secret.count, "application/octet-stream")
                }
            }
            guard let value = created else { throw .failed(VaultMessages.failed("the secret could not be copied")) }
            defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
            // The service-level store (CreateItem with replace) makes no proxy for
            // the new item: a `SecretItem` made right after CreateItem, while the
            // keyring announces the item, leaks its D-Bus messages (measured:
            // docs/performance.md).
            var error: UnsafeMutablePointer<GError>? = nil
            let stored = wait({
                secret_service_store(service.pointer, schema, table.table, "default", label, value, nil, $0, $1)
            }) { secret_service_store_finish(service.pointer, $0, &error) }
            if let error { throw CapturedError(taking: error, whileConnecting: false).vaultError }
            guard stored != 0 else { throw .failed(VaultMessages.failed("the item was not created")) }
        }
    }

    /// Checks that there is a default collection and unlocks it when it is
    /// locked (a prompt on a desktop). The collection's proxy is released
    /// before anything is stored in it.
    private static func requireUnlockedDefaultCollection(_ service: GObjectRef<SecretService>) throws(VaultError) {
        guard let collection = try defaultCollection(service) else {
            throw .failed(VaultMessages.noDefaultCollection)
        }
        if isLocked(collection) {
            guard try unlock(collection, service: service) else { throw .locked(VaultMessages.locked) }
        }
    }

    /// Throws unless there is a default collection and it is unlocked (no prompt).
    private static func requireReadableDefaultCollection(_ service: GObjectRef<SecretService>) throws(VaultError) {
        guard let collection = try defaultCollection(service) else {
            throw .unavailable(VaultMessages.noDefaultCollection)
        }
        if isLocked(collection) { throw .locked(VaultMessages.locked) }
    }

    /// The items matching all three attributes exactly, unlocked where the
    /// service can (a prompt on a desktop). Throws `.locked` if any stays locked.
    private static func search(
        _ service: GObjectRef<SecretService>, _ attributes: [String: String], loadSecrets: Bool
    ) throws(VaultError) -> [GObjectRef<SecretItem>] {
        let table = AttributeTable(attributes)
        var flags = SECRET_SEARCH_ALL.rawValue | SECRET_SEARCH_UNLOCK.rawValue
        if loadSecrets { flags |= SECRET_SEARCH_LOAD_SECRETS.rawValue }
        var error: UnsafeMutablePointer<GError>? = nil
        let list = wait({
            secret_service_search(service.pointer, schema, table.table, SecretSearchFlags(rawValue: flags), nil, $0, $1)
        }) { secret_service_search_finish(service.pointer, $0, &error) }
        // Take one reference per item out of the list, then free the list alone.
        var items: [GObjectRef<SecretItem>] = []
        var node = list
        while let current = node {
            if let data = current.pointee.data {
                items.append(GObjectRef(taking: data.assumingMemoryBound(to: SecretItem.self)))
            }
            node = current.pointee.next
        }
        g_list_free(list)
        if let error { throw CapturedError(taking: error, whileConnecting: false).vaultError }
        if items.contains(where: { secret_item_get_locked($0.pointer) != 0 }) {
            throw .locked(VaultMessages.locked)
        }
        return items
    }

    static func lookup(attributes: [String: String]) throws(VaultError) -> [UInt8]? {
        try withService { service throws(VaultError) -> [UInt8]? in
            let items = try search(service, attributes, loadSecrets: true)
            // Duplicates can only come from another collection: take the newest.
            guard let item = items.max(by: { secret_item_get_modified($0.pointer) < secret_item_get_modified($1.pointer) })
            else {
                // "Not found" only counts from the unlocked default keyring. A
                // keyring restarted without the user's password, or without its
                // default collection, cannot say what it holds: that is "cannot
                // read it now", never "it is gone".
                try requireReadableDefaultCollection(service)
                return nil
            }
            guard let value = secret_item_get_secret(item.pointer) else {
                throw .failed(VaultMessages.itemUnreadable)
            }
            defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
            var length = 0
            guard let bytes = secret_value_get(value, &length) else { return [] }
            return Array(UnsafeRawBufferPointer(start: bytes, count: length).bindMemory(to: UInt8.self))
        }
    }

    static func remove(attributes: [String: String]) throws(VaultError) {
        try withService { service throws(VaultError) in
            for item in try search(service, attributes, loadSecrets: false) {
                var error: UnsafeMutablePointer<GError>? = nil
                _ = wait({ secret_item_delete(item.pointer, nil, $0, $1) }) {
                    secret_item_delete_finish(item.pointer, $0, &error)
                }
                if let error { throw CapturedError(taking: error, whileConnecting: false).vaultError }
            }
        }
    }

    static func health() -> VaultHealth {
        let service: GObjectRef<SecretService>
        do {
            service = try connect()
        } catch {
            return VaultHealth(available: false, locked: false, detail: error.message)
        }
        do {
            guard let collection = try defaultCollection(service) else {
                return VaultHealth(available: true, locked: false, detail: VaultMessages.noDefaultCollection)
            }
            if isLocked(collection) {
                return VaultHealth(available: true, locked: true, detail: VaultMessages.locked)
            }
            return VaultHealth(
                available: true, locked: false, detail: "The Secret Service is running and the default keyring is unlocked.")
        } catch {
            switch error {
            case .unavailable(let m): return VaultHealth(available: false, locked: false, detail: m)
            case .locked(let m): return VaultHealth(available: true, locked: true, detail: m)
            case .failed(let m): return VaultHealth(available: true, locked: false, detail: m)
            }
        }
    }
}
