#ifndef BROWSER_LOGIN_CARGON2_SHIM_H
#define BROWSER_LOGIN_CARGON2_SHIM_H
// Argon2id (RFC 9106), Debian's libargon2: the file vault's passphrase-sealed key.
#include <argon2.h>
#endif
