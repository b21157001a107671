import BrokerCore
import Synchronization
import SystemSupport

/// A `SecretVault` over libsecret (the freedesktop Secret Service:
/// gnome-keyring, KeePassXC, KWallet).
///
/// - Items use the schema `org.browserlogin.Broker` with the attributes
///   `client`, `attempt` and `kind`. Every item carries all three (an
///   attribute the caller leaves out is stored as ""), so a lookup, a
///   replace or a removal matches exactly the attributes given, never an
///   item that merely has more of them.
/// - Secrets are stored as the bytes given, with the content type
///   `application/octet-stream` (libsecret's binary API): NUL bytes and
///   non-UTF-8 bytes survive, and nothing is asked of the caller's encoding.
/// - Items are stored in the default collection (the login keyring); a
///   locked one is unlocked first, which on a desktop shows the keyring's
///   prompt and waits for the user.
/// - Every libsecret call runs on the vault's own serial queue, never on the
///   caller's, because a prompt blocks the call until the user answers. The
///   queue is one per process, shared by all instances: libsecret keeps one
///   `SecretService` connection per process, and its sync calls are
///   serialised rather than trusted to run side by side.
public final class SecretServiceVault: SecretVault {
    /// The vault's serial queue: one thread of its own (a call may block for as long as a prompt is
    /// open), started on the first call and then kept, asleep while there is nothing to do.
    private static let sharedQueue = ThreadPool(name: "bl-vault", maximumThreads: 1)
    private var queue: ThreadPool { Self.sharedQueue }

    /// GLib's types for libsecret, registered once, on the thread that makes
    /// the first vault (before the daemon starts its D-Bus thread): GLib can
    /// deadlock when two threads register and initialise these types at once
    /// (`bl_secret_prepare_types`), which hung the vault queue for good when
    /// start-up recovery used the vault while the D-Bus thread connected.
    private static let typesPrepared: Void = LibSecret.prepareTypes()

    public init() { Self.typesPrepared }

    public func store(_ secret: [UInt8], label: String, attributes: [String: String]) async throws(VaultError) {
        try Self.validate(attributes)
        guard !label.isEmpty, !label.utf8.contains(0) else {
            throw .failed("A keyring item needs a label without NUL characters (a programming error in the broker).")
        }
        try await run { () throws(VaultError) in try LibSecret.store(secret, label: label, attributes: attributes) }
    }

    public func lookup(attributes: [String: String]) async throws(VaultError) -> [UInt8]? {
        try Self.validate(attributes)
        return try await run { () throws(VaultError) in try LibSecret.lookup(attributes: attributes) }
    }

    public func remove(attributes: [String: String]) async throws(VaultError) {
        try Self.validate(attributes)
        try await run { () throws(VaultError) in try LibSecret.remove(attributes: attributes) }
    }

    /// The last health answer and when it was taken (monotonic ns). Apps poll
    /// `broker.info`; the keyring is asked at most once per `healthTTL`, and
    /// any call that fails (or succeeds after a failure) asks it afresh.
    private struct HealthCache {
        var answer: (health: VaultHealth, at: UInt64)?
        /// Counts `healthMayHaveChanged` calls: an answer asked for before
        /// one is not kept after it.
        var generation: UInt64 = 0
    }
    private let cachedHealth = Mutex(HealthCache())
    static let healthTTL: UInt64 = 2_000_000_000
    /// While the daemon follows the Secret Service's change signals
    /// (`watchingChanges`), the answer is kept until one arrives
    /// (`healthMayHaveChanged`), or this long should one be missed.
    static let watchedHealthTTL: UInt64 = 60_000_000_000
    private let watched = Atomic<Bool>(false)

    /// Whether something delivers the Secret Service's change signals to `healthMayHaveChanged`.
    public func watchingChanges(_ watching: Bool) {
        watched.store(watching, ordering: .relaxed)
        if !watching { healthMayHaveChanged() }
    }

    /// The Secret Service announced a change: the next `health()` asks it.
    public func healthMayHaveChanged() {
        cachedHealth.withLock {
            $0.answer = nil
            $0.generation &+= 1
        }
    }

    public func knownHealth() -> VaultHealth? {
        let now = monotonicNanoseconds()
        let ttl = watched.load(ordering: .relaxed) ? Self.watchedHealthTTL : Self.healthTTL
        guard let cached = cachedHealth.withLock({ $0.answer }), now &- cached.at < ttl else { return nil }
        return cached.health
    }

    public func health() async -> VaultHealth {
        if let known = knownHealth() { return known }
        let generation = cachedHealth.withLock { $0.generation }
        let health = await withCheckedContinuation { (continuation: CheckedContinuation<VaultHealth, Never>) in
            queue.async { continuation.resume(returning: LibSecret.health()) }
        }
        cachedHealth.withLock {
            if $0.generation == generation { $0.answer = (health, monotonicNanoseconds()) }
        }
        return health
    }

    private func noteOutcome(failed: Bool) {
        cachedHealth.withLock { cache in
            guard let health = cache.answer?.health else { return }
            if failed || !health.available || health.locked { cache.answer = nil }
        }
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable () throws(VaultError) -> T) async throws(VaultError)
        -> T
    {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, VaultError>, Never>) in
            queue.async {
                do throws(VaultError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        if case .failure = result { noteOutcome(failed: true) } else { noteOutcome(failed: false) }
        return try result.get()
    }

    /// Attributes are the schema's (`client`, `attempt`, `kind`), at least one
    /// non-empty, and free of NUL characters.
    public static func validate(_ attributes: [String: String]) throws(VaultError) {
        if let unknown = attributes.keys.first(where: { !schemaAttributeNames.contains($0) }) {
            throw .failed(
                "The vault has no attribute '\(unknown)'; use client, attempt and kind (a programming error in the broker).")
        }
        guard attributes.values.contains(where: { !$0.isEmpty }) else {
            throw .failed("A keyring item needs at least one non-empty attribute (a programming error in the broker).")
        }
        guard !attributes.values.contains(where: { $0.utf8.contains(0) }) else {
            throw .failed("A keyring attribute may not contain NUL (a programming error in the broker).")
        }
    }
}
