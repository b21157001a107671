import BrokerCore
import BrokerVault

extension BrokerEngine {
    /// The `reason` of a session signed out because the file vault's key is
    /// gone (docs/rpc.md): its tokens can never be read again.
    public static let vaultKeyLostReason = "VAULT_KEY_LOST"

    /// Items of the file vault that can never be read again: their key is
    /// gone from the kernel keyring (cleared, or the machine restarted), and
    /// the vault has deleted them. A signed-in session is signed out with
    /// `VAULT_KEY_LOST`; an owed sign-out revoke is dropped (its token is
    /// gone; the session ends at the server when it expires); an attempt's
    /// proofs are gone, so it fails when its callback arrives.
    public func vaultItemsLost(_ items: [[String: String]]) async {
        for item in items {
            let client = item["client"] ?? ""
            switch item["kind"] {
            case "session":
                logger.warning(
                    "session signed out: the file vault's key is gone from the kernel keyring (cleared, or the machine restarted), so its tokens can never be read; sign in again",
                    ["client": client, "reason": Self.vaultKeyLostReason])
                for slot in sessions.slots(forVaultItem: item) {
                    do { try await sessions.end(slot, status: .signedOut, reason: Self.vaultKeyLostReason) } catch {
                        logger.error("cannot record the signed-out session", ["client": client, "error": "\(error)"])
                    }
                }
            case "revoke":
                logger.warning(
                    "owed sign-out revoke dropped: its token was in the file vault, whose key is gone from the kernel keyring; the session ends at the server when it expires",
                    ["client": client])
                for slot in sessions.slots(forVaultItem: item) { sessions.revokeLost(slot) }
            default:
                logger.warning(
                    "sign-in attempt's proofs lost with the file vault's key; the attempt cannot finish, start a new sign-in",
                    ["client": client, "attempt.id": item["attempt"] ?? "-"])
            }
        }
    }
}

extension BrokerDaemon {
    /// Start-up of the file vault, before recovery: the items whose key is
    /// gone are deleted and their sessions signed out; a lookup that later
    /// finds such an item (the key cleared while the broker runs) does the same.
    static func openFileVault(_ vault: FileVault, engine: BrokerEngine, logger: Logger) async {
        let report = vault.sweep()
        if report.locked {
            logger.warning(
                "the file vault is locked: its key is sealed with a passphrase and is not in the kernel keyring (the machine restarted); nothing was deleted, and sessions answer VAULT_LOCKED until `browser-login vault unlock` is run",
                ["vault.directory": vault.directory, "code": "VAULT_LOCKED"])
        } else if let problem = report.problem {
            logger.warning(
                "the file vault's key cannot be read now; nothing was deleted, and sessions answer VAULT_UNAVAILABLE until it can",
                ["vault.directory": vault.directory, "error": problem])
        } else if !report.lost.isEmpty {
            logger.warning(
                "the file vault's key is gone from the kernel keyring (cleared, or the machine restarted): the items sealed with it can never be read and were deleted",
                [
                    "vault.directory": vault.directory, "vault.key": vault.keyring.description,
                    "items": "\(report.lost.count)",
                ])
        }
        for name in report.damaged {
            logger.warning(
                "the file vault holds a file that is not a readable vault item; it is kept, move it away",
                ["vault.directory": vault.directory, "file": name])
        }
        await engine.vaultItemsLost(report.lost)
        vault.onLost { items in
            engine.work.submit { await engine.vaultItemsLost(items) }
        }
        logger.notice(
            "using the file vault",
            [
                "vault": "file", "vault.directory": vault.directory, "vault.key": vault.keyring.description,
                "vault.key.present": report.keyPresent ? "yes" : "no", "vault.sealed": vault.isSealed ? "yes" : "no",
            ])
    }
}
