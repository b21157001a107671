// The loopback redirect listener's start-up and daemon queries, shared by the linked module (CMicroHTTPD, shim.h)
// and the lazily loaded one (CMicroHTTPDLoader, shim.h). Textually included by each, after it has defined:
// - BL_MHD_NAME(name): the name of a function defined here (bl_mhd_NAME when linked, bl_lmhd_NAME when loaded),
//   so both modules' functions can coexist;
// - BL_MHD_CALL(function): how a libmicrohttpd function is called (the function itself when linked, a pointer
//   resolved by dlsym when loaded).
// No include guard: each module includes it once, with its own names.
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <microhttpd.h>

#ifndef BL_MHD_COMMON_TYPES
#define BL_MHD_COMMON_TYPES
/// The access handler and completion callback types, named so Swift can pass
/// `@convention(c)` closures to the typed wrappers.
typedef enum MHD_Result (*bl_mhd_access_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                                 const char *method, const char *version, const char *upload_data,
                                                 size_t *upload_data_size, void **req_cls);
typedef void (*bl_mhd_completed_handler)(void *cls, struct MHD_Connection *connection, void **req_cls,
                                         enum MHD_RequestTerminationCode toe);
typedef void *(*bl_mhd_uri_log_handler)(void *cls, const char *uri, struct MHD_Connection *connection);
typedef void (*bl_mhd_connection_handler)(void *cls, struct MHD_Connection *connection, void **socket_context,
                                          enum MHD_ConnectionNotificationCode toe);

/// What `header_count` counts: headers named `name` (case-insensitively).
struct bl_mhd_header_count {
    const char *name;
    unsigned int count;
};

static inline enum MHD_Result bl_mhd_count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                                  const char *value) {
    (void)kind;
    (void)value;
    struct bl_mhd_header_count *counting = (struct bl_mhd_header_count *)cls;
    if (key != NULL && strcasecmp(key, counting->name) == 0) counting->count += 1;
    return MHD_YES;
}

/// Why a start function returned NULL.
enum bl_mhd_start_error { BL_MHD_OK = 0, BL_MHD_BAD_ADDRESS = 1, BL_MHD_NO_TLS = 2, BL_MHD_START_FAILED = 3 };
#endif

/// Fills `storage` with `address` (an IPv4 or IPv6 literal) and `port`, and
/// adds MHD_USE_IPv6 to `flags` for IPv6. Answers -1 for anything else.
static inline int BL_MHD_NAME(address)(const char *address, uint16_t port, struct sockaddr_storage *storage,
                                       unsigned int *flags) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)storage;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)storage;
    if (inet_pton(AF_INET, address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        return 0;
    }
    if (inet_pton(AF_INET6, address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *flags |= MHD_USE_IPv6;
        return 0;
    }
    return -1;
}

/// The broker's loopback redirect listener (RFC 8252 §7.3): one internal
/// polling thread (poll()) with suspend/resume, bound to `address` (an IPv4 or
/// IPv6 literal; IPv6 without dual stack, so IPV6_V6ONLY) and `port` (0: any
/// free port); `uri_log` sees each request target exactly as received, and
/// `notify` each connection as it starts and closes (the listener's own
/// connection table: head deadline and eviction). `connection_limit` is
/// libmicrohttpd's hard limit (a connection beyond it is closed at accept);
/// no per-address limit: every local process shares the loopback addresses.
/// (MHD_start_daemon is variadic: Swift cannot call it.)
static inline struct MHD_Daemon *BL_MHD_NAME(start_loopback)(const char *address, uint16_t port,
                                                             unsigned int connection_limit,
                                                             unsigned int timeout_seconds, size_t memory_limit,
                                                             bl_mhd_access_handler handler, void *handler_cls,
                                                             bl_mhd_completed_handler completed, void *completed_cls,
                                                             bl_mhd_uri_log_handler uri_log, void *uri_log_cls,
                                                             bl_mhd_connection_handler notify, void *notify_cls,
                                                             int *error_out) {
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof storage);
    unsigned int flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (BL_MHD_NAME(address)(address, port, &storage, &flags) != 0) {
        *error_out = BL_MHD_BAD_ADDRESS;
        return NULL;
    }
    struct MHD_Daemon *daemon = BL_MHD_CALL(MHD_start_daemon)(
        flags, port, NULL, NULL, handler, handler_cls, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&storage,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls, MHD_OPTION_URI_LOG_CALLBACK, uri_log, uri_log_cls,
        MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls, MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
        MHD_OPTION_END);
    *error_out = daemon == NULL ? BL_MHD_START_FAILED : BL_MHD_OK;
    return daemon;
}

/// A connection's socket (MHD_get_connection_info is variadic), or -1.
static inline int BL_MHD_NAME(connection_fd)(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        BL_MHD_CALL(MHD_get_connection_info)(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// How many request headers named `name` (case-insensitively) the request has.
static inline unsigned int BL_MHD_NAME(header_count)(struct MHD_Connection *connection, const char *name) {
    struct bl_mhd_header_count counting = {name, 0};
    (void)BL_MHD_CALL(MHD_get_connection_values)(connection, MHD_HEADER_KIND, bl_mhd_count_header, &counting);
    return counting.count;
}

/// The port the daemon listens on (MHD_get_daemon_info is variadic).
static inline uint16_t BL_MHD_NAME(bound_port)(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = BL_MHD_CALL(MHD_get_daemon_info)(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// The daemon's listening socket (MHD_get_daemon_info is variadic), or -1.
static inline int BL_MHD_NAME(listen_fd)(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = BL_MHD_CALL(MHD_get_daemon_info)(daemon, MHD_DAEMON_INFO_LISTEN_FD);
    return info == NULL ? -1 : info->listen_fd;
}
