import CGIO
import Foundation
import Synchronization

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
}

/// The daemon on the session bus: owns `org.browserlogin.Broker` and
/// implements `org.freedesktop.Application` at `/org/browserlogin/Broker`, so a
/// `DBusActivatable` desktop file reaches it (and D-Bus activation starts it).
/// `Open` hands each URI to `open`; `Activate` reports `.activated`;
/// `ActivateAction` is refused (the broker has no actions).
///
/// GDBus runs on a thread of its own with its own `GMainContext`, pushed as
/// thread-default before the name is owned; `run()` returns after `shutdown()`.
public final class DBusApplication: @unchecked Sendable {
    // Safe: `context` and `loop` are created in init and never replaced; GLib
    // allows `g_main_loop_quit` from any thread. Every other GLib call happens
    // on the loop thread. The callbacks are immutable; the flags are atomics.
    private let context: OpaquePointer
    private let loop: OpaquePointer
    private let stopping = Atomic<Bool>(false)
    private let busClosed = Atomic<Bool>(false)
    private let open: @Sendable ([String]) -> Void
    private let events: @Sendable (DBusApplicationEvent) -> Void
    public let busName: String
    public let objectPath: String

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
        busName: String, objectPath: String, open: @escaping @Sendable ([String]) -> Void,
        events: @escaping @Sendable (DBusApplicationEvent) -> Void
    ) {
        self.busName = busName
        self.objectPath = objectPath
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

    /// Serves the bus until `shutdown()`. Returns at once when there is no session bus.
    public func run() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let thread = Thread { [self] in
                serve()
                continuation.resume()
            }
            thread.name = "browser-login.dbus"
            thread.start()
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
        guard let connection = g_bus_get_sync(G_BUS_TYPE_SESSION, nil, &error) else {
            let detail = takeMessage(error)
            if !reconnecting { events(.noSessionBus(detail)) }
            return .noBus
        }
        defer { g_object_unref(UnsafeMutableRawPointer(connection)) }
        // A closed bus must not end the daemon (GDBus's default for bus connections).
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

        let owner = g_bus_own_name_on_connection(
            connection, busName, G_BUS_NAME_OWNER_FLAGS_DO_NOT_QUEUE,
            { _, name, userData in
                guard let userData, let name else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.events(.nameAcquired(String(cString: name)))
            },
            { _, name, userData in
                guard let userData, let name else { return }
                let app = Unmanaged<DBusApplication>.fromOpaque(userData).takeUnretainedValue()
                app.events(.nameLost(String(cString: name)))
            }, userData, nil)
        defer { g_bus_unown_name(owner) }
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
            events(.busClosed)
            return .busClosed
        }
        // Let the unown and unregister reach the bus before the connection goes.
        g_dbus_connection_flush_sync(connection, nil, nil)
        return .stopped
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
