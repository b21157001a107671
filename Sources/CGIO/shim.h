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
#endif
