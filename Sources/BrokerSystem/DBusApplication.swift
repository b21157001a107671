import BrokerRPC
import CGIO
import Synchronization
import SystemSupport

/// What the D-Bus service reports to its owner (for logs). Never carries a URI.
public enum DBusApplicationEvent: Sendable, Equatable {
    /// There is no session bus (or it cannot be reached); the daemon runs without one.
    case noSessionBus(String)
    case nameAcquired(String)
    /// Another process owns the name, or the bus went away.
    case nameLost(String)
    case registrationFailed(String)
    /// The session bus closed; the name is owned again once a bus is back.
    case busClosed
    case activated
    case actionRefused
    /// The Secret Service announced a change (a collection created, deleted,
    /// locked or unlocked; the service started or stopped): what the keyring's
    /// health was may no longer be so.
    case keyringChanged
    /// Whether the keyring's change signals are being followed (false: the bus is gone).
    case keyringWatched(Bool)
    /// After a message of `largestMessage` bytes, the names and objects moved to a fresh bus
    /// connection and the old one was closed once its calls were answered: GDBus keeps the buffer it
    /// read its largest message into for the life of a connection.
    case connectionRenewed(largestMessage: Int)
    /// The move to a fresh connection did not happen (`reason`); the old one is served on.
    case connectionRenewalSkipped(reason: String)
    /// An old connection, its last calls answered, was closed (after `connectionRenewed`): what it
    /// held is freed only now, so the heap has something to give back.
    case connectionRetired
}

/// The daemon on the session bus: owns `org.browserlogin.Broker` and
/// implements `org.freedesktop.Application` at `/org/browserlogin/Broker`, so a
/// `DBusActivatable` desktop file reaches it (and D-Bus activation starts it).
/// `Open` hands each URI to `open`; `Activate` reports `.activated`;
/// `ActivateAction` is refused (the broker has no actions).
///
/// With an `api`, the same connection also owns the API's bus name and
/// serves its object (`DBusAPI`), and `emit` sends its signals.
///
/// GDBus runs on a thread of its own with its own `GMainContext`, pushed as
/// thread-default before the name is owned; `run()` returns after `shutdown()`.
public final class DBusApplication: @unchecked Sendable {
    // Safe: `context` and `loop` are created in init and never replaced; GLib
    // allows `g_main_loop_quit` from any thread. Every other GLib call happens
    // on the loop thread, except `emit` (GDBus allows emitting from any
    // thread) on a connection it holds a reference to, taken under `current`;
    // the message filter (on GDBus's worker thread), which reads only the
    // message and writes atomics; and `changeCallers`, which unsubscribes a
    // caller's watches on whichever thread ends them (GDBus allows it) with
    // the callers' lock held, which `detach` takes before a connection
    // closes. `loopState` is touched on the loop thread only.
    // The callbacks are immutable; the flags are atomics; the tables mutexes.
    private let context: OpaquePointer
    private let loop: OpaquePointer
    private let stopping = Atomic<Bool>(false)
    private let busClosed = Atomic<Bool>(false)
    private let open: @Sendable ([String]) -> Void
    private let events: @Sendable (DBusApplicationEvent) -> Void
    public let busName: String
    public let objectPath: String
    public let api: DBusAPI?
    private let callers = Mutex(DBusCallerTable())
    /// API calls that arrived, refused ones included (the daemon's idle trim counts them as activity).
    private let calls = Atomic<Int>(0)
    private let retired = Atomic<Int>(0)
    /// The connection being served (its address), for `emit`; taken with `emitting` held.
    private let current = Mutex<UInt?>(nil)
    /// Held while a signal is emitted, and while the names move to a fresh connection (`renew`), so
    /// that no signal is sent on the old connection after the bus moved the names.
    private let emitting = Mutex<Void>(())
    /// The connections being served, by address: the current one, and old ones answering their last calls.
    private let links = Mutex<[UInt: Link]>([:])
    /// A message over `renewalThreshold` arrived; a check runs every second until the move is done.
    private let renewalArmed = Atomic<Bool>(false)
    /// Messages over `renewalThreshold` that arrived so far.
    private let largeArrivals = Atomic<Int>(0)
    /// Touched on the loop thread only (`@unchecked Sendable`, see the class).
    private var loopState = LoopState()

    /// Messages over this many bytes (1 MiB, the largest call the API takes) leave GDBus's read buffer
    /// that large for the life of the connection: the broker moves to a fresh one once they stop.
    public static let renewalThreshold = 1_048_576

    private struct LoopState {
        /// The link being served now.
        var link: Link?
        /// Old links answering their last calls.
        var retiring: [Link] = []
        var retireTimer = false
        /// Large messages that had arrived at the last renewal check, and checks in a row with none.
        var callsAtCheck = -1
        var quietChecks = 0
    }

    public static let interfaceXML = """
        <node>
          <interface name="org.freedesktop.Application">
            <method name="Activate"><arg type="a{sv}" name="platform_data" direction="in"/></method>
            <method name="Open">
              <arg type="as" name="uris" direction="in"/>
              <arg type="a{sv}" name="platform_data" direction="in"/>
            </method>
            <method name="ActivateAction">
              <arg type="s" name="action_name" direction="in"/>
              <arg type="av" name="parameter" direction="in"/>
              <arg type="a{sv}" name="platform_data" direction="in"/>
            </method>
          </interface>
        </node>
        """

