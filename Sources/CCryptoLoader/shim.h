#ifndef BROWSER_LOGIN_CCRYPTOLOADER_SHIM_H
#define BROWSER_LOGIN_CCRYPTOLOADER_SHIM_H
// libcrypto, loaded on first use. Loading it costs a process ≈ 1.6 MiB of resident memory whatever it calls
// (its relocations and symbol tables), and the broker needs it only for a standard provider's ID-token
// signatures and the file vault: a Browser Login sign-in hashes with GLib and takes its randomness from the
// kernel. <openssl/...> gives the types and constants; the functions are resolved once with dlsym, through
// pointers of the functions' own declared types (BrowserLoginProtocol's LibCrypto holds the table).
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
/* getrandom(2): Crypto.randomBytes takes its bytes from the kernel. */
#include <sys/random.h>
#include "../CLinux/library.h"

/// The soname of Debian's libssl3 (OpenSSL 3's libcrypto).
#define BL_CRYPTO_SONAME "libcrypto.so.3"

/// Every libcrypto function the programs call, as X(name).
#define BL_CRYPTO_FUNCTIONS(X)                                                                                        \
    X(OPENSSL_init_crypto)                                                                                            \
    X(ERR_clear_error)                                                                                                \
    X(HMAC)                                                                                                           \
    X(EVP_sha256)                                                                                                     \
    X(EVP_aes_256_gcm)                                                                                                \
    X(EVP_CIPHER_CTX_new)                                                                                             \
    X(EVP_CIPHER_CTX_free)                                                                                            \
    X(EVP_CIPHER_CTX_ctrl)                                                                                            \
    X(EVP_EncryptInit_ex)                                                                                             \
    X(EVP_EncryptUpdate)                                                                                              \
    X(EVP_EncryptFinal_ex)                                                                                            \
    X(EVP_DecryptInit_ex)                                                                                             \
    X(EVP_DecryptUpdate)                                                                                              \
    X(EVP_DecryptFinal_ex)                                                                                            \
    X(EVP_MD_CTX_new)                                                                                                 \
    X(EVP_MD_CTX_free)                                                                                                \
    X(EVP_DigestVerifyInit)                                                                                           \
    X(EVP_DigestVerify)                                                                                               \
    X(EVP_PKEY_free)                                                                                                  \
    X(EVP_PKEY_get_bits)                                                                                              \
    X(EVP_PKEY_new_raw_public_key)                                                                                    \
    X(EVP_PKEY_CTX_new_from_name)                                                                                     \
    X(EVP_PKEY_CTX_free)                                                                                              \
    X(EVP_PKEY_fromdata_init)                                                                                         \
    X(EVP_PKEY_fromdata)                                                                                              \
    X(EVP_PKEY_CTX_set_rsa_padding)                                                                                   \
    X(EVP_PKEY_CTX_set_rsa_pss_saltlen)                                                                               \
    X(EVP_PKEY_CTX_set_rsa_mgf1_md)                                                                                   \
    X(BN_bin2bn)                                                                                                      \
    X(BN_free)                                                                                                        \
    X(BN_is_odd)                                                                                                      \
    X(BN_num_bits)                                                                                                    \
    X(ECDSA_SIG_new)                                                                                                  \
    X(ECDSA_SIG_free)                                                                                                 \
    X(ECDSA_SIG_set0)                                                                                                 \
    X(i2d_ECDSA_SIG)                                                                                                  \
    X(OSSL_PARAM_BLD_new)                                                                                             \
    X(OSSL_PARAM_BLD_free)                                                                                            \
    X(OSSL_PARAM_BLD_push_BN)                                                                                         \
    X(OSSL_PARAM_BLD_push_utf8_string)                                                                                \
    X(OSSL_PARAM_BLD_push_octet_string)                                                                               \
    X(OSSL_PARAM_BLD_to_param)                                                                                        \
    X(OSSL_PARAM_free)                                                                                                \
    X(EVP_PKEY_keygen_init)                                                                                           \
    X(EVP_PKEY_CTX_set_group_name)                                                                                    \
    X(EVP_PKEY_generate)                                                                                              \
    X(EVP_PKEY_get_bn_param)                                                                                          \
    X(EVP_PKEY_get_octet_string_param)                                                                                \
    X(BN_bn2binpad)                                                                                                   \
    X(BN_clear_free)                                                                                                  \
    X(EVP_DigestSignInit)                                                                                             \
    X(EVP_DigestSign)                                                                                                 \
    X(d2i_ECDSA_SIG)                                                                                                  \
    X(ECDSA_SIG_get0_r)                                                                                               \
    X(ECDSA_SIG_get0_s)

/// The resolved functions. Swift calls them as members (`LibCrypto.functions.EVP_sha256()`).
struct bl_crypto_functions {
#define BL_CRYPTO_POINTER(name) __typeof__(name) *_Nonnull name;
    BL_CRYPTO_FUNCTIONS(BL_CRYPTO_POINTER)
#undef BL_CRYPTO_POINTER
};

/// Loads libcrypto (dlopen, RTLD_NOW | RTLD_LOCAL: its symbols stay out of the global namespace) and fills
/// `functions`. With `skip_configuration`, libcrypto is told not to read the system's openssl.cnf
/// (OPENSSL_INIT_NO_LOAD_CONFIG) before anything else runs in it. Answers 0, or -1 with why copied into
/// `error`. `soname` is BL_CRYPTO_SONAME (the tests open a missing name). Call once: LibCrypto does.
static inline int bl_crypto_load(const char *soname, int skip_configuration, struct bl_crypto_functions *functions,
                                 char *error, size_t length) {
    // Never closed: the functions are kept for the life of the process.
    void *handle = bl_library_open(soname, error, length);
    if (handle == NULL) return -1;
#define BL_CRYPTO_RESOLVE(name)                                                                                       \
    functions->name = (__typeof__(name) *)bl_library_symbol(handle, soname, #name, error, length);                    \
    if (functions->name == NULL) return -1;
    BL_CRYPTO_FUNCTIONS(BL_CRYPTO_RESOLVE)
#undef BL_CRYPTO_RESOLVE
    if (skip_configuration) functions->OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
    return 0;
}

/// EVP_PKEY_PUBLIC_KEY is a multi-line macro that Swift does not import: the selection for EVP_PKEY_fromdata
/// of a public key.
static inline int bl_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }
/// EVP_PKEY_KEYPAIR likewise: the selection for EVP_PKEY_fromdata of a private key with its public part (DPoP).
static inline int bl_evp_pkey_keypair_selection(void) { return EVP_PKEY_KEYPAIR; }

/// Compares `length` bytes in time that depends only on `length` (what CRYPTO_memcmp does, without loading
/// libcrypto for it): every byte is read, the differences accumulate, and the accumulator is volatile so the
/// compiler cannot stop at the first one.
static inline int bl_constant_time_equals(const void *a, const void *b, size_t length) {
    const volatile unsigned char *x = (const volatile unsigned char *)a;
    const volatile unsigned char *y = (const volatile unsigned char *)b;
    volatile unsigned char difference = 0;
    for (size_t i = 0; i < length; i++) difference |= x[i] ^ y[i];
    return difference == 0;
}
#endif
