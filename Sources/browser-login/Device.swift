import BrokerRPC
import BrowserLoginClient
import CQRencode
import CommandLineKit
import Foundation

/// A device sign-in (RFC 8628, docs/providers.md "Without a browser on this
/// machine"): what to show the user, then waiting for the session.

/// The instructions for a device sign-in, for a person.
func deviceInstructions(_ device: AttemptView.DeviceView, appName: String) -> String {
    var text = "To sign in to \(appName), open \(device.verificationUri) and enter the code \(device.userCode)"
    if let complete = device.verificationUriComplete, complete != device.verificationUri {
        text += "\n(or open \(complete), which carries the code)"
    }
    return text
}

/// A QR code of `text` drawn with Unicode half blocks, two modules a
/// character cell, light modules in the foreground colour on an explicit
/// black background so that it reads on light and dark terminals alike.
/// Nil when libqrencode cannot encode it (too long).
func terminalQRCode(_ text: String, quietZone: Int = 2) -> String? {
    guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_L, QR_MODE_8, 1) else { return nil }
    defer { QRcode_free(code) }
    let width = Int(code.pointee.width)
    let size = width + 2 * quietZone
    // Bit 0 of each byte is a dark module (qrencode.h).
    func dark(_ x: Int, _ y: Int) -> Bool {
        let (mx, my) = (x - quietZone, y - quietZone)
        guard mx >= 0, my >= 0, mx < width, my < width else { return false }
        return code.pointee.data[my * width + mx] & 1 == 1
    }
    var lines: [String] = []
    for y in stride(from: 0, to: size, by: 2) {
        var line = "\u{1B}[40;97m"
        for x in 0..<size {
            let top = !dark(x, y)
            let bottom = y + 1 < size ? !dark(x, y + 1) : false
            switch (top, bottom) {
            case (true, true): line += "█"
            case (true, false): line += "▀"
            case (false, true): line += "▄"
            case (false, false): line += " "
            }
        }
        lines.append(line + "\u{1B}[0m")
    }
    return lines.joined(separator: "\n")
}

/// Prints a device sign-in's instructions (and its QR code on a terminal),
/// then waits until the client is signed in or the attempt ends.
/// Interrupting the CLI leaves the attempt waiting.
func waitForDeviceSignIn(
    _ broker: BrowserLoginClient, attempt: AttemptView, device: AttemptView.DeviceView, timeout: Duration?
) async throws -> Exit {
    let appName = (try? await broker.clients())?.first { $0.id == attempt.client }?.appName ?? attempt.client
    print(deviceInstructions(device, appName: appName))
    if isatty(STDOUT_FILENO) == 1, let qr = terminalQRCode(device.verificationUriComplete ?? device.verificationUri) {
        print("\nor scan this code with a phone:\n" + qr)
    }
    print("\nwaiting for the sign-in to finish (attempt \(attempt.attemptId); Ctrl-C stops waiting, the attempt goes on)…")
    fflush(nil)
    return try await waitForSignIn(broker, attempt: attempt, timeout: timeout, json: false)
}

/// Waits with `session.wait` until the attempt's client is signed in (0,
/// the session printed), the attempt ends otherwise (1, the attempt
/// printed) or `timeout` passes (`WAIT_TIMEOUT`, 75).
///
/// With `adding` (`start --add-account`), the client may be signed in
/// already: the wait ends when the attempt completes, not when the current
/// account is signed in, and shows the new account (current by then).
func waitForSignIn(
    _ broker: BrowserLoginClient, attempt: AttemptView, timeout: Duration?, json: Bool, adding: Bool = false
) async throws -> Exit {
    let deadline = timeout.map { ContinuousClock.now + $0 }
    /// The attempt as it is now: nil while it goes on, else the exit.
    func ended() async throws -> Exit? {
        let raw = try await broker.call(
            .loginStatus, params: encode(LoginStatusParams(attemptId: attempt.attemptId, reconcile: false)))
        let view: AttemptView = try decode(raw)
        if adding && (view.state == .completed || (view.state == .acknowledged && view.receipt != nil)) {
            let session = try await broker.call(.sessionGet, params: encode(ClientParams(client: attempt.client)))
            if json { printJSON(session) } else { print("signed in: " + describeSession(try decode(session))) }
            return .ok
        }
        guard view.state.isTerminal else { return nil }
        if json {
            printJSON(raw)
            writeError(
                CLIError(
                    view.error?.code ?? "ATTEMPT_" + view.state.rawValue.uppercased(),
                    "the attempt ended \(view.state.rawValue)" + (view.error.map { ": " + $0.message } ?? ""),
                    .failure, data: ["attemptId": .string(view.attemptId)]))
        } else {
            print(describeAttempt(view))
        }
        return .failure
    }
    while true {
        // Short waits, so that an attempt that ends otherwise is noticed.
        var chunk: Duration = .seconds(3)
        if let deadline {
            chunk = min(chunk, deadline - ContinuousClock.now)
            guard chunk > .zero else {
                var timedOut = CLIError(
                    BrokerErrorCode.waitTimeout.rawValue,
                    "\(attempt.client) is not signed in yet; the attempt \(attempt.attemptId) goes on", .tempFail,
                    data: ["attemptId": .string(attempt.attemptId)])
                timedOut.text = timedOut.code + ": " + timedOut.message
                throw timedOut
            }
        }
        if adding {
            // Polled: session.wait would answer at once with the account signed in before.
            if let exit = try await ended() { return exit }
            try await Task.sleep(for: min(chunk, .milliseconds(250)))
            continue
        }
        do {
            let params = try encode(SessionWaitParams(client: attempt.client, timeoutMs: milliseconds(chunk)))
            let answer = try await broker.call(.sessionWait, params: params, timeout: chunk + .seconds(30))
            if json { printJSON(answer) } else { print("signed in: " + describeSession(try decode(answer))) }
            return .ok
        } catch let error as BrowserLoginError where error.code == .waitTimeout {
            if let exit = try await ended() { return exit }
        }
    }
}

/// `--timeout SECONDS`, for commands that wait.
func timeoutOption(_ args: Arguments) throws -> Duration? {
    guard let text = args["timeout"] else { return nil }
    guard let seconds = Double(text), seconds > 0, seconds <= 86_400 * 365 else {
        throw CLIError("USAGE", "--timeout needs a number of seconds, more than 0", .usage)
    }
    return .milliseconds(Int64(seconds * 1000))
}
