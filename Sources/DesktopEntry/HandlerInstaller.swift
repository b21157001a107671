import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Installs and removes the URL handler in the user's data directory:
/// `$XDG_DATA_HOME/applications/org.browserlogin.Broker.desktop`, then
/// `update-desktop-database` on that directory (where installed) and
/// `xdg-mime default` for each scheme. Idempotent: installing again with the
/// same schemes rewrites the same bytes and registers the same defaults.
public struct HandlerInstaller: Sendable {
    /// What was done, step by step, for people.
    public struct Report: Sendable {
        public var schemes: [String]
        public var steps: [String] = []
        /// Steps that failed (the file is written even when a tool is missing or fails).
        public var problems: [String] = []
    }

    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    /// `$XDG_DATA_HOME/applications` (default `~/.local/share/applications`).
    public var applicationsDirectory: String { UserPaths(environment: environment).applicationsDirectory }

    public var desktopFilePath: String { applicationsDirectory + "/" + DesktopEntry.fileName }

    /// The schemes the installed file handles (none when it is missing).
    public func installedSchemes() -> [String] {
        guard let text = FileSystem.readText(desktopFilePath) else { return [] }
        return DesktopEntry.schemes(inDesktopFile: text)
    }

    /// Writes the desktop file for `schemes` plus those it already handles, and registers them.
    public func install(schemes: [String], exec: String) -> Report {
        let all = Array(Set(schemes + installedSchemes())).sorted()
        var report = Report(schemes: all)
        let text = DesktopEntry.text(exec: exec, schemes: all)
        do {
            try FileSystem.createDirectories(applicationsDirectory)
            if FileSystem.readText(desktopFilePath) == text {
                report.steps.append("\(desktopFilePath) is up to date")
            } else {
                try FileSystem.writeAtomically(text.utf8, to: desktopFilePath)
                report.steps.append("wrote \(desktopFilePath)")
            }
        } catch {
            report.problems.append("cannot write \(desktopFilePath): \(error)")
            return report
        }
        updateDatabase(&report)
        for scheme in all {
            let type = DesktopEntry.mimeType(scheme: scheme)
            record(&report, ["xdg-mime", "default", DesktopEntry.fileName, type], "xdg-mime default for \(type)")
        }
        return report
    }

    /// Removes the desktop file and this handler's defaults from `mimeapps.list`.
    public func uninstall() -> Report {
        var report = Report(schemes: installedSchemes())
        if FileSystem.exists(desktopFilePath) {
            do {
                try FileSystem.remove(desktopFilePath)
                report.steps.append("removed \(desktopFilePath)")
            } catch {
                report.problems.append("cannot remove \(desktopFilePath): \(error)")
            }
        } else {
            report.steps.append("\(desktopFilePath) is not installed")
        }
        let mimeapps = UserPaths(environment: environment).mimeAppsList
        if let text = FileSystem.readText(mimeapps) {
            let kept = Self.removingDefaults(from: text)
            if kept != text {
                do {
                    try FileSystem.writeAtomically(kept.utf8, to: mimeapps)
                    report.steps.append("removed the handler's defaults from \(mimeapps)")
                } catch {
                    report.problems.append("cannot rewrite \(mimeapps): \(error)")
                }
            }
        }
        updateDatabase(&report)
        return report
    }

    /// `mimeapps.list` without this desktop file in any `type=a;b;` list (emptied entries are dropped).
    static func removingDefaults(from text: String) -> String {
        var lines: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            guard !line.hasPrefix("["), let eq = line.firstIndex(of: "="), line.contains(DesktopEntry.fileName) else {
                lines.append(String(line))
                continue
            }
            let others = line[line.index(after: eq)...].split(separator: ";").filter { $0 != DesktopEntry.fileName }
            if !others.isEmpty { lines.append(line[..<eq] + "=" + others.joined(separator: ";") + ";") }
        }
        return lines.joined(separator: "\n")
    }

    private func updateDatabase(_ report: inout Report) {
        guard Subprocess.findProgram("update-desktop-database", environment: environment) != nil else {
            report.steps.append("update-desktop-database is not installed; skipped")
            return
        }
        record(
            &report, ["update-desktop-database", applicationsDirectory],
            "update-desktop-database \(applicationsDirectory)")
    }

    /// Runs `argv` (output discarded) and records the step.
    private func record(_ report: inout Report, _ argv: [String], _ step: String) {
        switch Subprocess.run(argv, environment: environment)?.status {
        case 0?: report.steps.append("ran " + step)
        case nil: report.problems.append(step + ": the program is not installed")
        case let code?: report.problems.append(step + ": exit status \(code)")
        }
    }
}
