#ifndef BROWSER_LOGIN_CGIO_SHIM_H
#define BROWSER_LOGIN_CGIO_SHIM_H
#include <gio/gio.h>
#include <glib.h>

/// g_variant_new is variadic: typed constructors for the replies we build.
static inline GVariant *bl_variant_new_empty_tuple(void) { return g_variant_new_tuple(NULL, 0); }

/// Registers an object with one interface; GDBus copies the vtable.
static inline guint bl_dbus_register_object(GDBusConnection *connection, const gchar *path, GDBusInterfaceInfo *info,
                                            GDBusInterfaceMethodCallFunc method_call, gpointer user_data,
                                            GError **error) {
    GDBusInterfaceVTable vtable = {method_call, NULL, NULL, {0}};
    return g_dbus_connection_register_object(connection, path, info, &vtable, user_data, NULL, error);
}

/// Connects `handler` to the connection's "closed" signal (g_signal_connect is a macro).
typedef void (*bl_dbus_closed_handler)(GDBusConnection *connection, gboolean remote_peer_vanished, GError *error,
                                       gpointer user_data);
static inline gulong bl_dbus_on_closed(GDBusConnection *connection, bl_dbus_closed_handler handler, gpointer user_data) {
    return g_signal_connect_data(connection, "closed", G_CALLBACK(handler), user_data, NULL, (GConnectFlags)0);
}

/// The name and new owner of a NameOwnerChanged signal's (sss), borrowed from `parameters`.
static inline void bl_variant_get_name_owner_changed(GVariant *parameters, const gchar **name, const gchar **new_owner) {
    g_variant_get(parameters, "(&s&s&s)", name, NULL, new_owner);
}
#endif