    public init(
        busName: String, objectPath: String, api: DBusAPI? = nil, open: @escaping @Sendable ([String]) -> Void,
        events: @escaping @Sendable (DBusApplicationEvent) -> Void
    ) {
        self.busName = busName
        self.objectPath = objectPath
        self.api = api
        self.open = open
        self.events = events
        context = g_main_context_new()
        loop = g_main_loop_new(context, 0)
        // Register GDBusConnection's type here, on the caller's thread, not
        // first on the D-Bus thread (g_bus_get_sync): GLib can deadlock when a
        // type with interfaces is registered in one thread while another
        // initialises a class that needs it (libsecret's first call, see
        // bl_secret_prepare_types in CSecret).
        g_type_class_unref(g_type_class_ref(g_dbus_connection_get_type()))
    }

    deinit {
        g_main_loop_unref(loop)
        g_main_context_unref(context)
    }

    /// API calls that arrived so far.
    public var callsArrived: Int { calls.load(ordering: .relaxed) }

    /// Old connections closed so far (`connectionRetired`).
    public var connectionsRetired: Int { retired.load(ordering: .relaxed) }

    /// Serves the bus until `shutdown()`. Returns at once when there is no session bus.
    public func run() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            PosixThread.detach(name: "browser-login.dbus") { [self] in
                serve()
                continuation.resume()
            }
        }
    }

    /// Stops `run()` (safe from any thread, before or after it started).
    public func shutdown() {
        stopping.store(true, ordering: .sequentiallyConsistent)
        g_main_loop_quit(loop)
        g_main_context_wakeup(context)
    }

    /// Serves the bus; when the bus goes away (its connection closes), waits
    /// and connects again, owning the name anew, until `shutdown()`.
    private func serve() {
        g_main_context_push_thread_default(context)
        defer { g_main_context_pop_thread_default(context) }
        var connectedBefore = false
        var delayMilliseconds: UInt32 = 250
        while !stopping.load(ordering: .sequentiallyConsistent) {
            switch serveOnce(reconnecting: connectedBefore) {
            case .stopped: return
            case .noBus where !connectedBefore: return
            case .noBus: delayMilliseconds = min(delayMilliseconds * 2, 10_000)
            case .busClosed:
                connectedBefore = true
                delayMilliseconds = 250
            }
            pause(milliseconds: delayMilliseconds)
        }
    }

    private enum Ended { case stopped, busClosed, noBus }

    private func serveOnce(reconnecting: Bool) -> Ended {
        var error: UnsafeMutablePointer<GError>?
        guard let connection = Self.connect(&error) else {
            let detail = takeMessage(error)
            if !reconnecting { events(.noSessionBus(detail)) }
            return .noBus
        }
        if g_dbus_connection_is_closed(connection) != 0 {
            Self.close(connection)
            return .noBus
        }
        guard let first = attach(connection) else {
            Self.close(connection)
            return .stopped
        }
        first.owners = own(on: first, queueing: false)
        current.withLock { $0 = first.address }
        loopState.link = first
        defer {
            // Every connection, the one served now last.
            current.withLock { $0 = nil }
            for old in loopState.retiring { detach(old, last: false) }
            loopState.retiring = []
            if let link = loopState.link { detach(link, last: true) }
            loopState.link = nil
        }
        busClosed.store(false, ordering: .sequentiallyConsistent)
        if !stopping.load(ordering: .sequentiallyConsistent) { g_main_loop_run(loop) }
        if busClosed.load(ordering: .sequentiallyConsistent) && !stopping.load(ordering: .sequentiallyConsistent) {
            changeCallers { $0.leaveAll() }
            api?.callerLeft(nil)
            events(.busClosed)
            return .busClosed
        }
        return .stopped
    }

    /// A connection of its own to the session bus, not GDBus's shared one (`g_bus_get_sync`): the
    /// shared one stays the closed connection after the bus went away for as long as anything
    /// (libsecret) holds it, and could not be served again. A closed bus must not end the daemon.
    private static func connect(_ error: inout UnsafeMutablePointer<GError>?) -> OpaquePointer? {
        let address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SESSION, nil, &error)
        defer { g_free(address) }
        let flags = GDBusConnectionFlags(
            rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        guard let address, let connection = g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &error)
        else { return nil }
        g_dbus_connection_set_exit_on_close(connection, 0)
        return connection
    }

    /// Flushes, closes and releases `connection`.
    private static func close(_ connection: OpaquePointer) {
        g_dbus_connection_flush_sync(connection, nil, nil)
        g_dbus_connection_close_sync(connection, nil, nil)
        g_object_unref(UnsafeMutableRawPointer(connection))
    }

    /// Serves the objects on `connection` (names aside: `own`), follows the keyring's signals on it,
    /// watches its messages' sizes and its closing. nil when an object could not be registered (the
    /// connection is then left to the caller to close).
    private func attach(_ connection: OpaquePointer) -> Link? {
        let link = Link(connection: connection, sawLarge: { [weak self] in self?.armRenewal() })
        var error: UnsafeMutablePointer<GError>?
        guard let node = g_dbus_node_info_new_for_xml(Self.interfaceXML, &error) else {
            events(.registrationFailed(takeMessage(error)))
            return nil
        }
        defer { g_dbus_node_info_unref(node) }
        guard let interface = g_dbus_node_info_lookup_interface(node, "org.freedesktop.Application") else {
            events(.registrationFailed("the interface XML has no org.freedesktop.Application"))
            return nil
        }
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let registration = bl_dbus_register_object(
            connection, objectPath, interface,
            { _, _, _, _, method, parameters, invocation, userData in
                guard let userData, let method, let invocation else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.handle(String(cString: method), parameters, invocation)
            }, userData, &error)
        guard registration != 0 else {
            events(.registrationFailed(takeMessage(error)))
            return nil
        }
        link.undo.append { g_dbus_connection_unregister_object(connection, registration) }
        if let api {
            guard case .serving(let undo) = serve(api, on: connection) else {
                for step in link.undo.reversed() { step() }
                return nil
            }
            link.undo += undo
        }
        let watches = watchKeyring(on: connection)
        link.undo.append { for id in watches { g_dbus_connection_signal_unsubscribe(connection, id) } }
        // The size of every message that arrives (on GDBus's worker thread): one over the threshold
        // leaves the read buffer that large, and the broker moves to a fresh connection once they stop.
        let filter = g_dbus_connection_add_filter(
            connection,
            { _, message, incoming, data in
                guard incoming != 0, let message, let data, let body = g_dbus_message_get_body(message) else {
                    return message
                }
                let size = Int(g_variant_get_size(body))
                if size > DBusApplication.renewalThreshold {
                    Unmanaged<Link>.fromOpaque(data).takeUnretainedValue().saw(size)
                }
                // Another app stored or removed a keyring item: dropped here, so the loop thread sleeps on.
                if DBusApplication.isCollectionChangeWithoutLock(message, body) {
                    g_object_unref(UnsafeMutableRawPointer(message))
                    return nil
                }
                return message
            }, Unmanaged.passRetained(link).toOpaque(),
            { data in
                // GDBus calls this once the filter can no longer run.
                if let data { Unmanaged<Link>.fromOpaque(data).release() }
            })
        link.undo.append { g_dbus_connection_remove_filter(connection, filter) }
        // The bus went away: serve a new one once it is back.
        link.closedHandler = bl_dbus_on_closed(
            connection,
            { _, _, _, userData in
                guard let userData else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.busClosed.store(true, ordering: .sequentiallyConsistent)
                g_main_loop_quit(app.loop)
            }, userData)
        links.withLock { $0[link.address] = link }
        return link
    }

    /// Undoes `attach` and `own`, and closes the connection; `last`: the bus is left (the keyring is
    /// no longer followed), not only this connection.
    private func detach(_ link: Link, last: Bool) {
        if link.closedHandler != 0 {
            g_signal_handler_disconnect(UnsafeMutableRawPointer(link.connection), link.closedHandler)
            link.closedHandler = 0
        }
        for owner in link.owners { g_bus_unown_name(owner) }
        link.owners = []
        for step in link.undo.reversed() { step() }
        link.undo = []
        changeCallers { $0.closing(link.address) }
        if last { events(.keyringWatched(false)) }
        links.withLock { $0[link.address] = nil }
        // Last, after the names are given up and the objects unregistered.
        Self.close(link.connection)
    }

    /// Owns the API's name, then the application's, on `link` (`own(_:on:queueing:)`).
    private func own(on link: Link, queueing: Bool) -> [guint] {
        (api.map { [$0.busName] } ?? []).map { own($0, on: link.connection, queueing: queueing) }
            + [own(busName, on: link.connection, queueing: queueing)]
    }

    // MARK: Moving to a fresh connection

    /// From any thread (the message filter): a large message arrived; checks every second, on the
    /// loop thread, for the end of them, to move to a fresh connection then.
    private func armRenewal() {
        largeArrivals.add(1, ordering: .relaxed)
        guard !renewalArmed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        every(seconds: 1) { app in app.renewalCheck() }
    }

    /// Runs `check` on the loop thread every `seconds` while it answers true.
    private func every(seconds: UInt32, _ check: @escaping (DBusApplication) -> Bool) {
        guard let source = g_timeout_source_new_seconds(seconds) else { return }
        let box = Unmanaged.passRetained(RepeatingCheck(app: self, check: check)).toOpaque()
        g_source_set_callback(
            source,
            { data in
                guard let data else { return 0 }
                let box = Unmanaged<RepeatingCheck>.fromOpaque(data).takeUnretainedValue()
                return box.check(box.app) ? 1 : 0
            }, box,
            { data in if let data { Unmanaged<RepeatingCheck>.fromOpaque(data).release() } })
        g_source_attach(source, context)
        g_source_unref(source)
    }

    /// On the loop thread, once a second after a large message: moves to a fresh connection after
    /// two checks in a row with no large message arriving (ordinary calls go on meanwhile: those
    /// that reach the old connection are answered there). False when done.
    private func renewalCheck() -> Bool {
        guard !stopping.load(ordering: .sequentiallyConsistent) else { return false }
        let arrivedNow = largeArrivals.load(ordering: .relaxed)
        if arrivedNow != loopState.callsAtCheck {
            loopState.callsAtCheck = arrivedNow
            loopState.quietChecks = 0
            return true
        }
        loopState.quietChecks += 1
        guard loopState.quietChecks >= 2 else { return true }
        loopState.quietChecks = 0
        loopState.callsAtCheck = -1
        renewalArmed.store(false, ordering: .sequentiallyConsistent)
        renew()
        return false
    }

    /// Moves the names and objects to a fresh connection, on the loop thread.
    ///
    /// The new connection serves the objects first, then asks for each name behind the old one (in
    /// the bus's queue of owners, where no other process may wait before it: checked, else the move
    /// is called off). With signals held, the old connection's are flushed and a round trip made (the
    /// bus has routed them once it answers), then the old connection releases each name: the bus
    /// gives it at once to the next in its queue, the new connection, and routes every later call
    /// and signal there. The old connection answers the calls it has (and any sent to its unique
    /// name by a caller that has not yet seen the owner change) and is closed once it has had none
    /// in flight and none arriving for two seconds (`retireCheck`). Nothing is granted to anyone
    /// else at any point: the names are never free and never replaceable.
    private func renew() {
        guard let old = loopState.link, api != nil, !stopping.load(ordering: .sequentiallyConsistent) else { return }
        var error: UnsafeMutablePointer<GError>?
        guard let connection = Self.connect(&error) else {
            events(.connectionRenewalSkipped(reason: "no new connection to the bus (\(takeMessage(error)))"))
            return
        }
        guard let link = attach(connection) else {
            Self.close(connection)
            events(.connectionRenewalSkipped(reason: "the objects could not be registered on a new connection"))
            return
        }
        // The callers followed now are watched on the new connection too, before it serves the names
        // (the old one's watches end when it closes, long after the bus has taken these: the check
        // below is a round trip on this connection).
        changeCallers { table in
            for name in table.present {
                table.watched(name, connection: link.address, id: watchLeaving(name, on: link.connection))
            }
            return []
        }
        link.owners = own(on: link, queueing: true)
        // The bus answers one connection's messages in order: the names were asked for before this.
        let names = (api.map { [$0.busName] } ?? []) + [busName]
        for name in names {
            let queue = Self.queuedOwners(name, on: connection)
            guard queue.count >= 2, queue[0] == old.uniqueName, queue[1] == link.uniqueName else {
                detach(link, last: false)
                events(
                    .connectionRenewalSkipped(
                        reason: "another connection waits for \(name) (\(max(0, queue.count - 1)) queued)"))
                return
            }
        }
        emitting.withLock { _ in
            g_dbus_connection_flush_sync(old.connection, nil, nil)
            Self.roundTrip(old.connection)
            for owner in old.owners { g_bus_unown_name(owner) }
            old.owners = []
            current.withLock { $0 = link.address }
        }
        if old.closedHandler != 0 {
            g_signal_handler_disconnect(UnsafeMutableRawPointer(old.connection), old.closedHandler)
            old.closedHandler = 0
        }
        loopState.link = link
        loopState.retiring.append(old)
        if !loopState.retireTimer {
            loopState.retireTimer = true
            every(seconds: 1) { app in app.retireCheck() }
        }
        events(.connectionRenewed(largestMessage: old.largest.load(ordering: .relaxed)))
    }

    /// On the loop thread, once a second while old connections answer their last calls: closes each
    /// after two checks in a row with none in flight and none arriving. False when none is left.
    private func retireCheck() -> Bool {
        loopState.retiring.removeAll { old in
            let arrivals = old.arrivals.load(ordering: .relaxed)
            if old.inFlight.load(ordering: .relaxed) > 0 || arrivals != old.arrivalsAtCheck {
                old.arrivalsAtCheck = arrivals
                old.quietChecks = 0
                return false
            }
            old.quietChecks += 1
            guard old.quietChecks >= 2 else { return false }
            detach(old, last: false)
            retired.add(1, ordering: .relaxed)
            events(.connectionRetired)
            return true
        }
        if loopState.retiring.isEmpty { loopState.retireTimer = false }
        return loopState.retireTimer
    }

    /// The unique names waiting for `name`, its owner first (`ListQueuedOwners`); empty on failure.
    private static func queuedOwners(_ name: String, on connection: OpaquePointer) -> [String] {
        var items: [OpaquePointer?] = [g_variant_new_string(name)]
        var error: UnsafeMutablePointer<GError>?
        guard
            let reply = g_dbus_connection_call_sync(
                connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                "ListQueuedOwners", g_variant_new_tuple(&items, 1), nil, G_DBUS_CALL_FLAGS_NONE, 10_000, nil, &error)
        else {
            _ = takeMessage(error)
            return []
        }
        defer { g_variant_unref(reply) }
        return DBusVariant.strings(reply, at: 0)
    }

    /// A call to the bus and its answer on `connection` (`GetId`): the bus has taken every message
    /// sent on it before.
    private static func roundTrip(_ connection: OpaquePointer) {
        var error: UnsafeMutablePointer<GError>?
        let reply = g_dbus_connection_call_sync(
            connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId", nil, nil,
            G_DBUS_CALL_FLAGS_NONE, 10_000, nil, &error)
        if let reply { g_variant_unref(reply) } else { _ = takeMessage(error) }
    }

    /// Follows the Secret Service's change signals on `connection`: its
    /// collections' `CollectionCreated`/`Deleted`/`Changed`, their
    /// `PropertiesChanged` that name `Locked`, and its name changing owner
    /// (the keyring started, stopped or restarted). Any sender may send the
    /// first two, so a signal is only a reason to ask again, never an answer.
    /// A collection's `PropertiesChanged` also comes with every item any app
    /// stores or removes (`Items`): the message filter drops those on GDBus's
    /// worker thread (`isCollectionChangeWithoutLock`), before they reach the
    /// loop thread, and the callback passes on only those that name `Locked`.
    private func watchKeyring(on connection: OpaquePointer) -> [guint] {
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let changed: GDBusSignalCallback = { _, _, _, _, _, _, userData in
            guard let userData else { return }
            Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue().events(.keyringChanged)
        }
        let lockChanged: GDBusSignalCallback = { _, _, _, _, _, parameters, userData in
            guard let userData, let parameters, DBusApplication.namesLocked(parameters) else { return }
            Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue().events(.keyringChanged)
        }
        let none = GDBusSignalFlags(rawValue: 0)
        let ids = [
            g_dbus_connection_signal_subscribe(
                connection, nil, "org.freedesktop.Secret.Service", nil, "/org/freedesktop/secrets", nil, none, changed,
                userData, nil),
            g_dbus_connection_signal_subscribe(
                connection, nil, "org.freedesktop.DBus.Properties", "PropertiesChanged", nil,
                "org.freedesktop.Secret.Collection", none, lockChanged, userData, nil),
            g_dbus_connection_signal_subscribe(
                connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged", "/org/freedesktop/DBus",
                "org.freedesktop.secrets", none, changed, userData, nil),
        ]
        // Subscribed: what happened before is unknown, so ask afresh from now on.
        events(.keyringWatched(true))
        events(.keyringChanged)
        return ids
    }

    /// True for a collection's `PropertiesChanged` that does not name `Locked`
    /// (the keyring's `Items` changed: another app stored or removed an item).
    /// The message filter drops these on GDBus's worker thread: the match rule
    /// cannot tell them from a lock (it matches the interface, `arg0`, only),
    /// and each would otherwise wake the loop thread for nothing.
    static func isCollectionChangeWithoutLock(_ message: OpaquePointer, _ body: OpaquePointer) -> Bool {
        guard g_dbus_message_get_message_type(message) == G_DBUS_MESSAGE_TYPE_SIGNAL,
            let member = g_dbus_message_get_member(message), strcmp(member, "PropertiesChanged") == 0,
            let interface = g_dbus_message_get_interface(message),
            strcmp(interface, "org.freedesktop.DBus.Properties") == 0,
            let type = g_variant_get_type_string(body), strcmp(type, "(sa{sv}as)") == 0
        else { return false }
        guard let changed = g_variant_get_child_value(body, 0) else { return false }
        defer { g_variant_unref(changed) }
        guard let name = g_variant_get_string(changed, nil), strcmp(name, "org.freedesktop.Secret.Collection") == 0
        else { return false }
        return !namesLocked(body)
    }

    /// True when `PropertiesChanged` parameters (`(sa{sv}as)`) name `Locked`
    /// among the changed or the invalidated properties; false for anything
    /// else, a wrong signature included.
    static func namesLocked(_ parameters: OpaquePointer) -> Bool {
        guard let type = g_variant_get_type_string(parameters), String(cString: type) == "(sa{sv}as)" else {
            return false
        }
        if let changed = g_variant_get_child_value(parameters, 1) {
            defer { g_variant_unref(changed) }
            if let value = g_variant_lookup_value(changed, "Locked", nil) {
                g_variant_unref(value)
                return true
            }
        }
        return DBusVariant.strings(parameters, at: 2).contains("Locked")
    }

    /// Owns `name` on `connection` (`queueing`: waiting in the bus's queue behind its owner, for a
    /// move to a fresh connection; else not queued behind another owner), reporting
    /// `.nameAcquired` / `.nameLost`; answers the id for `g_bus_unown_name`. Never replaceable.
    private func own(_ name: String, on connection: OpaquePointer, queueing: Bool) -> guint {
        g_bus_own_name_on_connection(
            connection, name, queueing ? G_BUS_NAME_OWNER_FLAGS_NONE : G_BUS_NAME_OWNER_FLAGS_DO_NOT_QUEUE,
            { _, name, userData in
                guard let userData, let name else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.events(.nameAcquired(String(cString: name)))
            },
            { _, name, userData in
                guard let userData, let name else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.events(.nameLost(String(cString: name)))
            }, Unmanaged.passUnretained(self).toOpaque(), nil)
    }

    /// Runs the loop for `milliseconds` (or until `shutdown()`).
    private func pause(milliseconds: UInt32) {
        guard !stopping.load(ordering: .sequentiallyConsistent), let source = g_timeout_source_new(milliseconds) else { return }
        defer { g_source_unref(source) }
        g_source_set_callback(
            source,
            { loop in
                if let loop { g_main_loop_quit(OpaquePointer(loop)) }
                return 0
            }, UnsafeMutableRawPointer(loop), nil)
        g_source_attach(source, context)
        g_main_loop_run(loop)
        g_source_destroy(source)
    }

    private func handle(_ method: String, _ parameters: OpaquePointer?, _ invocation: OpaquePointer) {
        switch method {
        case "Open":
            let uris = parameters.map { DBusVariant.strings($0, at: 0) } ?? []
            g_dbus_method_invocation_return_value(invocation, nil)
            open(uris)
        case "Activate":
            g_dbus_method_invocation_return_value(invocation, nil)
            events(.activated)
        case "ActivateAction":
            events(.actionRefused)
            g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.InvalidArgs", "the browser-login broker has no actions")
        default:
            g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.UnknownMethod", "no such method")
        }
    }
}

