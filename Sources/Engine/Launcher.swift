import BrokerCore
import DesktopEntry
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

    /// Starts the browser and answers as soon as it is started, leaving what
    /// cannot be known yet (whether the command fails a moment later) to the
    /// watch it answers (nil: nothing left to watch).
    func launch(_ url: String, command: String?, activationToken: String?) async throws(BrokerError) -> LaunchWatch?

    /// Why a callback to custom `scheme` would not come back to the broker
    /// when the browser is opened with `command` (nil: the default browser),
    /// or nil when nothing stands in its way (docs/desktop.md, "When the
    /// browser does not come back"). A Browser Login client with a loopback
    /// return URL too then returns over loopback.
    func handbackProblem(scheme: String, command: String?) -> HandbackProblem?
}

/// What is left of a launch after `launch` answered: watching the browser
/// command until it is known to have started, trying the next command when
/// it fails. Answers the failure when every command failed, nil otherwise.
/// The engine runs it as a work item (`BrokerEngine.watchLaunch`).
public typealias LaunchWatch = @Sendable () async -> BrokerError?

extension BrowserLauncher {
    /// A launcher that cannot pass focus on opens the browser without it.
    public func open(_ url: String, command: String?, activationToken: String?) async throws(BrokerError) {
        try await open(url, command: command)
    }

    /// A launcher that knows nothing of the desktop trusts the scheme handler.
    public func handbackProblem(scheme: String, command: String?) -> HandbackProblem? { nil }

    /// A launcher without a watch of its own opens the browser as `open` does.
    public func launch(_ url: String, command: String?, activationToken: String?) async throws(BrokerError)
        -> LaunchWatch?
    {
        try await open(url, command: command, activationToken: activationToken)
        return nil
    }
}

