import BrokerCore
import BrokerVault
import Engine

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
