import BrokerCore
import BrokerVault

/// An in-memory `SecretVault` for unit tests, with the same matching rules as
/// `SecretServiceVault` (attributes `client`, `attempt`, `kind`; absent ones
/// count as ""; matches are exact) and a switch to simulate a missing or a
/// locked Secret Service.
public actor InMemoryVault: SecretVault {
    public enum Mode: Sendable, Equatable {
        case available
        case unavailable
        case locked
        /// Every operation fails with `.failed`.
        case failing
    }

    public struct Item: Sendable, Equatable {
        public var secret: [UInt8]
        public var label: String
        public var attributes: [String: String]
    }

    private var items: [[String: String]: Item] = [:]
    public private(set) var mode: Mode
    /// How many store, lookup and remove calls reached the vault.
    public private(set) var operationCount = 0

    public init(mode: Mode = .available) { self.mode = mode }

    public func setMode(_ mode: Mode) { self.mode = mode }

    /// All items, for assertions.
    public var allItems: [Item] { Array(items.values) }

    public func label(for attributes: [String: String]) -> String? { items[Self.key(attributes)]?.label }

    public func store(_ secret: [UInt8], label: String, attributes: [String: String]) async throws(VaultError) {
        try check(attributes)
        items[Self.key(attributes)] = Item(secret: secret, label: label, attributes: attributes)
    }

    public func lookup(attributes: [String: String]) async throws(VaultError) -> [UInt8]? {
        try check(attributes)
        return items[Self.key(attributes)]?.secret
    }

    public func remove(attributes: [String: String]) async throws(VaultError) {
        try check(attributes)
        items[Self.key(attributes)] = nil
    }

    public func health() async -> VaultHealth {
        switch mode {
        case .available: VaultHealth(available: true, locked: false, detail: "in-memory vault")
        case .unavailable: VaultHealth(available: false, locked: false, detail: VaultMessages.unavailable("simulated"))
        case .locked: VaultHealth(available: true, locked: true, detail: VaultMessages.locked)
        case .failing: VaultHealth(available: true, locked: false, detail: VaultMessages.failed("simulated"))
        }
    }

    private func check(_ attributes: [String: String]) throws(VaultError) {
        operationCount += 1
        switch mode {
        case .available: break
        case .unavailable: throw .unavailable(VaultMessages.unavailable("simulated"))
        case .locked: throw .locked(VaultMessages.locked)
        case .failing: throw .failed(VaultMessages.failed("simulated"))
        }
        try SecretServiceVault.validate(attributes)
    }

    private static func key(_ attributes: [String: String]) -> [String: String] {
        var key: [String: String] = [:]
        for name in schemaAttributeNames { key[name] = attributes[name] ?? "" }
        return key
    }
}
