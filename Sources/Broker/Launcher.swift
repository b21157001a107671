import BrokerCore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Opens the system browser on an authorize URL.
public protocol BrowserLauncher: Sendable {
    /// Opens `url` with `command` (a template with `%u`), or the default
    /// browser when nil. Throws `BROWSER_FAILED` when the browser could not be started.
    func open(_ url: String, command: String?) async throws(BrokerError)
}

/// Launches a browser process: a configured command template, else
/// `$BROWSER` (a `:`-separated list, `%s` for the URL, as `sensible-browser`
/// reads it), else `xdg-open`. The URL is passed as one argument, never
/// through a shell. A command that exits non-zero within two seconds is a
/// failure; one still running then (a browser in the foreground) is success.
public struct ProcessBrowserLauncher: BrowserLauncher {
    let environment: [String: String]
    let logger: Logger

    public init(environment: [String: String] = ProcessInfo.processInfo.environment, logger: Logger) {
        self.environment = environment
        self.logger = logger
    }

    /// The argv for `url`: `%u` (or `%s`) replaced by the URL, or the URL appended.
    static func arguments(template: String, url: String) -> [String] {
        var words = splitCommand(template)
        var substituted = false
        for i in words.indices where words[i] == "%u" || words[i] == "%s" {
            words[i] = url
            substituted = true
        }
        if !substituted { words.append(url) }
        return words
    }

    /// Splits a command line on blanks, honouring single and double quotes.
    static func splitCommand(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        var quote: Character?
        var inWord = false
        for c in text {
            if let q = quote {
                if c == q { quote = nil } else { current.append(c) }
            } else if c == "'" || c == "\"" {
                quote = c
                inWord = true
            } else if c == " " || c == "\t" {
                if inWord { words.append(current) }
                current = ""
                inWord = false
            } else {
                current.append(c)
                inWord = true
            }
        }
        if inWord { words.append(current) }
        return words
    }

    func candidates(command: String?) -> [String] {
        if let command { return [command] }
        if let browser = environment["BROWSER"], !browser.isEmpty {
            return browser.split(separator: ":").map(String.init)
        }
        return ["xdg-open"]
    }

    public func open(_ url: String, command: String?) async throws(BrokerError) {
        var lastProblem = "no browser command"
        for template in candidates(command: command) {
            let argv = Self.arguments(template: template, url: url)
            guard let program = argv.first else { continue }
            switch await Self.run(argv, environment: environment) {
            case .success:
                logger.info("browser opened", ["browser.program": program])
                return
            case .failure(let problem):
                lastProblem = "\(program): \(problem)"
                logger.warning("browser failed to open", ["browser.program": program, "error": problem])
            }
        }
        throw BrokerError(
            .browserFailed,
            "the browser could not be opened (\(lastProblem)); open the attempt's authorizeUrl yourself (login.resume with openBrowser=false), or set Browser= in the client file"
        )
    }

    enum RunResult: Sendable {
        case success
        case failure(String)
    }

    static func run(_ argv: [String], environment: [String: String]) async -> RunResult {
        let process = Process()
        let program = argv[0]
        if program.hasPrefix("/") {
            process.executableURL = URL(fileURLWithPath: program)
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        }
        process.arguments = program.hasPrefix("/") ? Array(argv.dropFirst()) : argv
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return .failure("cannot start") }
        let deadline = Date().addingTimeInterval(2)
        while process.isRunning && Date() < deadline {
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        if process.isRunning { return .success }
        if process.terminationStatus == 127 { return .failure("not found") }
        return process.terminationStatus == 0 ? .success : .failure("exit status \(process.terminationStatus)")
    }
}
