import DesktopEntry
import Synchronization

/// The desktop facts that decide how a sign-in comes back (DesktopSetup),
/// kept for `lifetime` so that a `login.start` reads the `mimeapps.list`
/// files, the desktop files and the xdg-open script at most twice a minute.
/// The same checks as `browser-login doctor`, which reads them afresh.
final class DesktopFacts: Sendable {
    let setup: DesktopSetup
    let lifetime: Duration

    private struct Kept<Value> {
        var value: Value
        var at: ContinuousClock.Instant
    }
    private struct State {
        var browser: Kept<DefaultBrowser?>?
        var version: Kept<String?>?
        var handlers: [String: Kept<Bool>] = [:]
    }
    private let state = Mutex(State())

    init(_ setup: DesktopSetup, lifetime: Duration = .seconds(30)) {
        self.setup = setup
        self.lifetime = lifetime
    }

    private func fresh<Value>(_ kept: Kept<Value>?) -> Value? {
        guard let kept, ContinuousClock.now - kept.at < lifetime else { return nil }
        return kept.value
    }

    /// The default browser (nil: none is set).
    func defaultBrowser() -> DefaultBrowser? {
        if let kept = state.withLock({ fresh($0.browser) }) { return kept }
        let browser = setup.defaultBrowser()
        state.withLock { $0.browser = Kept(value: browser, at: .now) }
        return browser
    }

    /// The version of the xdg-open on PATH (nil: missing, or not the script).
    func xdgOpenVersion() -> String? {
        if let kept = state.withLock({ fresh($0.version) }) { return kept }
        let version = setup.xdgOpenVersion()
        state.withLock { $0.version = Kept(value: version, at: .now) }
        return version
    }

    /// Whether the broker's desktop file is the default handler of `scheme`.
    func brokerHandles(scheme: String) -> Bool {
        if let kept = state.withLock({ fresh($0.handlers[scheme]) }) { return kept }
        let handles = setup.brokerHandlesScheme(scheme)
        state.withLock { state in
            // Bounded: the schemes are the configured clients' (a reload may bring new ones).
            if state.handlers.count >= 256 { state.handlers.removeAll() }
            state.handlers[scheme] = Kept(value: handles, at: .now)
        }
        return handles
    }
}
