import BrokerBrowserLogin
import BrowserLoginProtocol
import Testing

@testable import BrokerCore

/// A Browser Login exchange refused with `code`, as the protocol tells the machine (`redeemFailure`).
func refused(_ code: ServerErrorCode) -> AttemptEvent {
    let failure = LoginServerError.refused(status: 400, code: code, message: "refused", retryAfterSeconds: nil)
    guard case .refused(_, let then) = failure.redeemFailure else { return .exchangeUncertain }
    return .exchangeRefused(then)
}

/// The attempt lifecycle as a transition table: every (state, event) pair is
/// either listed here with its next state, or refused. Browser Login's
/// refusals of an exchange reach the machine as the protocol maps them.
@Suite struct AttemptMachineTests {
    static let events: [AttemptEvent] = [
        .created, .createFailed, .exchangeBegan, .exchangeSucceeded, refused(.invalidGrant),
        refused(.attemptNotAuthorized), refused(.rateLimited), refused(.attemptCancelled),
        refused(.attemptExpired), refused(.authUserDisabled),
        refused(.attemptAlreadyExchanged), refused(.attemptUnknown), .exchangeNotSent,
        .exchangeUncertain, .deniedConfirmed, .cancel, .localExpiry, .recovered, .serverReported(.pending),
        .serverReported(.authorized), .serverReported(.completed), .serverReported(.cancelled),
        .serverReported(.expired), .adopted, .acknowledge, .providerFailed,
    ]

    struct Row: CustomTestStringConvertible, Sendable {
        let from: AttemptState
        let event: AttemptEvent
        let to: AttemptState
        var testDescription: String { "\(from) --\(event)--> \(to)" }
    }

    static let allowed: [Row] = [
        Row(from: .starting, event: .created, to: .waiting),
        Row(from: .starting, event: .createFailed, to: .failed),
        Row(from: .starting, event: .recovered, to: .failed),
        Row(from: .waiting, event: .exchangeBegan, to: .exchanging),
        Row(from: .waiting, event: .deniedConfirmed, to: .denied),
        Row(from: .waiting, event: .cancel, to: .cancelled),
        Row(from: .waiting, event: .localExpiry, to: .expired),
        Row(from: .waiting, event: .recovered, to: .waiting),
        Row(from: .waiting, event: .serverReported(.pending), to: .waiting),
        Row(from: .waiting, event: .serverReported(.authorized), to: .waiting),
        Row(from: .waiting, event: .serverReported(.completed), to: .uncertain),
        Row(from: .waiting, event: .serverReported(.cancelled), to: .cancelled),
        Row(from: .waiting, event: .serverReported(.expired), to: .expired),
        // A standard provider (docs/providers.md): an error callback other
        // than access_denied while waiting; a refused or uncertain exchange, or
        // an ID token that failed its checks, while exchanging.
        Row(from: .waiting, event: .providerFailed, to: .failed),
        Row(from: .exchanging, event: .providerFailed, to: .failed),
        Row(from: .exchanging, event: .exchangeSucceeded, to: .completed),
        Row(from: .exchanging, event: refused(.invalidGrant), to: .waiting),
        Row(from: .exchanging, event: refused(.attemptNotAuthorized), to: .waiting),
        Row(from: .exchanging, event: refused(.rateLimited), to: .waiting),
        Row(from: .exchanging, event: refused(.attemptCancelled), to: .cancelled),
        Row(from: .exchanging, event: refused(.attemptExpired), to: .expired),
        Row(from: .exchanging, event: refused(.authUserDisabled), to: .failed),
        Row(from: .exchanging, event: refused(.attemptAlreadyExchanged), to: .uncertain),
        Row(from: .exchanging, event: refused(.attemptUnknown), to: .failed),
        Row(from: .exchanging, event: .exchangeNotSent, to: .waiting),
        Row(from: .exchanging, event: .exchangeUncertain, to: .uncertain),
        Row(from: .exchanging, event: .recovered, to: .uncertain),
        Row(from: .exchanging, event: .cancel, to: .cancelled),
        Row(from: .uncertain, event: .adopted, to: .completed),
        Row(from: .uncertain, event: .recovered, to: .uncertain),
        Row(from: .completed, event: .recovered, to: .completed),
        Row(from: .completed, event: .acknowledge, to: .acknowledged),
        Row(from: .cancelled, event: .cancel, to: .cancelled),
        Row(from: .cancelled, event: .acknowledge, to: .acknowledged),
        Row(from: .cancelled, event: .recovered, to: .cancelled),
        Row(from: .expired, event: .acknowledge, to: .acknowledged),
        Row(from: .expired, event: .recovered, to: .expired),
        Row(from: .denied, event: .acknowledge, to: .acknowledged),
        Row(from: .denied, event: .recovered, to: .denied),
        Row(from: .failed, event: .acknowledge, to: .acknowledged),
        Row(from: .failed, event: .recovered, to: .failed),
        Row(from: .acknowledged, event: .acknowledge, to: .acknowledged),
        Row(from: .acknowledged, event: .recovered, to: .acknowledged),
    ]

    @Test(arguments: allowed)
    func allowedTransition(_ row: Row) {
        #expect(AttemptMachine.next(row.from, on: row.event) == .success(row.to))
    }

    @Test func everyOtherPairIsRefused() {
        var refused = 0
        for state in AttemptState.allCases {
            for event in Self.events {
                if Self.allowed.contains(where: { $0.from == state && $0.event == event }) { continue }
                if state == .uncertain && event == .acknowledge { continue }
                #expect(
                    AttemptMachine.next(state, on: event) == .failure(.notAllowed(state)),
                    "\(state) on \(event) should be refused")
                refused += 1
            }
        }
        #expect(refused > 150)
    }

    /// A provider's failure ends an attempt only while it waits for the
    /// callback or exchanges; it never reopens or rewrites an ended one, and
    /// never settles one the broker cannot know the outcome of.
    @Test func aProviderFailureEndsOnlyAWaitingOrExchangingAttempt() {
        for state in AttemptState.allCases {
            let expected: Result<AttemptState, TransitionRefusal> =
                state == .waiting || state == .exchanging ? .success(.failed) : .failure(.notAllowed(state))
            #expect(AttemptMachine.next(state, on: .providerFailed) == expected, "\(state)")
        }
    }

    @Test func acknowledgeOfUncertainNeedsReconciliation() {
        #expect(AttemptMachine.next(.uncertain, resolution: .none, on: .acknowledge) == .failure(.notReconciled))
        for resolution in [Resolution.revoked, .cancelledAtServer, .retired, .sessionExpired] {
            #expect(AttemptMachine.next(.uncertain, resolution: resolution, on: .acknowledge) == .success(.acknowledged))
        }
    }

    @Test func terminalStatesAreTerminal() {
        for state in AttemptState.allCases where state.isTerminal {
            for event in Self.events where event != .acknowledge && event != .recovered && event != .cancel {
                #expect(AttemptMachine.next(state, on: event) == .failure(.notAllowed(state)))
            }
        }
    }
}
