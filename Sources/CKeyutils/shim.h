#ifndef BROWSER_LOGIN_CKEYUTILS_SHIM_H
#define BROWSER_LOGIN_CKEYUTILS_SHIM_H
#include <keyutils.h>

/// The permissions of the file vault's key: everything for its possessor,
/// view and read for the user's other processes. A service started with
/// systemd's KeyringMode=private has a session keyring of its own that does
/// not link the user keyring, so it does not possess keys found there; it
/// reads the key through the user permission, as a shell of the same user
/// does. (KEY_POS_ALL and friends are macros Swift cannot import as one value.)
static inline key_perm_t bl_vault_key_permissions(void) {
    return KEY_POS_ALL | KEY_USR_VIEW | KEY_USR_READ;
}
static inline key_serial_t bl_user_keyring(void) { return KEY_SPEC_USER_KEYRING; }
#endif
