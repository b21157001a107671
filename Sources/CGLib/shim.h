#ifndef BROWSER_LOGIN_CGLIB_SHIM_H
#define BROWSER_LOGIN_CGLIB_SHIM_H
/* GLib alone (no GIO): SHA-256 for every program (GChecksum). The broker maps GLib anyway (libsecret and
   GIO use it), so its digests load nothing more; libcrypto is loaded only when a signature or the file
   vault needs it (CCryptoLoader). */
#include <glib.h>

/// SHA-256 of `length` bytes into `digest` (32 bytes).
static inline void bl_sha256(const unsigned char *data, size_t length, unsigned char *digest) {
    GChecksum *checksum = g_checksum_new(G_CHECKSUM_SHA256);
    g_checksum_update(checksum, data, (gssize)length);
    gsize size = 32;
    g_checksum_get_digest(checksum, digest, &size);
    g_checksum_free(checksum);
}
#endif
