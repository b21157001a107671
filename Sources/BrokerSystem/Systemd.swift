import CSystemd

#if canImport(Glibc)
    import Glibc
#endif

/// The service manager's protocol: readiness, status, watchdog, and sockets
/// passed by socket activation. Every call is a no-op outside systemd.
public enum Systemd {
    /// Sends `state` (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`).
    @discardableResult
    public static func notify(_ state: String) -> Bool { sd_notify(0, state) > 0 }

    /// The watchdog interval in microseconds, when systemd asks for pings.
    public static func watchdogMicroseconds() -> UInt64? {
        var usec: UInt64 = 0
        return sd_watchdog_enabled(0, &usec) > 0 && usec > 0 ? usec : nil
    }

    /// Sockets passed with `LISTEN_FDS` (and their `FileDescriptorName=`),
    /// or empty. Unsets the variables so children do not inherit them.
    public static func listenFileDescriptors() -> [(fd: Int32, name: String)] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        guard count > 0 else { return [] }
        var result: [(Int32, String)] = []
        for i in 0..<Int(count) {
            let name = names?[i].map { String(cString: $0) } ?? "unknown"
            result.append((SD_LISTEN_FDS_START + Int32(i), name))
        }
        if let names {
            for i in 0..<Int(count) { free(names[i]) }
            free(names)
        }
        return result
    }
}
