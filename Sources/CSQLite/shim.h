#ifndef BROWSER_LOGIN_CSQLITE_SHIM_H
#define BROWSER_LOGIN_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type bl_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// sqlite3_config is variadic: typed wrappers for the options we use.
static inline int bl_sqlite_config_multithread(void) { return sqlite3_config(SQLITE_CONFIG_MULTITHREAD); }
#endif
