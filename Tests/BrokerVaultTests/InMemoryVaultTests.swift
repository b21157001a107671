import BrokerCore
import BrokerTestDoubles
import Testing

@testable import BrokerVault

@Suite struct InMemoryVaultTests {
    @Test func matchesLikeTheKeyring() async throws {
        let vault = InMemoryVault()
        try await vault.store([1], label: "Sign-in for Notes", attributes: ["client": "c", "attempt": "a"])
        try await vault.store([2], label: "session", attributes: ["client": "c", "kind": "session"])
        #expect(try await vault.lookup(attributes: ["client": "c", "attempt": "a"]) == [1])
        #expect(try await vault.lookup(attributes: ["client": "c"]) == nil)
        #expect(await vault.label(for: ["client": "c", "attempt": "a", "kind": ""]) == "Sign-in for Notes")
        try await vault.store([3], label: "session", attributes: ["client": "c", "kind": "session"])
        #expect(try await vault.lookup(attributes: ["kind": "session", "client": "c"]) == [3])
        try await vault.remove(attributes: ["client": "c", "attempt": "a"])
        #expect(await vault.allItems.count == 1)
        await #expect(throws: VaultError.self) { try await vault.lookup(attributes: ["user": "u"]) }
    }

    @Test func simulatesAMissingOrLockedService() async throws {
        let vault = InMemoryVault()
        try await vault.store([1], label: "x", attributes: ["client": "c"])
        await vault.setMode(.locked)
        await #expect(throws: VaultError.locked(VaultMessages.locked)) { try await vault.lookup(attributes: ["client": "c"]) }
        #expect(await vault.health() == VaultHealth(available: true, locked: true, detail: VaultMessages.locked))
        await vault.setMode(.unavailable)
        let error = await #expect(throws: VaultError.self) { try await vault.store([2], label: "x", attributes: ["client": "c"]) }
        guard case .unavailable = error else {
            Issue.record("expected unavailable, got \(String(describing: error))")
            return
        }
        #expect(await vault.health().available == false)
        await vault.setMode(.available)
        #expect(try await vault.lookup(attributes: ["client": "c"]) == [1])
    }
}
