// Test support for BrokerVaultTests: runs one vault operation against the
// Secret Service of the environment it is started in (a private bus, a
// locked keyring, no bus at all) and prints one line. Not shipped.
//
//   vault-probe health
//   vault-probe store CLIENT ATTEMPT SECRET
//   vault-probe lookup CLIENT ATTEMPT
//   vault-probe remove CLIENT ATTEMPT
//   vault-probe rounds CLIENT N    (the broker's pattern N times: prints `grew KIB`)
//   vault-probe startup-race       (the daemon's start-up: a thread connects to the
//                                   session bus while the vault makes its first call)
//
// Prints `available=B locked=B`, `ok`, `found SECRET`, `missing`, or
// `unavailable: …` / `locked: …` / `failed: …`, then ` ms=N`.
import BrokerCore
import BrokerVault
import CMalloc
import CSecret
import Foundation

/// RssAnon of this process in KiB, after giving freed heap pages back.
func restingAnonymousKiB() -> Int {
    _ = malloc_trim(0)
    guard let file = fopen("/proc/self/status", "r") else { return 0 }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(decoding: line.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix("RssAnon:") { return Int(text.filter(\.isNumber)) ?? 0 }
    }
    return 0
}

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
            case ("rounds", 3):
                // Store an attempt's proof, look it up, replace a session, remove the proof.
                let client = arguments[1]
                func round(_ i: Int) async throws(VaultError) {
                    let proof = ["client": client, "attempt": "att-\(i)", "kind": "verifier"]
                    try await vault.store(Array("verifier-\(i)".utf8), label: "proof", attributes: proof)
                    _ = try await vault.lookup(attributes: proof)
                    try await vault.store(
                        Array("session-\(i)".utf8), label: "session", attributes: ["client": client, "kind": "session"])
                    try await vault.remove(attributes: proof)
                }
                for i in 0..<60 { try await round(i) }
                let before = restingAnonymousKiB()
                for i in 60..<(60 + (Int(arguments[2]) ?? 0)) { try await round(i) }
                let after = restingAnonymousKiB()
                try await vault.remove(attributes: ["client": client, "kind": "session"])
                line = "grew \(after - before)"
            case ("startup-race", 1):
                // As the daemon starts: the vault exists, then its D-Bus thread
                // connects (g_bus_get_sync) while recovery makes the vault's
                // first call. Both touch GLib's types first at the same time.
                let go = DispatchSemaphore(value: 0)
                let thread = Thread {
                    go.wait()
                    var error: UnsafeMutablePointer<GError>?
                    if let connection = g_bus_get_sync(G_BUS_TYPE_SESSION, nil, &error) {
                        g_object_unref(UnsafeMutableRawPointer(connection))
                    }
                    if let error { g_error_free(error) }
                }
                thread.start()
                go.signal()
                let health = await vault.health()
                line = "available=\(health.available) locked=\(health.locked)"
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