/// A GError's message (freeing the error), or `fallback` when there is none.
func takeMessage(_ error: UnsafeMutablePointer<GError>?, or fallback: String = "unknown error") -> String {
    guard let error else { return fallback }
    defer { g_error_free(error) }
    return String(cString: error.pointee.message)
}

// MARK: - The API object

extension DBusApplication {
    enum Served {
        /// Serving; the steps undo it (in reverse order).
        case serving([() -> Void])
        case failed
    }

    /// Registers the API's object on `connection` (on the loop thread); its
    /// name is owned by `own`, its callers' leaving watched by `watchLeaving`.
    fileprivate func serve(_ api: DBusAPI, on connection: OpaquePointer) -> Served {
        var error: UnsafeMutablePointer<GError>?
        guard let node = g_dbus_node_info_new_for_xml(api.interfaceXML, &error) else {
            events(.registrationFailed(takeMessage(error)))
            return .failed
        }
        defer { g_dbus_node_info_unref(node) }
        guard let interface = g_dbus_node_info_lookup_interface(node, api.interfaceName) else {
            events(.registrationFailed("the interface XML has no \(api.interfaceName)"))
            return .failed
        }
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let registration = bl_dbus_register_object(
            connection, api.objectPath, interface,
            { connection, sender, _, _, method, parameters, invocation, userData in
                guard let userData, let method, let invocation, let connection else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.arrived(
                    String(cString: method), sender.map { String(cString: $0) }, parameters, invocation, connection)
            }, userData, &error)
        guard registration != 0 else {
            events(.registrationFailed(takeMessage(error)))
            return .failed
        }
        return .serving([{ g_dbus_connection_unregister_object(connection, registration) }])
    }

