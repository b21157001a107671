#ifndef BROWSER_LOGIN_CMICROHTTPDLOADER_SHIM_H
#define BROWSER_LOGIN_CMICROHTTPDLOADER_SHIM_H
// libmicrohttpd for the broker's loopback redirect listener, loaded on first use: the daemon does not link it,
// so neither it nor GnuTLS and its dependencies are mapped until an OAuth sign-in with a loopback redirect opens
// a listener. <microhttpd.h> gives the types and constants; the functions are resolved once with dlsym, through
// pointers of the functions' own declared types (MHD_start_daemon and MHD_get_daemon_info stay variadic).
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <microhttpd.h>
#include "../CLinux/library.h"

/// The soname of Debian's libmicrohttpd12.
#define BL_LMHD_SONAME "libmicrohttpd.so.12"

/// Every libmicrohttpd function the listener calls, as X(name).
#define BL_LMHD_FUNCTIONS(X)                                                                                          \
    X(MHD_start_daemon)                                                                                               \
    X(MHD_stop_daemon)                                                                                                \
    X(MHD_get_daemon_info)                                                                                            \
    X(MHD_create_response_from_buffer)                                                                                \
    X(MHD_add_response_header)                                                                                        \
    X(MHD_destroy_response)                                                                                           \
    X(MHD_queue_response)                                                                                             \
    X(MHD_lookup_connection_value)                                                                                    \
    X(MHD_get_connection_values)                                                                                      \
    X(MHD_get_connection_info)                                                                                        \
    X(MHD_suspend_connection)                                                                                         \
    X(MHD_resume_connection)

/// The resolved functions, or why they are not (`error`, empty once loaded).
struct bl_lmhd_library {
#define BL_LMHD_POINTER(name) __typeof__(name) *name;
    BL_LMHD_FUNCTIONS(BL_LMHD_POINTER)
#undef BL_LMHD_POINTER
    int loaded;
    char error[512];
};

/// The one library record of this program. A `static inline` function's static locals are one per object file
/// that uses it, so each such object loads once; dlopen counts references and answers the same handle.
static inline struct bl_lmhd_library *bl_lmhd_library_record(void) {
    static struct bl_lmhd_library library;
    return &library;
}

static inline void bl_lmhd_resolve(void) {
    struct bl_lmhd_library *library = bl_lmhd_library_record();
    // Never closed: the listener may be opened again, and libmicrohttpd's state is process-wide.
    void *handle = bl_library_open(BL_LMHD_SONAME, library->error, sizeof library->error);
    if (handle == NULL) return;
#define BL_LMHD_RESOLVE(name)                                                                                         \
    library->name = (__typeof__(name) *)bl_library_symbol(handle, BL_LMHD_SONAME, #name, library->error,              \
                                                          sizeof library->error);                                     \
    if (library->name == NULL) return;
    BL_LMHD_FUNCTIONS(BL_LMHD_RESOLVE)
#undef BL_LMHD_RESOLVE
    library->loaded = 1;
}

/// Loads libmicrohttpd once (later calls answer the first one's result). Answers 0, or -1 with why (dlerror's
/// text) copied into `error`. Call it, successfully, before any other function of this module.
static inline int bl_lmhd_load(char *error, size_t length) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, bl_lmhd_resolve);
    struct bl_lmhd_library *library = bl_lmhd_library_record();
    if (library->loaded) return 0;
    if (error != NULL && length > 0) snprintf(error, length, "%s", library->error);
    return -1;
}

// The start-up and daemon queries shared with CMicroHTTPD (bl_lmhd_start_loopback, bl_lmhd_bound_port,
// bl_lmhd_listen_fd, bl_lmhd_connection_fd, bl_lmhd_header_count), calling through the resolved pointers.
#define BL_MHD_NAME(name) bl_lmhd_##name
#define BL_MHD_CALL(function) (bl_lmhd_library_record()->function)
#include "../CMicroHTTPD/loopback.h"
#undef BL_MHD_NAME
#undef BL_MHD_CALL

// The functions the listener calls directly, through the resolved pointers.
static inline void bl_lmhd_stop_daemon(struct MHD_Daemon *daemon) {
    bl_lmhd_library_record()->MHD_stop_daemon(daemon);
}

static inline struct MHD_Response *bl_lmhd_create_response_from_buffer(size_t size, void *buffer,
                                                                       enum MHD_ResponseMemoryMode mode) {
    return bl_lmhd_library_record()->MHD_create_response_from_buffer(size, buffer, mode);
}

static inline enum MHD_Result bl_lmhd_add_response_header(struct MHD_Response *response, const char *header,
                                                          const char *content) {
    return bl_lmhd_library_record()->MHD_add_response_header(response, header, content);
}

static inline void bl_lmhd_destroy_response(struct MHD_Response *response) {
    bl_lmhd_library_record()->MHD_destroy_response(response);
}

static inline enum MHD_Result bl_lmhd_queue_response(struct MHD_Connection *connection, unsigned int status_code,
                                                     struct MHD_Response *response) {
    return bl_lmhd_library_record()->MHD_queue_response(connection, status_code, response);
}

static inline const char *bl_lmhd_lookup_connection_value(struct MHD_Connection *connection,
                                                          enum MHD_ValueKind kind, const char *key) {
    return bl_lmhd_library_record()->MHD_lookup_connection_value(connection, kind, key);
}

static inline void bl_lmhd_suspend_connection(struct MHD_Connection *connection) {
    bl_lmhd_library_record()->MHD_suspend_connection(connection);
}

static inline void bl_lmhd_resume_connection(struct MHD_Connection *connection) {
    bl_lmhd_library_record()->MHD_resume_connection(connection);
}
#endif
