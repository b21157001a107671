#ifndef BROWSER_LOGIN_CMICROHTTPD_SHIM_H
#define BROWSER_LOGIN_CMICROHTTPD_SHIM_H
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <microhttpd.h>

/// The access handler and completion callback types, named so Swift can pass
/// `@convention(c)` closures to the typed wrappers below.
typedef enum MHD_Result (*bl_mhd_access_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                                 const char *method, const char *version, const char *upload_data,
                                                 size_t *upload_data_size, void **req_cls);
typedef void (*bl_mhd_completed_handler)(void *cls, struct MHD_Connection *connection, void **req_cls,
                                         enum MHD_RequestTerminationCode toe);

/// Why bl_mhd_start returned NULL.
enum bl_mhd_start_error { BL_MHD_OK = 0, BL_MHD_BAD_ADDRESS = 1, BL_MHD_NO_TLS = 2, BL_MHD_START_FAILED = 3 };

/// Fills `storage` with `address` (an IPv4 or IPv6 literal) and `port`, and
/// adds MHD_USE_IPv6 to `flags` for IPv6. Answers -1 for anything else.
static inline int bl_mhd_address(const char *address, uint16_t port, struct sockaddr_storage *storage,
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

/// MHD_start_daemon is variadic: this typed wrapper starts a daemon with one
/// internal polling thread (poll(), no FD_SETSIZE limit) and one thread per
/// connection, bound to `address` (an IPv4 or IPv6 literal) and `port` (0: any
/// free port). TLS (GnuTLS) is on when both PEM strings are non-NULL.
static inline struct MHD_Daemon *bl_mhd_start(const char *address, uint16_t port, const char *tls_key_pem,
                                              const char *tls_cert_pem, unsigned int connection_limit,
                                              unsigned int timeout_seconds, bl_mhd_access_handler handler,
                                              void *handler_cls, bl_mhd_completed_handler completed,
                                              void *completed_cls, int *error_out) {
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof storage);
    unsigned int flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    if (bl_mhd_address(address, port, &storage, &flags) != 0) {
        *error_out = BL_MHD_BAD_ADDRESS;
        return NULL;
    }
    struct MHD_Daemon *daemon;
    if (tls_key_pem != NULL && tls_cert_pem != NULL) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            *error_out = BL_MHD_NO_TLS;
            return NULL;
        }
        daemon = MHD_start_daemon(flags | MHD_USE_TLS, port, NULL, NULL, handler, handler_cls,
                                  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&storage,
                                  MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                                  MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                                  MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                                  MHD_OPTION_HTTPS_MEM_KEY, tls_key_pem,
                                  MHD_OPTION_HTTPS_MEM_CERT, tls_cert_pem,
                                  MHD_OPTION_END);
    } else {
        daemon = MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                                  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&storage,
                                  MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                                  MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                                  MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                                  MHD_OPTION_END);
    }
    *error_out = daemon == NULL ? BL_MHD_START_FAILED : BL_MHD_OK;
    return daemon;
}

/// The port the daemon listens on (MHD_get_daemon_info is variadic).
static inline uint16_t bl_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// Writes the peer's address as text into `buffer` (MHD_get_connection_info is
/// variadic). Answers 0 on success.
static inline int bl_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t length) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return -1;
    const struct sockaddr *address = info->client_addr;
    const void *raw;
    if (address->sa_family == AF_INET) {
        raw = &((const struct sockaddr_in *)address)->sin_addr;
    } else if (address->sa_family == AF_INET6) {
        raw = &((const struct sockaddr_in6 *)address)->sin6_addr;
    } else {
        return -1;
    }
    return inet_ntop(address->sa_family, raw, buffer, (socklen_t)length) == NULL ? -1 : 0;
}
typedef void *(*bl_mhd_uri_log_handler)(void *cls, const char *uri, struct MHD_Connection *connection);

/// The broker's loopback redirect listener (RFC 8252 §7.3): one internal
/// polling thread (poll()) with suspend/resume, bound to `address` (an IPv4 or
/// IPv6 literal; IPv6 without dual stack, so IPV6_V6ONLY) and `port` (0: any
/// free port); `uri_log` sees each request target exactly as received.
static inline struct MHD_Daemon *bl_mhd_start_loopback(const char *address, uint16_t port,
                                                       unsigned int connection_limit, unsigned int per_ip_limit,
                                                       unsigned int timeout_seconds, size_t memory_limit,
                                                       bl_mhd_access_handler handler, void *handler_cls,
                                                       bl_mhd_completed_handler completed, void *completed_cls,
                                                       bl_mhd_uri_log_handler uri_log, void *uri_log_cls,
                                                       int *error_out) {
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof storage);
    unsigned int flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (bl_mhd_address(address, port, &storage, &flags) != 0) {
        *error_out = BL_MHD_BAD_ADDRESS;
        return NULL;
    }
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, port, NULL, NULL, handler, handler_cls, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&storage,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls, MHD_OPTION_URI_LOG_CALLBACK, uri_log, uri_log_cls,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
        MHD_OPTION_END);
    *error_out = daemon == NULL ? BL_MHD_START_FAILED : BL_MHD_OK;
    return daemon;
}

/// The daemon's listening socket (MHD_get_daemon_info is variadic), or -1.
static inline int bl_mhd_listen_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_LISTEN_FD);
    return info == NULL ? -1 : info->listen_fd;
}
#endif
