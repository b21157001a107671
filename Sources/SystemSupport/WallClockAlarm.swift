import CLinux
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An alarm at a wall-clock time, without polling: a `CLOCK_REALTIME` timerfd
/// armed at an absolute time with `TFD_TIMER_CANCEL_ON_SET`, watched by a
/// dispatch read source (no thread of its own).
///
/// `fired` is called when the time comes, and also when the system clock is
/// set while the alarm is armed (the read answers `ECANCELED`): a jump may
/// have brought a deadline closer, or pushed it away, so the owner works out
/// its next deadline and arms again. A deadline already past fires at once.
/// Disarmed, the alarm takes no wake-ups at all.
public final class WallClockAlarm: Sendable {
    private let fd: Int32
    private let source: Mutex<(any DispatchSourceRead)?>

    /// Nil when the kernel refuses a timerfd (a seccomp filter, no descriptor left).
    public init?(queue: DispatchQueue = .global(), fired: @escaping @Sendable () -> Void) {
        let fd = timerfd_create(CLOCK_REALTIME, bl_tfd_cloexec | bl_tfd_nonblock)
        guard fd >= 0 else { return nil }
        self.fd = fd
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler {
            // Clears the readiness: the expiry count, or ECANCELED after a clock change
            // (which also leaves the timer disarmed until the next `arm`).
            var expirations: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &expirations) { read(fd, $0.baseAddress, $0.count) }
            fired()
        }
        source.setCancelHandler { close(fd) }
        source.activate()
        self.source = Mutex(source)
    }

    /// Arms the alarm at `millisecondsSince1970` (wall-clock time), replacing
    /// any earlier setting; nil disarms it. False when the kernel refused.
    @discardableResult
    public func arm(atMillisecondsSince1970 deadline: Int64?) -> Bool {
        var setting = itimerspec()
        var flags: Int32 = 0
        if let deadline {
            // A zero it_value would disarm: a deadline at or before the epoch is "now".
            let at = max(deadline, 1)
            setting.it_value = timespec(tv_sec: Int(at / 1000), tv_nsec: Int(at % 1000) * 1_000_000)
            flags = bl_tfd_timer_abstime | bl_tfd_timer_cancel_on_set
        }
        return source.withLock { source in
            guard source != nil else { return false }
            return timerfd_settime(fd, flags, &setting, nil) == 0
        }
    }

    /// Stops watching and closes the descriptor; `fired` is not called afterwards
    /// (but may be running now). Safe to call more than once.
    public func cancel() {
        source.withLock { source in
            source?.cancel()
            source = nil
        }
    }

    deinit { cancel() }
}
