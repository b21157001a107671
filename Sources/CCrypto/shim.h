#ifndef BROWSER_LOGIN_CCRYPTO_SHIM_H
#define BROWSER_LOGIN_CCRYPTO_SHIM_H
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif
