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
#endif
