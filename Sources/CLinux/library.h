#ifndef BROWSER_LOGIN_CLINUX_LIBRARY_H
#define BROWSER_LOGIN_CLINUX_LIBRARY_H
// Loading a C library on first use (dlopen, in glibc's libc), for the loader modules whose programs do not
// link the library (CMicroHTTPDLoader, CCryptoLoader). Included by their shims, not part of the CLinux module.
#include <dlfcn.h>
#include <stdio.h>

/// dlopen(soname, RTLD_NOW | RTLD_LOCAL), or NULL with dlerror's text copied into `error`. RTLD_LOCAL: the
/// library's symbols (and its dependencies') stay out of the global namespace. Never closed by its users.
static inline void *bl_library_open(const char *soname, char *error, size_t length) {
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL && error != NULL && length > 0) {
        const char *why = dlerror();
        snprintf(error, length, "%s", why != NULL ? why : "dlopen failed");
    }
    return handle;
}

/// dlsym(handle, name), or NULL with "SONAME: no symbol NAME" copied into `error`.
static inline void *bl_library_symbol(void *handle, const char *soname, const char *name, char *error,
                                      size_t length) {
    void *symbol = dlsym(handle, name);
    if (symbol == NULL && error != NULL && length > 0) snprintf(error, length, "%s: no symbol %s", soname, name);
    return symbol;
}
#endif
