import SystemSupport

/// The service manager's protocol: readiness, status, watchdog, and sockets
/// passed by socket activation. Every call is a no-op outside systemd.
/// Spoken by SystemSupport's `ServiceManagerProtocol`, without libsystemd.
public enum Systemd {
    /// Sends `state` (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`) to
    /// `$NOTIFY_SOCKET`; answers whether it was sent.
    @discardableResult
    public static func notify(_ state: String) -> Bool { ServiceManagerProtocol.notify(state) }

    /// The watchdog interval in microseconds, when systemd asks this process for pings.
    public static func watchdogMicroseconds() -> UInt64? { ServiceManagerProtocol.watchdogMicroseconds() }

    /// Sockets passed with `LISTEN_FDS` (and their `FileDescriptorName=`),
    /// or empty. Unsets the variables so children do not inherit them.
    public static func listenFileDescriptors() -> [(fd: Int32, name: String)] {
        ServiceManagerProtocol.listenFileDescriptors()
    }
}
