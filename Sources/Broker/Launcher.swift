import BrokerCore
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Opens the system browser on an authorize URL.
public protocol BrowserLauncher: Sendable {
    /// Opens `url` with `command` (a template with `%u`), or the default
    /// browser when nil. Throws `BROWSER_FAILED` when the browser could not be started.
    func open(_ url: String, command: String?) async throws(BrokerError)

    /// As `open(_:command:)`, handing the browser the app's focus token
    /// (xdg-activation on Wayland, startup notification on X11), when one is given.
    func open(_ url: String, command: String?, activationToken: String?) async throws(BrokerError)
}

extension BrowserLauncher {
    /// A launcher that cannot pass focus on opens the browser without it.
    public func open(_ url: String, command: String?, activationToken: String?) async throws(BrokerError) {
        try await open(url, command: command)
    }
}

/// Launches a browser process: a configured command template, else the
/// OpenURI portal in a Flatpak sandbox, `$BROWSER` (a `:`-separated list,
/// `%s` for the URL, as `sensible-browser` reads it), `xdg-open`, `gio open`. The URL is passed as one argument, never
/// through a shell. A command that exits non-zero within two seconds is a
/// failure; one still running then (a browser in the foreground) is success.
///
/// Focus: the broker's own `XDG_ACTIVATION_TOKEN` and `DESKTOP_STARTUP_ID`
/// (whatever started the broker was given them, long since spent) never
/// reach a browser. An app's token is set as both, for the one launch it
/// came with, so the compositor lets the browser window come to the front.
public struct ProcessBrowserLauncher: BrowserLauncher {
    let environment: [String: String]
    let logger: Logger

    public init(environment: [String: String] = ProcessEnvironment.current, logger: Logger) {
        self.environment = environment
        self.logger = logger
    }

    /// The argv for `url`: `%u` (or `%s`) replaced by the URL, or the URL appended.
    static func arguments(template: String, url: String) -> [String] {
        let words = splitCommand(template)
        let placeholders: Set = ["%u", "%s"]
        guard words.contains(where: placeholders.contains) else { return words + [url] }
        return words.map { placeholders.contains($0) ? url : $0 }
    }

    /// Splits a command line on blanks, honouring single and double quotes.
    static func splitCommand(_ text: String) -> [String] {
        var words: [String] = []
        var current: String?  // nil between words
        var quote: Character?
        for c in text {
            if let q = quote {
                if c == q { quote = nil } else { current?.append(c) }
            } else if c == " " || c == "\t" {
                if let word = current { words.append(word) }
                current = nil
            } else {
                if c == "'" || c == "\"" { quote = c }
                current = (current ?? "") + (quote == nil ? String(c) : "")
            }
        }
        if let current { words.append(current) }
        return words
    }

    /// Whether the broker runs inside a Flatpak sandbox.
    var inFlatpak: Bool { environment["BROWSER_LOGIN_FLATPAK_INFO"].map { !$0.isEmpty } ?? (access("/.flatpak-info", F_OK) == 0) }

    /// The variables that carry a focus token to a launched program.
    static let focusVariables = ["XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID"]

    /// The environment of a launch: the broker's, with its own stale focus
    /// variables removed and the app's `activationToken` (if any) set as both.
    func launchEnvironment(activationToken: String?) -> [String: String] {
        var result = environment
        for name in Self.focusVariables { result[name] = activationToken }
        return result
    }

