#ifndef BROWSER_LOGIN_CCBOR_SHIM_H
#define BROWSER_LOGIN_CCBOR_SHIM_H
// libcbor (Debian's libcbor-dev): the reference server reads WebAuthn's CBOR
// (attestation objects, COSE keys) with it.
#include <cbor.h>

/// True when the load succeeded (CBOR_ERR_NONE), without naming the enum's case in Swift.
static inline int bl_cbor_load_ok(const struct cbor_load_result *result) { return result->error.code == CBOR_ERR_NONE; }
#endif
