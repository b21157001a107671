#ifndef BROWSER_LOGIN_CCBOR_SHIM_H
#define BROWSER_LOGIN_CCBOR_SHIM_H
// libcbor (Debian's libcbor-dev): the reference server reads WebAuthn's CBOR
// (attestation objects, COSE keys) with it.
#include <cbor.h>

/// True when the load succeeded (CBOR_ERR_NONE), without naming the enum's case in Swift.
static inline int bl_cbor_load_ok(const struct cbor_load_result *result) { return result->error.code == CBOR_ERR_NONE; }

/// The items that definite arrays and maps claim (a map's pairs count twice), summed.
struct bl_cbor_claims {
    size_t sum;
};

static inline void bl_cbor_claim(void *context, size_t items) {
    struct bl_cbor_claims *claims = (struct bl_cbor_claims *)context;
    claims->sum = items > SIZE_MAX - claims->sum ? SIZE_MAX : claims->sum + items;
}
static inline void bl_cbor_claim_array(void *context, size_t size) { bl_cbor_claim(context, size); }
static inline void bl_cbor_claim_map(void *context, size_t size) {
    bl_cbor_claim(context, size);
    bl_cbor_claim(context, size);
}

/// True when the definite arrays and maps of `data` claim no more items in all
/// than `data` has bytes (each item takes one at least), read with libcbor's
/// streaming decoder up to its first error. cbor_load allocates a container's
/// claimed slots before reading them: without this, a few bytes claiming
/// billions of items make it allocate gigabytes.
static inline int bl_cbor_claims_fit(const unsigned char *data, size_t length) {
    struct cbor_callbacks callbacks = cbor_empty_callbacks;
    callbacks.array_start = bl_cbor_claim_array;
    callbacks.map_start = bl_cbor_claim_map;
    struct bl_cbor_claims claims = {0};
    size_t offset = 0;
    while (offset < length) {
        struct cbor_decoder_result result = cbor_stream_decode(data + offset, length - offset, &callbacks, &claims);
        if (claims.sum > length) return 0;
        if (result.status != CBOR_DECODER_FINISHED || result.read == 0) break;
        offset += result.read;
    }
    return claims.sum <= length;
}
#endif
