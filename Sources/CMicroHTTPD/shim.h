#ifndef BROWSER_LOGIN_CMICROHTTPD_SHIM_H
#define BROWSER_LOGIN_CMICROHTTPD_SHIM_H
// The linked library: libmicrohttpd's functions are called directly (LoginServer, the bench, the tests). The
// broker's loopback listener loads the library on first use instead (CMicroHTTPDLoader).
#define BL_MHD_NAME(name) bl_mhd_##name
#define BL_MHD_CALL(function) function
#include "loopback.h"
#undef BL_MHD_NAME
#undef BL_MHD_CALL

/// MHD_start_daemon is variadic: this typed wrapper starts a daemon bound to
/// `address` (an IPv4 or IPv6 literal) and `port` (0: any free port), its
/// options given as one array. `flags` say how it polls and threads; a
/// `pool_threads` above 0 adds a thread pool of that size. TLS (GnuTLS) is on
/// when both PEM strings are non-NULL.
static inline struct MHD_Daemon *bl_mhd_start_with(unsigned int flags, unsigned int pool_threads,
                                                   const char *address, uint16_t port, const char *tls_key_pem,
                                                   const char *tls_cert_pem, unsigned int connection_limit,
                                                   unsigned int timeout_seconds, bl_mhd_access_handler handler,
                                                   void *handler_cls, bl_mhd_completed_handler completed,
                                                   void *completed_cls, int *error_out) {
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof storage);
    if (bl_mhd_address(address, port, &storage, &flags) != 0) {
        *error_out = BL_MHD_BAD_ADDRESS;
        return NULL;
    }
    struct MHD_OptionItem options[8];
    unsigned int n = 0;
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &storage};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, (intptr_t)connection_limit, NULL};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)timeout_seconds, NULL};
    if (pool_threads > 0) {
        options[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)pool_threads, NULL};
    }
    if (tls_key_pem != NULL && tls_cert_pem != NULL) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            *error_out = BL_MHD_NO_TLS;
            return NULL;
        }
        flags |= MHD_USE_TLS;
        options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)tls_key_pem};
        options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)tls_cert_pem};
    }
    options[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls, MHD_OPTION_ARRAY,
                                                 options, MHD_OPTION_END);
    *error_out = daemon == NULL ? BL_MHD_START_FAILED : BL_MHD_OK;
    return daemon;
}

/// One internal polling thread (poll(), no FD_SETSIZE limit) and one thread
/// per connection. The bench's minimal handler (its baseline for the server)
/// runs on it; the server itself on `bl_mhd_start_pool`.
static inline struct MHD_Daemon *bl_mhd_start(const char *address, uint16_t port, const char *tls_key_pem,
                                              const char *tls_cert_pem, unsigned int connection_limit,
                                              unsigned int timeout_seconds, bl_mhd_access_handler handler,
                                              void *handler_cls, bl_mhd_completed_handler completed,
                                              void *completed_cls, int *error_out) {
    return bl_mhd_start_with(MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, address, port,
                             tls_key_pem, tls_cert_pem, connection_limit, timeout_seconds, handler, handler_cls,
                             completed, completed_cls, error_out);
}

/// The reference server's listener: `threads` internal polling threads
/// (libmicrohttpd's thread pool; 1: a single one), each watching its share of
/// the connections with epoll (poll() where libmicrohttpd has no epoll), and
/// suspend/resume allowed: the access handler suspends a request's connection
/// while one of the server's own worker threads makes the answer, so a handler
/// that waits (a commit, a mail, a provider, the test exchange delay) never
/// holds up the connections that share its polling thread. No thread is made
/// per connection.
static inline struct MHD_Daemon *bl_mhd_start_pool(const char *address, uint16_t port, const char *tls_key_pem,
                                                   const char *tls_cert_pem, unsigned int connection_limit,
                                                   unsigned int timeout_seconds, unsigned int threads,
                                                   bl_mhd_access_handler handler, void *handler_cls,
                                                   bl_mhd_completed_handler completed, void *completed_cls,
                                                   int *error_out) {
    unsigned int flags = MHD_ALLOW_SUSPEND_RESUME;
    flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL_INTERNAL_THREAD
                                                                    : MHD_USE_POLL_INTERNAL_THREAD;
    // libmicrohttpd shares the connection limit out between the pool's threads: at least one each.
    if (threads < 1) threads = 1;
    if (threads > connection_limit) threads = connection_limit;
    return bl_mhd_start_with(flags, threads, address, port, tls_key_pem, tls_cert_pem, connection_limit,
                             timeout_seconds, handler, handler_cls, completed, completed_cls, error_out);
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
#endif
