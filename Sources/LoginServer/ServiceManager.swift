import SystemSupport

/// The service manager's notification socket (sd_notify(3), spoken by
/// SystemSupport's `ServiceManagerProtocol`): `serve` sends `READY=1` once it
/// listens, so a `Type=notify` unit starts what depends on it only then, and
/// `STOPPING=1` when it shuts down. Without `$NOTIFY_SOCKET` (not under
/// systemd) it does nothing.
enum ServiceManager {
    @discardableResult
    static func notify(_ state: String) -> Bool { ServiceManagerProtocol.notify(state) }
}