/// Launches a browser process: a configured command template, else the
/// OpenURI portal in a Flatpak sandbox, `flatpak run APP-ID` when the
/// default browser is a Flatpak, `$BROWSER` (a `:`-separated list,
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
    /// The desktop's handlers, xdg-open and default browser, read at most every 30 s.
    let desktop: DesktopFacts

    public init(environment: [String: String] = ProcessEnvironment.current, logger: Logger) {
        self.environment = environment
        self.logger = logger
        self.desktop = DesktopFacts(DesktopSetup(environment: environment))
    }

    public func handbackProblem(scheme: String, command: String?) -> HandbackProblem? {
        DesktopSetup.handbackProblem(
            handlerIsDefault: desktop.brokerHandles(scheme: scheme),
            xdgOpenMangles: desktop.setup.xdgOpenMangles(scheme: scheme, version: desktop.xdgOpenVersion()),
            browser: command == nil ? desktop.defaultBrowser() : nil)
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
    /// `flatpak run APP-ID URL` when the default browser is a Flatpak (on the
    /// host: the browser starts in its sandbox, as its desktop file would
    /// start it, and the URL reaches it as an argument), `$BROWSER`,
    /// `xdg-open`, then `gio open`.
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
            } else if let browser = desktop.defaultBrowser(), browser.packaging == .flatpak,
                let appId = browser.flatpakAppId, DesktopSetup.isFlatpakAppId(appId)
            {
                plans.append(["flatpak", "run", appId, url])
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

    /// Opens the browser and waits until it is known whether it started.
    public func open(_ url: String, command: String?, activationToken: String?) async throws(BrokerError) {
        if let watch = try await launch(url, command: command, activationToken: activationToken),
            let failure = await watch()
        {
            throw failure
        }
    }

    /// How long `launch` watches a command before it answers: a command that
    /// is not found or fails at once is caught here, and the next one tried.
    static let quickWindow: Duration = .milliseconds(40)
    /// How long a command is watched in all: one that exits non-zero within
    /// it is a failure; one still running then (a browser in the foreground)
    /// is success.
    static let failureWindow: Duration = .seconds(2)

    /// Starts the first command that does not fail at once, and answers
    /// within `quickWindow` of its start: the rest of its watch (and the
    /// commands after it, should it fail) is the `LaunchWatch` answered,
    /// which the engine runs in the background, so that `login.start` never
    /// waits for the browser (issue 33: a foreground browser command made it
    /// answer two seconds late). Throws `BROWSER_FAILED` when every command
    /// failed at once.
    public func launch(_ url: String, command: String?, activationToken: String?) async throws(BrokerError)
        -> LaunchWatch?
    {
        let environment = launchEnvironment(activationToken: activationToken)
        let plans = plans(url: url, command: command, activationToken: activationToken)
        var lastProblem = "no browser command"
        for (index, argv) in plans.enumerated() {
            guard !argv.isEmpty else { continue }
            let name = Self.displayName(argv)
            switch await Self.start(argv, environment: environment, watching: Self.quickWindow) {
            case .started:
                logger.info("browser opened", ["browser.program": name])
                return nil
            case .failed(let problem):
                lastProblem = "\(name): \(problem)"
                logger.warning("browser failed to open", ["browser.program": name, "error": problem])
            case .running(let child, let since):
                let rest = Array(plans.dropFirst(index + 1))
                let logger = logger
                return {
                    await Self.watch(
                        child, since: since, name: name, rest: rest, environment: environment, logger: logger)
                }
            }
        }
        throw Self.failure(lastProblem)
    }

    /// The rest of a launch: `child` (started at `since`) until the failure
    /// window ends, then, if it failed, each command of `rest` in turn.
    static func watch(
        _ child: Subprocess, since: ContinuousClock.Instant, name: String, rest: [[String]],
        environment: [String: String], logger: Logger
    ) async -> BrokerError? {
        var outcome = await follow(child, until: since + failureWindow)
        var name = name
        var plans = rest[...]
        while true {
            switch outcome {
            case .started, .running:
                if case .running(let child, _) = outcome { child.reapInBackground() }
                logger.info("browser opened", ["browser.program": name])
                return nil
            case .failed(let problem):
                logger.warning("browser failed to open", ["browser.program": name, "error": problem])
                guard let next = plans.popFirst(), !next.isEmpty else { return failure("\(name): \(problem)") }
                name = displayName(next)
                outcome = await start(next, environment: environment, watching: failureWindow)
            }
        }
    }

    static func failure(_ lastProblem: String) -> BrokerError {
        BrokerError(
            .browserFailed,
            "the browser could not be opened (\(lastProblem)); open the attempt's authorizeUrl yourself (login.resume with openBrowser=false), or set Browser= in the client file"
        )
    }

    /// A command logged by name only: the argv holds the authorize URL (and, for the portal, the focus token).
    static func displayName(_ argv: [String]) -> String {
        guard let program = argv.first else { return "" }
        return program == "systemd-run"
            ? "systemd-run " + (argv.firstIndex(of: "--").flatMap { argv.dropFirst($0 + 1).first } ?? "") : program
    }

    /// What became of a command started by `start`.
    enum Outcome {
        /// Exited 0, or still running at the end of the failure window (and reaped whenever it ends).
        case started
        /// Could not be started, was not found, or exited non-zero.
        case failed(String)
        /// Still running at the end of the watch asked for; not reaped yet.
        case running(Subprocess, since: ContinuousClock.Instant)
    }

    /// Starts `argv` and watches it for `watching`.
    static func start(_ argv: [String], environment: [String: String], watching: Duration) async -> Outcome {
        // A program name is looked up on the environment's PATH here, so that one not installed fails at once.
        guard let program = Subprocess.findProgram(argv[0], environment: environment) else { return .failed("not found") }
        let arguments = Array(argv.dropFirst())
        let since = ContinuousClock.now
        guard let child = Subprocess.spawn(program: program, arguments: arguments, environment: environment) else {
            return .failed("cannot start")
        }
        let outcome = await follow(child, until: since + watching)
        if case .running = outcome, watching >= failureWindow {
            child.reapInBackground()
            return .started
        }
        if case .running = outcome { return .running(child, since: since) }
        return outcome
    }

    /// Polls `child` until it exits or `deadline` passes.
    static func follow(_ child: Subprocess, until deadline: ContinuousClock.Instant) async -> Outcome {
        var status = child.poll()
        // Short steps at first: a command that is not found exits within milliseconds.
        var step = Duration.milliseconds(2)
        while status == nil && ContinuousClock.now < deadline {
            try? await Task.sleep(for: min(step, deadline - ContinuousClock.now))
            step = min(step * 2, .milliseconds(50))
            status = child.poll()
        }
        switch status {
        case nil: return .running(child, since: deadline)
        case 127?: return .failed("not found")
        case 0?: return .started
        case let code?: return .failed("exit status \(code)")
        }
    }
}

extension BrokerEngine {
    /// Runs a launch's watch as a work item: a browser command that fails
    /// after `login.start` (or `login.resume`) answered is reported through
    /// the attempt — its `lastError` becomes `BROWSER_FAILED` while it stays
    /// waiting (its authorizeUrl can still be opened by hand), with a
    /// `login.changed` notification — and the log.
    nonisolated func watchLaunch(_ watch: @escaping LaunchWatch, attemptId: String) {
        let submitted = work.submit { [self] in
            guard let failure = await watch() else { return }
            await self.browserFailed(attemptId: attemptId, failure)
        }
        if !submitted {
            logger.warning(
                "the browser launch cannot be watched (the broker is stopping or busy)", ["attempt.id": attemptId])
        }
    }

    func browserFailed(attemptId: String, _ failure: BrokerError) {
        logger.warning(
            "the browser failed to open after the sign-in started; open the attempt's authorizeUrl yourself (login.resume with openBrowser=false)",
            ["attempt.id": attemptId, "code": failure.code.rawValue, "error": failure.message])
        guard var record = try? attempt(attemptId), record.state == .waiting else { return }
        record.error = AttemptError(code: failure.code.rawValue, message: failure.message)
        do { try attempts.save(&record, publish: true) } catch {
            logger.error("cannot record the browser's failure", ["attempt.id": attemptId, "error": "\(error)"])
        }
    }
}