    // MARK: Following callers

    /// Changes the callers' table; the watches `body` ends are unsubscribed
    /// before the lock is let go, so that no connection closes under one
    /// (`detach` ends its watches through here first).
    private func changeCallers(_ body: (inout DBusCallerTable) -> [DBusCallerTable.Watch]) {
        callers.withLock { table in
            for watch in body(&table) {
                guard let connection = OpaquePointer(bitPattern: watch.connection) else { continue }
                g_dbus_connection_signal_unsubscribe(connection, guint(watch.id))
            }
        }
    }

    /// Watches the unique name `caller` leave the bus, on `connection` (on the loop thread: the
    /// callback runs in the thread-default context of the subscriber): `NameOwnerChanged` with
    /// `arg0` = its name, so that the bus sends the broker only the leaving of callers it follows.
    private func watchLeaving(_ caller: String, on connection: OpaquePointer) -> UInt32 {
        let userData = Unmanaged.passUnretained(self).toOpaque()
        return g_dbus_connection_signal_subscribe(
            connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged", "/org/freedesktop/DBus",
            caller, G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, _, parameters, userData in
                guard let userData, let parameters, g_variant_n_children(parameters) == 3 else { return }
                var name: UnsafePointer<gchar>?
                var newOwner: UnsafePointer<gchar>?
                bl_variant_get_name_owner_changed(parameters, &name, &newOwner)
                guard let name, let newOwner, newOwner.pointee == 0, name.pointee == CChar(UInt8(ascii: ":")) else { return }
                Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue().left(String(cString: name))
            }, userData, nil)
    }

    /// `caller` left the bus (on the loop thread): its watches end, its calls and the API's hold on it
    /// with it. A late signal, after its watch ended, changes nothing: unique names are not reused.
    private func left(_ caller: String) {
        changeCallers { $0.leave(caller) }
        api?.callerLeft(caller)
    }

    /// The API lets go of one hold on `caller` (`DBusMethodCall.keepFollowingCaller`); once it has no
    /// call in flight and no hold, it rests (`DBusCallerTable`). From any thread.
    public func letGo(of caller: String) {
        changeCallers { $0.release(caller) }
    }

    /// Emits one of the API's signals with one `a{sv}` argument, to every
    /// listener or (`destination`, a unique name) to one. False when there
    /// is no bus or the payload cannot be carried. Safe from any thread.
    @discardableResult
    public func emit(signal: String, _ payload: JSONValue, destination: String? = nil) -> Bool {
        guard let api, let argument = DBusVariant.make(payload, type: "a{sv}") else { return false }
        var arguments: [OpaquePointer?] = [argument]
        let tuple = g_variant_new_tuple(&arguments, 1)
        // Not while the names move to a fresh connection (`renew`).
        return emitting.withLock { _ in emit(signal, tuple, api: api, destination: destination) }
    }

    private func emit(_ signal: String, _ tuple: OpaquePointer?, api: DBusAPI, destination: String?) -> Bool {
        let connection = current.withLock { bits -> UInt? in
            guard let bits, let pointer = UnsafeMutableRawPointer(bitPattern: bits) else { return nil }
            g_object_ref(pointer)
            return bits
        }
        guard let connection, let pointer = UnsafeMutableRawPointer(bitPattern: connection) else {
            g_variant_unref(g_variant_ref_sink(tuple))
            return false
        }
        defer { g_object_unref(pointer) }
        var error: UnsafeMutablePointer<GError>?
        let sent = g_dbus_connection_emit_signal(
            OpaquePointer(pointer), destination, api.objectPath, api.interfaceName, signal, tuple, &error)
        if sent == 0 { _ = takeMessage(error) }
        return sent != 0
    }

    /// A call arrived (on the loop thread): counted against the limits, its
    /// arguments read, then its caller's credentials asked of the bus (on
    /// its first call; later ones use what the bus said then); the API's
    /// handler gets it once they are in.
    private func arrived(
        _ method: String, _ sender: String?, _ parameters: OpaquePointer?, _ invocation: OpaquePointer,
        _ connection: OpaquePointer
    ) {
        guard let api, let sender else {
            return g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.Failed", "a call without a sender")
        }
        calls.add(1, ordering: .relaxed)
        api.arrived()
        let link = links.withLock { $0[UInt(bitPattern: UnsafeMutableRawPointer(connection))] }
        link?.arrivals.add(1, ordering: .relaxed)
        // Judged before anything is copied: sizes and counts only, no input quoted.
        if let parameters, let problem = DBusLimits.problem(parameters) {
            return g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.InvalidArgs", problem)
        }
        // A caller followed from now on is watched on the connection the call came by (the bus answers
        // the credentials asked below after it has taken the watch: a caller that left before is
        // answered an error, one that leaves later is seen) and on the one served now.
        var begun = DBusCallerTable.Begun.refused
        var serial: UInt64 = 0
        var known: DBusCallerTable.Credentials?
        changeCallers { table in
            (begun, serial) = table.begin(sender, perCaller: api.maxCallsPerCaller, total: api.maxCalls)
            known = begun == .counted ? table.entries[sender]?.credentials : nil
            guard begun == .first else { return [] }
            var watched = [connection]
            if let current = loopState.link?.connection, current != connection { watched.append(current) }
            for on in watched {
                table.watched(
                    sender, connection: UInt(bitPattern: UnsafeMutableRawPointer(on)), id: watchLeaving(sender, on: on))
            }
            return []
        }
        guard begun != .refused else {
            return g_dbus_method_invocation_return_dbus_error(
                invocation, api.busyError,
                "too many calls in flight (at most \(api.maxCallsPerCaller) per caller, \(api.maxCalls) in all); retry once some are answered"
            )
        }
        link?.inFlight.add(1, ordering: .relaxed)
        let end: @Sendable () -> Void = { [self, serial] in
            changeCallers { $0.end(sender, serial: serial) }
            link?.inFlight.subtract(1, ordering: .relaxed)
        }
        var arguments: [JSONValue] = []
        if let parameters {
            for i in 0..<g_variant_n_children(parameters) {
                guard let child = g_variant_get_child_value(parameters, i) else { continue }
                defer { g_variant_unref(child) }
                guard let value = DBusVariant.json(child) else {
                    end()
                    return g_dbus_method_invocation_return_dbus_error(
                        invocation, "org.freedesktop.DBus.Error.InvalidArgs",
                        "argument \(i + 1) holds a type the broker does not read")
                }
                arguments.append(value)
            }
        }
        var outTypes: [String] = []
        if let info = g_dbus_method_invocation_get_method_info(invocation), var arg = info.pointee.out_args {
            while let argInfo = arg.pointee {
                outTypes.append(String(cString: argInfo.pointee.signature))
                arg += 1
            }
        }
        let pending = PendingCall(
            method: method, arguments: arguments, sender: sender, serial: serial, invocation: invocation,
            outTypes: outTypes, end: end)
        pending.app = self
        // A caller followed since an earlier call: the bus said who it is then.
        if let known { return pending.credentials(known.pid, known.uid) }
        var tupleItems: [OpaquePointer?] = [g_variant_new_string(sender)]
        g_dbus_connection_call(
            connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
            "GetConnectionCredentials", g_variant_new_tuple(&tupleItems, 1), nil, G_DBUS_CALL_FLAGS_NONE, 10_000, nil,
            { source, result, userData in
                guard let userData else { return }
                let pending = Unmanaged<PendingCall>.fromOpaque(userData).takeRetainedValue()
                var error: UnsafeMutablePointer<GError>?
                let reply = source.flatMap { g_dbus_connection_call_finish(OpaquePointer($0), result, &error) }
                let dictionary = reply.flatMap { g_variant_get_child_value($0, 0) }
                defer {
                    reply.map { g_variant_unref($0) }
                    dictionary.map { g_variant_unref($0) }
                }
                let credentials = dictionary.flatMap { DBusVariant.json($0) }?.objectValue
                _ = takeMessage(error)
                let pid = credentials?["ProcessID"]?.intValue
                let uid = credentials?["UnixUserID"]?.intValue
                if let pid, let uid, let app = pending.app {
                    app.callers.withLock { $0.learned(pending.sender, serial: pending.serial, .init(pid: pid, uid: uid)) }
                }
                pending.credentials(pid, uid)
            }, Unmanaged.passRetained(pending).toOpaque())
    }

    /// A call waiting for its caller's credentials (touched on the loop thread only).
    private final class PendingCall {
        let method: String
        let arguments: [JSONValue]
        let sender: String
        /// Which caller of that name (`DBusCallerTable.begin`).
        let serial: UInt64
        let invocation: OpaquePointer
        let outTypes: [String]
        let end: @Sendable () -> Void
        var app: DBusApplication?

        init(
            method: String, arguments: [JSONValue], sender: String, serial: UInt64, invocation: OpaquePointer,
            outTypes: [String], end: @escaping @Sendable () -> Void
        ) {
            self.method = method
            self.arguments = arguments
            self.sender = sender
            self.serial = serial
            self.invocation = invocation
            self.outTypes = outTypes
            self.end = end
        }

        func credentials(_ pid: Int64?, _ uid: Int64?) {
            guard let app, let api = app.api, let pid, let uid, pid > 0, pid <= Int64(Int32.max) else {
                end()
                return g_dbus_method_invocation_return_dbus_error(
                    invocation, "org.freedesktop.DBus.Error.Failed",
                    "the bus did not say which process made the call (GetConnectionCredentials)")
            }
            guard uid == Int64(getuid()) else {
                end()
                return g_dbus_method_invocation_return_dbus_error(
                    invocation, "org.freedesktop.DBus.Error.AccessDenied", "the broker serves its own user only")
            }
            let sender = sender
            let serial = serial
            let call = DBusMethodCall(
                method: method, arguments: arguments, caller: DBusCaller(uniqueName: sender, pid: Int32(pid), uid: UInt32(uid)),
                invocation: invocation, outTypes: outTypes, finished: end,
                left: { app.callers.withLock { $0.hasLeft(sender, serial: serial) } },
                hold: { app.callers.withLock { $0.hold(sender, serial: serial) } })
            api.handle(call)
        }
    }
}

