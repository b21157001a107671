#ifndef BROWSER_LOGIN_CJANSSON_SHIM_H
#define BROWSER_LOGIN_CJANSSON_SHIM_H
#include <jansson.h>

/// json_decref is a static inline in jansson.h that Swift imports poorly; wrap it.
static inline void bl_json_decref(json_t *json) { json_decref(json); }
static inline int bl_json_is_object(const json_t *json) { return json_is_object(json); }
#endif
