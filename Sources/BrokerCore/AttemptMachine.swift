import BrowserLoginProtocol

/// What happened to an attempt. The owner feeds events in; the machine
/// answers the next state or refuses. It does no I/O.
public enum AttemptEvent: Sendable, Equatable {
    /// The server created the attempt (§5.1 answered 201, issuer and id checked).
    case created
    /// Create got a definite refusal or an answer that broke the protocol.
    case createFailed
    /// A callback passed every finish rule; the exchange is about to be sent.
    case exchangeBegan
    /// The exchange answered 200 and the session is in the vault.
    case exchangeSucceeded
    /// The exchange got a definite refusal; the protocol says what it does to the attempt.
    case exchangeRefused(AfterRefusal)
    /// The exchange certainly never reached the server (connect failed).
    case exchangeNotSent
    /// The exchange got no definite answer (§7 Uncertain).
    case exchangeUncertain
    /// An error callback that the server confirmed (status `cancelled`).
    case deniedConfirmed
    /// `login.cancel`.
    case cancel
    /// Local time passed `expiresAt` while waiting.
    case localExpiry
    /// The daemon started and found the attempt in this state (crash recovery).
    case recovered
    /// `login.status` found the server attempt in this state while waiting here.
    case serverReported(ServerAttemptState)
    /// Reconciliation verified and adopted the session.
    case adopted
    /// `login.acknowledge`.
    case acknowledge
    /// A standard provider ended the attempt (docs/providers.md): an error
    /// callback other than `access_denied`, a refused or uncertain exchange
    /// (there is no status to ask), an ID token that failed its checks.
    case providerFailed
}

/// Why an event does not apply.
public enum TransitionRefusal: Error, Sendable, Equatable {
    /// The event is not allowed in this state.
    case notAllowed(AttemptState)
    /// Acknowledge of an uncertain attempt that is not reconciled yet.
    case notReconciled
}

/// The attempt lifecycle of docs/protocol.md §7 as a pure function of
/// (state, resolution, event). Tested as a transition table.
public enum AttemptMachine {
    public static func next(
        _ state: AttemptState, resolution: Resolution = .none, on event: AttemptEvent
    ) -> Result<AttemptState, TransitionRefusal> {
        switch (state, event) {
        case (.starting, .created): return .success(.waiting)
        case (.starting, .createFailed): return .success(.failed)
        case (.starting, .recovered): return .success(.failed)

        case (.waiting, .exchangeBegan): return .success(.exchanging)
        case (.waiting, .deniedConfirmed): return .success(.denied)
        case (.waiting, .providerFailed), (.exchanging, .providerFailed): return .success(.failed)
        case (.waiting, .cancel): return .success(.cancelled)
        case (.waiting, .localExpiry): return .success(.expired)
        case (.waiting, .recovered): return .success(.waiting)
        case (.waiting, .serverReported(let server)):
            switch server {
            case .pending, .authorized: return .success(.waiting)
            case .cancelled: return .success(.cancelled)
            case .expired: return .success(.expired)
            // Someone else redeemed the code: the session must be settled.
            case .completed: return .success(.uncertain)
            }

        case (.exchanging, .exchangeSucceeded): return .success(.completed)
        case (.exchanging, .exchangeNotSent): return .success(.waiting)
        case (.exchanging, .exchangeUncertain): return .success(.uncertain)
        case (.exchanging, .recovered): return .success(.uncertain)
        case (.exchanging, .exchangeRefused(let then)):
            switch then {
            // A forged callback must not kill a genuine login.
            case .waits: return .success(.waiting)
            case .cancelled: return .success(.cancelled)
            case .expired: return .success(.expired)
            // Someone else redeemed the code: its session must be settled.
            case .redeemedElsewhere: return .success(.uncertain)
            case .fails: return .success(.failed)
            }
        // Cancel while exchanging: the exchange may succeed; the cancel goes
        // to the server and a session issued anyway is revoked, never adopted.
        case (.exchanging, .cancel): return .success(.cancelled)

        case (.uncertain, .adopted): return .success(.completed)
        case (.uncertain, .recovered): return .success(.uncertain)
        case (.uncertain, .cancel): return .failure(.notAllowed(.uncertain))
        case (.uncertain, .acknowledge):
            return resolution == .none ? .failure(.notReconciled) : .success(.acknowledged)

        case (.completed, .recovered): return .success(.completed)
        case (.completed, .acknowledge): return .success(.acknowledged)

        case (.cancelled, .cancel): return .success(.cancelled)
        case (.cancelled, .acknowledge), (.expired, .acknowledge), (.denied, .acknowledge), (.failed, .acknowledge):
            return .success(.acknowledged)
        case (.acknowledged, .acknowledge): return .success(.acknowledged)
        case (let s, .recovered) where s.isTerminal: return .success(s)

        default: return .failure(.notAllowed(state))
        }
    }
}
