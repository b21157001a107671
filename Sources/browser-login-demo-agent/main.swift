// The demo's user: a scripted user agent that the broker opens as "the
// browser". It plays a person on the hosted page — signs in with a test
// account, continues — and hands the callback URL to the desktop's URL
// handler (`gio open`), exactly as a real browser hands a custom-scheme
// navigation to the desktop.
import CommandLineKit
import Foundation
import ScriptedBrowser
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

let command = Command(
    "browser-login-demo-agent", arguments: ["AUTHORIZE_URL"],
    description: """
        Plays the user on the hosted page and delivers the callback with
        $DEMO_DELIVER (default: gio open). Environment: DEMO_EMAIL (a test account of
        the reference server; an attempt's login hint, which the page fills in,
        wins over it), DEMO_CODE (default 000000), DEMO_SERVER_ORIGIN (the server
        origin), DEMO_LOG (a file for one line per step).
        """)

let environment = ProcessInfo.processInfo.environment
let url: String
do {
    guard case .run(let arguments) = try command.parse(Array(CommandLine.arguments.dropFirst())) else {
        print(command.help)
        exit(0)
    }
    url = arguments.positionals[0]
} catch {
    FileHandle.standardError.write(Data("browser-login-demo-agent: \(error.message)\n".utf8))
    exit(UsageError.exitStatus)
}

func note(_ line: String) {
    guard let path = environment["DEMO_LOG"], let handle = FileHandle(forWritingAtPath: path) else { return }
    handle.seekToEndOfFile()
    handle.write(Data((line + "\n").utf8))
    try? handle.close()
}

do {
    guard let origin = environment["DEMO_SERVER_ORIGIN"], let email = environment["DEMO_EMAIL"] else {
        throw ScriptedBrowserError.malformedAnswer(status: 0, detail: "DEMO_SERVER_ORIGIN and DEMO_EMAIL are required")
    }
    let browser = try ScriptedBrowser(serverOrigin: origin)
    note("user agent: opened the hosted page, signing in with the test code")
    // The address the page filled in (the attempt's loginHint), else DEMO_EMAIL.
    let code = environment["DEMO_CODE"] ?? "000000"
    let callback = try browser.signInAndAuthorize(authorizeURL: url, email: email, acceptingLoginHint: true) { code }
    note("user agent: continued; the page navigates to the app's return URL")
    let deliver = (environment["DEMO_DELIVER"] ?? "gio open").split(separator: " ").map(String.init)
    let status =
        Subprocess.spawn(
            program: "/usr/bin/env", arguments: deliver + [callback], environment: environment, inheritStandardError: true
        )?.wait() ?? 127
    note("user agent: handed the return URL to the desktop (\(deliver.joined(separator: " "))), exit \(status)")
    exit(status == 0 ? 0 : 1)
} catch {
    note("user agent: failed: \(error)")
    FileHandle.standardError.write(Data("browser-login-demo-agent: \(error)\n".utf8))
    exit(1)
}