extension DBusApplication {
    /// One connection to the bus and what is served on it: the one served now, or an old one
    /// answering its last calls after a move to a fresh connection.
    ///
    /// `@unchecked Sendable`: `connection` is immutable (GDBus connections are thread-safe); `undo`,
    /// `owners`, `closedHandler`, `arrivalsAtCheck` and `quietChecks` are touched on the loop thread
    /// only; the counters are atomics; `sawLarge` is immutable and sendable.
    fileprivate final class Link: @unchecked Sendable {
        let connection: OpaquePointer
        let sawLarge: @Sendable () -> Void
        var undo: [() -> Void] = []
        var owners: [guint] = []
        var closedHandler: gulong = 0
        /// API calls that arrived on this connection, and those not yet answered.
        let arrivals = Atomic<Int>(0)
        let inFlight = Atomic<Int>(0)
        /// The largest message that arrived (its body's bytes), once over the threshold.
        let largest = Atomic<Int>(0)
        var arrivalsAtCheck = -1
        var quietChecks = 0

        init(connection: OpaquePointer, sawLarge: @escaping @Sendable () -> Void) {
            self.connection = connection
            self.sawLarge = sawLarge
        }

        var address: UInt { UInt(bitPattern: UnsafeMutableRawPointer(connection)) }
        var uniqueName: String { g_dbus_connection_get_unique_name(connection).map { String(cString: $0) } ?? "" }

        /// On GDBus's worker thread: a message of `size` bytes arrived.
        func saw(_ size: Int) {
            var known = largest.load(ordering: .relaxed)
            while known < size {
                let (exchanged, original) = largest.compareExchange(
                    expected: known, desired: size, ordering: .relaxed)
                if exchanged { break }
                known = original
            }
            sawLarge()
        }
    }

    /// A check run every second on the loop thread (`every`). `@unchecked Sendable`: handed to
    /// GLib, used on the loop thread only.
    fileprivate final class RepeatingCheck: @unchecked Sendable {
        let app: DBusApplication
        let check: (DBusApplication) -> Bool
        init(app: DBusApplication, check: @escaping (DBusApplication) -> Bool) {
            self.app = app
            self.check = check
        }
    }
}
