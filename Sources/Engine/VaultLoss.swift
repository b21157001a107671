import BrokerCore

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
