#ifndef BROWSER_LOGIN_CCRYPTO_SHIM_H
#define BROWSER_LOGIN_CCRYPTO_SHIM_H
/* libcrypto, linked: the tests' signer (JOSETests). The programs load libcrypto on first use (CCryptoLoader). */
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

/// EVP_PKEY_PUBLIC_KEY is a multi-line macro that Swift does not import: the
/// selection for EVP_PKEY_fromdata of a public key.
static inline int bl_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }

#endif
