import CLinux
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An alarm at a wall-clock time, without polling: a `CLOCK_REALTIME` timerfd
/// armed at an absolute time with `TFD_TIMER_CANCEL_ON_SET`, watched by
/// `EventPoller.shared` (no thread of its own; no libdispatch).
///
/// `fired` is called (on the poller's thread: keep it short) when the time
/// comes, and also when the system clock is set while the alarm is armed (the
/// read answers `ECANCELED`): a jump may have brought a deadline closer, or
/// pushed it away, so the owner works out its next deadline and arms again. A
/// deadline already past fires at once. Disarmed, the alarm takes no wake-ups at all.
public final class WallClockAlarm: Sendable {
    private let fd: Int32
    /// The poller registration; nil once cancelled.
    private let registration: Mutex<UInt64?>
    private let poller: EventPoller

    /// Nil when the kernel refuses a timerfd (a seccomp filter, no descriptor left) or there is no event thread.
    public init?(fired: @escaping @Sendable () -> Void) {
        guard let poller = EventPoller.shared else { return nil }
        let fd = timerfd_create(CLOCK_REALTIME, bl_tfd_cloexec | bl_tfd_nonblock)
        guard fd >= 0 else { return nil }
        self.fd = fd
        self.poller = poller
        let registration = Mutex<UInt64?>(nil)
        let id = try? poller.register(fd: fd, interest: .readable, queue: nil) { _ in
            // Clears the readiness: the expiry count, or ECANCELED after a clock change
            // (which also leaves the timer disarmed until the next `arm`).
            var expirations: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &expirations) { read(fd, $0.baseAddress, $0.count) }
            fired()
        }
        guard let id else {
            close(fd)
            return nil
        }
        registration.withLock { $0 = id }
        self.registration = registration
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
        return registration.withLock { registration in
            guard let registration else { return false }
            guard timerfd_settime(fd, flags, &setting, nil) == 0 else { return false }
            // One-shot registration: armed for the next expiry (an expiry already pending is reported at once).
            poller.arm(registration, fd: fd, interest: .readable)
            return true
        }
    }

    /// Stops watching and closes the descriptor; `fired` is not called afterwards
    /// (but may be running now). Safe to call more than once.
    public func cancel() {
        registration.withLock { registration in
            guard let id = registration else { return }
            poller.unregister(id, fd: fd)
            close(fd)
            registration = nil
        }
    }

    deinit { cancel() }
}
