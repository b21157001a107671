import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import DesktopEntry
import Foundation
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// This program's absolute path (the URL handler the desktop file runs).
func ownExecutable() -> String { ProcFS.executable() ?? CommandLine.arguments[0] }

/// The daemon binary: `$BROWSER_LOGIN_BROKER`, else next to this program, else on `PATH`.
func brokerExecutable(_ env: [String: String]) -> String? {
    if let path = env["BROWSER_LOGIN_BROKER"], !path.isEmpty { return path }
    let sibling = URL(fileURLWithPath: ownExecutable()).deletingLastPathComponent()
        .appendingPathComponent("browser-login-broker").path
    if FileManager.default.isExecutableFile(atPath: sibling) { return sibling }
    return Subprocess.findProgram("browser-login-broker", environment: env)
}

/// The schemes of the broker's clients (the scheme of each `returnUrl`). A
/// loopback redirect (`http://127.0.0.1/…`, docs/providers.md) needs no URL
/// handler: the broker listens for it itself.
func clientSchemes(_ broker: BrowserLoginClient) async throws -> [(client: String, scheme: String)] {
    let list = try await broker.clients()
    return list.compactMap { c in
        DesktopEntry.scheme(ofURL: c.returnUrl).flatMap { $0 == "http" || $0 == "https" ? nil : (c.id, $0) }
    }
}

let installHandlerCommand = Subcommand(
    "install-handler", summary: "register the URL handler for the clients' schemes",
    options: [
        .value("scheme", "SCHEME", "register this scheme (repeatable) instead of asking the broker", repeatable: true),
        .flag("uninstall", "remove the desktop file and its defaults from mimeapps.list"),
        .flag("json", "print {\"steps\": [...], \"problems\": [...], \"schemes\": [...]}"),
    ],
    help: """
        Writes $XDG_DATA_HOME/applications/\(DesktopEntry.fileName), the desktop
        file that makes the browser hand each client's return URL back to the broker
        (MimeType=x-scheme-handler/SCHEME; DBusActivatable=true, so desktops call the
        broker's org.freedesktop.Application.Open; Exec= runs 'browser-login finish %u'
        elsewhere). Then runs update-desktop-database on that directory, when it is
        installed, and 'xdg-mime default \(DesktopEntry.fileName)
        x-scheme-handler/SCHEME' for each scheme. Running it again changes nothing;
        schemes already in the file are kept.

        Without --scheme, the schemes come from the broker's clients (clients.list),
        so the broker must be running.
        """,
    run: { args, broker in
        let env = ProcessInfo.processInfo.environment
        let installer = HandlerInstaller(environment: env)
        let report: HandlerInstaller.Report
        if args.has("uninstall") {
            report = installer.uninstall()
        } else {
            var schemes = args.all("scheme")
            for scheme in schemes where !DesktopEntry.isValidScheme(scheme) {
                throw CLIError(
                    "USAGE", "'\(scheme)' is not a URL scheme (lower-case letters, digits, '+', '-', '.')", .usage)
            }
            if schemes.isEmpty {
                schemes = try await clientSchemes(broker).map(\.scheme)
                if schemes.isEmpty {
                    throw CLIError(
                        "NO_SCHEMES",
                        "the broker has no clients, so there is no scheme to register; add a client file or pass --scheme",
                        .config)
                }
            }
            report = installer.install(schemes: schemes, exec: ownExecutable())
        }
        if args.has("json") {
            printJSON([
                "steps": .array(report.steps.map { .string($0) }),
                "problems": .array(report.problems.map { .string($0) }),
                "schemes": .array(report.schemes.map { .string($0) }),
            ])
            return report.problems.isEmpty ? .ok : .failure
        }
        for step in report.steps { print(step) }
        for problem in report.problems { writeError(problem) }
        if !args.has("uninstall") { print("handles: " + report.schemes.map { $0 + ":" }.joined(separator: " ")) }
        return report.problems.isEmpty ? .ok : .failure
    })