    /// The commands to try, in order, each an argv with the URL in place:
    /// the configured template alone when there is one; else the
    /// `org.freedesktop.portal.OpenURI` portal inside a Flatpak sandbox,
    /// `$BROWSER`, `xdg-open`, then `gio open`.
    ///
    /// Under systemd (`INVOCATION_ID` is set) each command is started by the
    /// user manager in a transient unit of its own (`systemd-run --user`), so
    /// the browser never inherits the service's sandbox (`ProtectSystem=`,
    /// `MemoryDenyWriteExecute=`, the system call filter) and is not stopped
    /// with the broker. The unit's description is fixed text: the URL stays
    /// out of the journal. The unit gets the user manager's environment, not
    /// the caller's: a focus token is passed on with `--setenv=NAME`, which
    /// takes the value from systemd-run's own environment, so the token never
    /// appears in an argv. In a Flatpak sandbox the portal is given it as its
    /// `activation_token` option.
    func plans(url: String, command: String?, activationToken: String? = nil) -> [[String]] {
        var plans: [[String]] = []
        if let command {
            plans.append(Self.arguments(template: command, url: url))
        } else {
            if inFlatpak {
                plans.append([
                    "gdbus", "call", "--session", "--dest", "org.freedesktop.portal.Desktop", "--object-path",
                    "/org/freedesktop/portal/desktop", "--method", "org.freedesktop.portal.OpenURI.OpenURI", "",
                    Self.gvariantString(url),
                    activationToken.map { "{'activation_token': <\(Self.gvariantString($0))>}" } ?? "{}",
                ])
            }
            if let browser = environment["BROWSER"], !browser.isEmpty {
                plans += browser.split(separator: ":").map { Self.arguments(template: String($0), url: url) }
            }
            plans.append(["xdg-open", url])
            plans.append(["gio", "open", url])
        }
        guard let invocation = environment["INVOCATION_ID"], !invocation.isEmpty, !inFlatpak else { return plans }
        let focus = activationToken == nil ? [] : Self.focusVariables.map { "--setenv=" + $0 }
        return plans.map { argv in
            [
                "systemd-run", "--user", "--quiet", "--collect", "--no-ask-password",
                "--description=browser-login: open the sign-in page",
            ] + focus + ["--"] + argv
        }
    }

    /// A GVariant text-format string literal (for `gdbus call`).
    static func gvariantString(_ text: String) -> String {
        "'" + text.replacing("\\", with: "\\\\").replacing("'", with: "\\'") + "'"
    }

    public func open(_ url: String, command: String?) async throws(BrokerError) {
        try await open(url, command: command, activationToken: nil)
    }

    public func open(_ url: String, command: String?, activationToken: String?) async throws(BrokerError) {
        var lastProblem = "no browser command"
        let environment = launchEnvironment(activationToken: activationToken)
        for argv in plans(url: url, command: command, activationToken: activationToken) {
            guard let program = argv.first else { continue }
            // Logged by name only: the argv holds the authorize URL (and, for the portal, the focus token).
            let name =
                program == "systemd-run"
                ? "systemd-run " + (argv.firstIndex(of: "--").flatMap { argv.dropFirst($0 + 1).first } ?? "") : program
            guard let problem = await Self.run(argv, environment: environment) else {
                logger.info("browser opened", ["browser.program": name])
                return
            }
            lastProblem = "\(name): \(problem)"
            logger.warning("browser failed to open", ["browser.program": name, "error": problem])
        }
        throw BrokerError(
            .browserFailed,
            "the browser could not be opened (\(lastProblem)); open the attempt's authorizeUrl yourself (login.resume with openBrowser=false), or set Browser= in the client file"
        )
    }

    /// Starts `argv`: nil on success, else what went wrong.
    static func run(_ argv: [String], environment: [String: String]) async -> String? {
        // A program name is looked up on the environment's PATH by env(1), which exits 127 when it is not there.
        let program = argv[0].hasPrefix("/") ? argv[0] : "/usr/bin/env"
        let arguments = argv[0].hasPrefix("/") ? Array(argv.dropFirst()) : argv
        guard let child = Subprocess.spawn(program: program, arguments: arguments, environment: environment) else {
            return "cannot start"
        }
        let deadline = ContinuousClock.now + .seconds(2)
        var status = child.poll()
        while status == nil && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
            status = child.poll()
        }
        switch status {
        case nil:
            child.reapInBackground()
            return nil
        case 127?: return "not found"
        case 0?: return nil
        case let code?: return "exit status \(code)"
        }
    }
}
