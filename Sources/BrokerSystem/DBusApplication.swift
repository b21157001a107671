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
    // thread) on a connection it holds a reference to, taken under `current`.
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
    /// The connection being served (its address), for `emit`.
    private let current = Mutex<UInt?>(nil)

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
        // A connection of its own, not GDBus's shared one (`g_bus_get_sync`): the
        // shared one stays the closed connection after the bus went away for as
        // long as anything (libsecret) holds it, and could not be served again.
        let address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SESSION, nil, &error)
        defer { g_free(address) }
        let flags = GDBusConnectionFlags(
            rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        guard let address, let connection = g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &error)
        else {
            let detail = takeMessage(error)
            if !reconnecting { events(.noSessionBus(detail)) }
            return .noBus
        }
        defer {
            // Last, after the names are given up and the objects unregistered.
            g_dbus_connection_flush_sync(connection, nil, nil)
            g_dbus_connection_close_sync(connection, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
        // A closed bus must not end the daemon.
        g_dbus_connection_set_exit_on_close(connection, 0)
        if g_dbus_connection_is_closed(connection) != 0 { return .noBus }

        guard let node = g_dbus_node_info_new_for_xml(Self.interfaceXML, &error) else {
            events(.registrationFailed(takeMessage(error)))
            return .stopped
        }
        defer { g_dbus_node_info_unref(node) }
        guard let interface = g_dbus_node_info_lookup_interface(node, "org.freedesktop.Application") else {
            events(.registrationFailed("the interface XML has no org.freedesktop.Application"))
            return .stopped
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
            return .stopped
        }
        defer { g_dbus_connection_unregister_object(connection, registration) }
        let served = api.map { serve($0, on: connection) } ?? .serving([])
        guard case .serving(let undo) = served else { return .stopped }
        defer { for step in undo.reversed() { step() } }

        let owner = own(busName, on: connection)
        defer { g_bus_unown_name(owner) }
        let watches = watchKeyring(on: connection)
        defer {
            for id in watches { g_dbus_connection_signal_unsubscribe(connection, id) }
            events(.keyringWatched(false))
        }
        // The bus went away: serve a new one once it is back.
        let closedHandler = bl_dbus_on_closed(
            connection,
            { _, _, _, userData in
                guard let userData else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.busClosed.store(true, ordering: .sequentiallyConsistent)
                g_main_loop_quit(app.loop)
            }, userData)
        defer { g_signal_handler_disconnect(UnsafeMutableRawPointer(connection), closedHandler) }
        busClosed.store(false, ordering: .sequentiallyConsistent)
        if !stopping.load(ordering: .sequentiallyConsistent) { g_main_loop_run(loop) }
        if busClosed.load(ordering: .sequentiallyConsistent) && !stopping.load(ordering: .sequentiallyConsistent) {
            callers.withLock { table in for name in table.entries.keys { table.leave(name) } }
            api?.callerLeft(nil)
            events(.busClosed)
            return .busClosed
        }
        return .stopped
    }

    /// Follows the Secret Service's change signals on `connection`: its
    /// collections' `CollectionCreated`/`Deleted`/`Changed`, their
    /// `PropertiesChanged` (`Locked`), and its name changing owner (the
    /// keyring started, stopped or restarted). Any sender may send the first
    /// two, so a signal is only a reason to ask again, never an answer.
    private func watchKeyring(on connection: OpaquePointer) -> [guint] {
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let changed: GDBusSignalCallback = { _, _, _, _, _, _, userData in
            guard let userData else { return }
            Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue().events(.keyringChanged)
        }
        let none = GDBusSignalFlags(rawValue: 0)
        let ids = [
            g_dbus_connection_signal_subscribe(
                connection, nil, "org.freedesktop.Secret.Service", nil, "/org/freedesktop/secrets", nil, none, changed,
                userData, nil),
            g_dbus_connection_signal_subscribe(
                connection, nil, "org.freedesktop.DBus.Properties", "PropertiesChanged", nil,
                "org.freedesktop.Secret.Collection", none, changed, userData, nil),
            g_dbus_connection_signal_subscribe(
                connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged", "/org/freedesktop/DBus",
                "org.freedesktop.secrets", none, changed, userData, nil),
        ]
        // Subscribed: what happened before is unknown, so ask afresh from now on.
        events(.keyringWatched(true))
        events(.keyringChanged)
        return ids
    }

    /// Owns `name` on `connection` (not queued behind another owner), reporting
    /// `.nameAcquired` / `.nameLost`; answers the id for `g_bus_unown_name`.
    private func own(_ name: String, on connection: OpaquePointer) -> guint {
        g_bus_own_name_on_connection(
            connection, name, G_BUS_NAME_OWNER_FLAGS_DO_NOT_QUEUE,
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
            var uris: [String] = []
            if let parameters, let list = g_variant_get_child_value(parameters, 0) {
                for i in 0..<g_variant_n_children(list) {
                    guard let child = g_variant_get_child_value(list, i) else { continue }
                    if let text = g_variant_get_string(child, nil) { uris.append(String(cString: text)) }
                    g_variant_unref(child)
                }
                g_variant_unref(list)
            }
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

    /// Registers the API's object, owns its name and watches callers leave,
    /// on `connection` (on the loop thread).
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
        var undo: [() -> Void] = [{ g_dbus_connection_unregister_object(connection, registration) }]
        // Callers that leave the bus: NameOwnerChanged with no new owner.
        let watch = g_dbus_connection_signal_subscribe(
            connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged", "/org/freedesktop/DBus",
            nil, G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, _, parameters, userData in
                guard let userData, let parameters, g_variant_n_children(parameters) == 3 else { return }
                var name: UnsafePointer<gchar>?
                var newOwner: UnsafePointer<gchar>?
                bl_variant_get_name_owner_changed(parameters, &name, &newOwner)
                guard let name, let newOwner, newOwner.pointee == 0, name.pointee == CChar(UInt8(ascii: ":")) else { return }
                let left = String(cString: name)
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.callers.withLock { $0.leave(left) }
                app.api?.callerLeft(left)
            }, userData, nil)
        undo.append { g_dbus_connection_signal_unsubscribe(connection, watch) }
        let owner = own(api.busName, on: connection)
        undo.append { g_bus_unown_name(owner) }
        g_object_ref(UnsafeMutableRawPointer(connection))
        current.withLock { $0 = UInt(bitPattern: UnsafeMutableRawPointer(connection)) }
        undo.append { [self] in
            current.withLock { $0 = nil }
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
        return .serving(undo)
    }

    /// Emits one of the API's signals with one `a{sv}` argument, to every
    /// listener or (`destination`, a unique name) to one. False when there
    /// is no bus or the payload cannot be carried. Safe from any thread.
    @discardableResult
    public func emit(signal: String, _ payload: JSONValue, destination: String? = nil) -> Bool {
        guard let api, let argument = DBusVariant.make(payload, type: "a{sv}") else { return false }
        var arguments: [OpaquePointer?] = [argument]
        let tuple = g_variant_new_tuple(&arguments, 1)
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
    /// arguments read, then its caller's credentials asked of the bus; the
    /// API's handler gets it once they are in.
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
        // Judged before anything is copied: sizes and counts only, no input quoted.
        if let parameters, let problem = DBusLimits.problem(parameters) {
            return g_dbus_method_invocation_return_dbus_error(
                invocation, "org.freedesktop.DBus.Error.InvalidArgs", problem)
        }
        guard callers.withLock({ $0.begin(sender, perCaller: api.maxCallsPerCaller, total: api.maxCalls) }) else {
            return g_dbus_method_invocation_return_dbus_error(
                invocation, api.busyError,
                "too many calls in flight (at most \(api.maxCallsPerCaller) per caller, \(api.maxCalls) in all); retry once some are answered"
            )
        }
        let end: @Sendable () -> Void = { [self] in callers.withLock { $0.end(sender) } }
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
            method: method, arguments: arguments, sender: sender, invocation: invocation, outTypes: outTypes, end: end)
        pending.app = self
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
                pending.credentials(credentials?["ProcessID"]?.intValue, credentials?["UnixUserID"]?.intValue)
            }, Unmanaged.passRetained(pending).toOpaque())
    }

    /// A call waiting for its caller's credentials (touched on the loop thread only).
    private final class PendingCall {
        let method: String
        let arguments: [JSONValue]
        let sender: String
        let invocation: OpaquePointer
        let outTypes: [String]
        let end: @Sendable () -> Void
        var app: DBusApplication?

        init(
            method: String, arguments: [JSONValue], sender: String, invocation: OpaquePointer, outTypes: [String],
            end: @escaping @Sendable () -> Void
        ) {
            self.method = method
            self.arguments = arguments
            self.sender = sender
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
            let call = DBusMethodCall(
                method: method, arguments: arguments, caller: DBusCaller(uniqueName: sender, pid: Int32(pid), uid: UInt32(uid)),
                invocation: invocation, outTypes: outTypes, finished: end,
                left: { app.callers.withLock { $0.hasLeft(sender) } })
            api.handle(call)
        }
    }
}
