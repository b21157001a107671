#ifndef BROWSER_LOGIN_CGIO_SHIM_H
#define BROWSER_LOGIN_CGIO_SHIM_H
#include <gio/gio.h>
#include <glib.h>

/// g_variant_new is variadic: typed constructors for the replies we build.
static inline GVariant *bl_variant_new_empty_tuple(void) { return g_variant_new_tuple(NULL, 0); }
#endif
