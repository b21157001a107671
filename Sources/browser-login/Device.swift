import BrokerRPC
import BrowserLoginAPI
import CQRencode
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
/// then waits with `session.wait` until the client is signed in or the
/// attempt ends. Interrupting the CLI leaves the attempt waiting.
func waitForDeviceSignIn(_ client: RPCClient, attempt: AttemptView, device: AttemptView.DeviceView) throws -> Exit {
    let appName =
        (try? decode(call(client, .clientsList), as: [ClientSummary].self))?.first { $0.id == attempt.client }?.appName
        ?? attempt.client
    print(deviceInstructions(device, appName: appName))
    if isatty(STDOUT_FILENO) == 1, let qr = terminalQRCode(device.verificationUriComplete ?? device.verificationUri) {
        print("\nor scan this code with a phone:\n" + qr)
    }
    print("\nwaiting for the sign-in to finish (attempt \(attempt.attemptId); Ctrl-C stops waiting, the attempt goes on)…")
    fflush(nil)
    while true {
        do {
            let answer = try client.call(
                RPCMethod.sessionWait.rawValue,
                params: try JSONValue(encoding: SessionWaitParams(client: attempt.client, timeoutMs: 10_000)))
            print("signed in: " + describeSession(try decode(answer)))
            return .ok
        } catch let error as RPCError where error.applicationCode == BrokerErrorCode.waitTimeout.rawValue {
            let view: AttemptView = try decode(
                call(client, .loginStatus, LoginStatusParams(attemptId: attempt.attemptId, reconcile: false)))
            if view.state.isTerminal {
                print(describeAttempt(view))
                return .failure
            }
        } catch let error as RPCError {
            throw CLIError(describe(error), exitCode(error))
        } catch let error as RPCClientError {
            throw CLIError("the broker connection failed: \(error)", .unavailable)
        }
    }
}
