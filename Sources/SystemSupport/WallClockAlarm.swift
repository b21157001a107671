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
    private let timer: TimerDescriptor
    /// The poller registration; nil once cancelled.
    private let registration: Mutex<UInt64?>
    private let poller: EventPoller

    /// Nil when the kernel refuses a timerfd (a seccomp filter, no descriptor left) or there is no event thread.
    public init?(fired: @escaping @Sendable () -> Void) {
        guard let poller = EventPoller.shared else { return nil }
        let fd = timerfd_create(CLOCK_REALTIME, bl_tfd_cloexec | bl_tfd_nonblock)
        guard fd >= 0 else { return nil }
        let timer = TimerDescriptor(fd)
        self.timer = timer
        self.poller = poller
        let registration = Mutex<UInt64?>(nil)
        let id = try? poller.register(fd: fd, interest: .readable, queue: nil) { _ in
            // Clears the readiness: the expiry count, or ECANCELED after a clock change
            // (which also leaves the timer disarmed until the next `arm`).
            guard timer.clear() else { return }
            fired()
        }
        guard let id else {
            timer.close()
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
            guard timerfd_settime(timer.fd, flags, &setting, nil) == 0 else { return false }
            // One-shot registration: armed for the next expiry (an expiry already pending is reported at once).
            poller.arm(registration, fd: timer.fd, interest: .readable)
            return true
        }
    }

    /// Stops watching and closes the descriptor; `fired` is not called afterwards
    /// (but may be running now). Safe to call more than once.
    public func cancel() {
        registration.withLock { registration in
            guard let id = registration else { return }
            poller.unregister(id, fd: timer.fd)
            timer.close()
            registration = nil
        }
    }

    deinit { cancel() }
}

/// The alarm's timerfd, shared with its poller handler: the handler reads it
/// only while it is open, so a handler still running when the alarm is
/// cancelled never reads a closed descriptor (or one the number was given to next).
private final class TimerDescriptor: Sendable {
    let fd: Int32
    private let open = Mutex(true)

    init(_ fd: Int32) { self.fd = fd }

    /// Reads the expiry count; false once closed.
    func clear() -> Bool {
        open.withLock { open in
            guard open else { return false }
            var expirations: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &expirations) { read(fd, $0.baseAddress, $0.count) }
            return true
        }
    }

    func close() {
        open.withLock { open in
            guard open else { return }
            _ = Glibc.close(fd)
            open = false
        }
    }
}
