#ifndef BROWSER_LOGIN_CCRYPTO_SHIM_H
#define BROWSER_LOGIN_CCRYPTO_SHIM_H
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
/* getrandom(2): Crypto.randomBytes takes its bytes from the kernel. */
#include <sys/random.h>

/// EVP_PKEY_PUBLIC_KEY is a multi-line macro that Swift does not import: the
/// selection for EVP_PKEY_fromdata of a public key.
static inline int bl_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }

/* SHA-256 without libcrypto's provider machinery. The first EVP digest in a
   process loads and activates the default provider, ≈ 1.2 MiB of the daemon's
   resident memory, to hash one PKCE verifier per sign-in; the SHA256_*
   functions compute the same digest directly. OpenSSL 3 deprecates them in
   favour of EVP (for providers and FIPS, which a PKCE challenge does not need)
   but keeps them; CryptoTests checks the known answers. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline void bl_sha256(const unsigned char *data, size_t length, unsigned char *digest) {
    SHA256_CTX context;
    SHA256_Init(&context);
    SHA256_Update(&context, data, length);
    SHA256_Final(digest, &context);
}
#pragma GCC diagnostic pop
#endif
