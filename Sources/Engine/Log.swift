import SystemSupport

/// The broker logs with the shared logger (Sources/SystemSupport/Logger.swift).
public typealias Logger = SystemSupport.Logger

/// The journald `MESSAGE_ID`s of the broker's key events, put in an entry's
/// metadata under `Logger.messageIDKey` (`message.id`). Each id is fixed
/// forever, so `journalctl MESSAGE_ID=…` finds the event in any version; the
/// catalog is in docs/operations.md, Logs. New ids come from
/// `journalctl --new-id128`; never reuse or change one.
public enum LogEvent {
    /// A sign-in completed: the session is stored and the client signed in
    /// (by an exchange, a device code, or an uncertain attempt adopted).
    public static let signInCompleted = "02e84d8342294420a3ed5db5b3866722"
    /// An exchange's outcome is unknown (the broker stopped mid-exchange, or
    /// the server's answer was lost or could not be committed): the attempt
    /// is `uncertain` until it is reconciled with the server.
    public static let exchangeUncertain = "0888a45bf7194fa7afbfabc5975cbe50"
    /// An uncertain attempt was reconciled with the server: its session was
    /// adopted, revoked, or found never issued (`resolution`).
    public static let attemptReconciled = "d061b0f6de5f41cc985a298f39dd76c2"
    /// A sign-out's revoke could not be sent now (server unreachable, keyring
    /// unavailable): it stays owed and is retried.
    public static let revokeOwed = "4dd91a2c85d043c6b7c95a95d778b90d"
}
