// Test support for BrokerVaultTests: runs one vault operation against the
// Secret Service of the environment it is started in (a private bus, a
// locked keyring, no bus at all) and prints one line. Not shipped.
//
//   vault-probe health
//   vault-probe store CLIENT ATTEMPT SECRET
//   vault-probe lookup CLIENT ATTEMPT
//   vault-probe remove CLIENT ATTEMPT
//
// Prints `available=B locked=B`, `ok`, `found SECRET`, `missing`, or
// `unavailable: …` / `locked: …` / `failed: …`, then ` ms=N`.
import BrokerCore
import BrokerVault
import Foundation

@main struct VaultProbe {
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let vault = SecretServiceVault()
        let start = ContinuousClock.now
        var line: String
        func attributes() -> [String: String] { ["client": arguments[1], "attempt": arguments[2]] }
        do throws(VaultError) {
            switch (arguments.first, arguments.count) {
            case ("health", 1):
                let health = await vault.health()
                line = "available=\(health.available) locked=\(health.locked)"
            case ("store", 4):
                try await vault.store(Array(arguments[3].utf8), label: "vault-probe", attributes: attributes())
                line = "ok"
            case ("lookup", 3):
                line =
                    try await vault.lookup(attributes: attributes()).map { "found " + String(decoding: $0, as: UTF8.self) }
                    ?? "missing"
            case ("remove", 3):
                try await vault.remove(attributes: attributes())
                line = "ok"
            default:
                line = "usage: vault-probe health | store CLIENT ATTEMPT SECRET | lookup CLIENT ATTEMPT | remove CLIENT ATTEMPT"
            }
        } catch {
            switch error {
            case .unavailable(let m): line = "unavailable: " + m
            case .locked(let m): line = "locked: " + m
            case .failed(let m): line = "failed: " + m
            }
        }
        let elapsed = ContinuousClock.now - start
        let ms = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        print("\(line) ms=\(ms)")
    }
}
