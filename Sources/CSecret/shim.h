#ifndef BROWSER_LOGIN_CSECRET_SHIM_H
#define BROWSER_LOGIN_CSECRET_SHIM_H
#include <libsecret/secret.h>

/// g_hash_table_new_full with string keys and values owned by the table.
static inline GHashTable *bl_secret_attributes_new(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}
static inline void bl_secret_attributes_insert(GHashTable *t, const char *k, const char *v) {
    g_hash_table_insert(t, g_strdup(k), g_strdup(v));
}

/// The broker's schema (secret_schema_new is variadic and allocates; this
/// one is static and never freed). Every item carries all three attributes
/// (absent ones as ""), so a search by all three matches exactly one set.
static inline const SecretSchema *bl_broker_schema(void) {
    static const SecretSchema schema = {
        "org.browserlogin.Broker",
        SECRET_SCHEMA_NONE,
        {
            { "client", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { "attempt", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { "kind", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { NULL, 0 },
        },
    };
    return &schema;
}

/// Registers and initialises the GObject types libsecret's first call needs
/// (GDBusConnection, GDBusProxy, SecretService, SecretCollection, SecretItem),
/// on the calling thread. GLib can deadlock when one thread registers a type
/// with interfaces (g_bus_get_sync -> g_dbus_connection_get_type ->
/// g_type_add_interface_static, waiting for the class-init lock) while
/// another initialises a class that needs that type (secret_service_get ->
/// g_type_class_ref, holding the class-init lock, waiting in
/// g_once_init_enter for the first thread's registration). Call this once,
/// before a second thread uses GIO.
static inline void bl_secret_prepare_types(void) {
    GType types[] = {
        g_dbus_connection_get_type(), g_dbus_proxy_get_type(), secret_service_get_type(),
        secret_collection_get_type(), secret_item_get_type(),
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        g_type_class_unref(g_type_class_ref(types[i]));
    }
}

/// Frees a GList of GObjects that the list owns (one reference each).
static inline void bl_secret_free_object_list(GList *list) {
    g_list_free_full(list, g_object_unref);
}

/// A GAsyncReadyCallback that keeps a reference to the result in the slot
/// its user data points at (a `GAsyncResult *`, NULL until the call ends).
static inline void bl_secret_keep_result(GObject *source, GAsyncResult *result, gpointer slot) {
    (void)source;
    *(GAsyncResult **)slot = g_object_ref(result);
}

/// Iterates `context` until the call whose result lands in `slot` has ended,
/// then hands over the reference to the result.
static inline GAsyncResult *bl_secret_wait(GMainContext *context, GAsyncResult **slot) {
    while (*slot == NULL) {
        g_main_context_iteration(context, TRUE);
    }
    return *slot;
}

/// The bus connection of a Secret Service proxy must never end the process
/// when the bus goes away (GDBus's default for shared bus connections is to
/// raise SIGTERM): the broker reconnects instead.
static inline void bl_secret_keep_running_on_close(SecretService *service) {
    g_dbus_connection_set_exit_on_close(g_dbus_proxy_get_connection(G_DBUS_PROXY(service)), FALSE);
}

/// Whether the Secret Service proxy's bus connection has closed (the bus died).
static inline gboolean bl_secret_connection_closed(SecretService *service) {
    return g_dbus_connection_is_closed(g_dbus_proxy_get_connection(G_DBUS_PROXY(service)));
}
#endif
