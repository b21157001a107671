import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// How the default browser is packaged (docs/desktop.md, "Browser packaging").
public enum BrowserPackaging: String, Sendable, Equatable {
    /// A program of the host (a Debian package, a tarball): it hands a custom scheme to xdg-open.
    case host
    /// A Flatpak: a custom scheme goes back to the host only through the desktop portal.
    case flatpak
    /// A Snap: a custom scheme goes back to the host only through snapd's xdg-open.
    case snap
}

/// The default web browser: its desktop file id, and how it is packaged.
public struct DefaultBrowser: Sendable, Equatable {
    public var id: String
    /// The desktop file, when it was found.
    public var path: String?
    public var packaging: BrowserPackaging
    /// A Flatpak's application id (`flatpak run APP-ID URL` opens it), when known.
    public var flatpakAppId: String?

    public init(id: String, path: String?, packaging: BrowserPackaging, flatpakAppId: String?) {
        self.id = id
        self.path = path
        self.packaging = packaging
        self.flatpakAppId = flatpakAppId
    }

    /// "a Flatpak", "a Snap", nil for a host program.
    public var sandboxWords: String? {
        switch packaging {
        case .host: nil
        case .flatpak: "a Flatpak"
        case .snap: "a Snap"
        }
    }
}

/// The desktop facts that decide whether a custom-scheme callback can reach
/// the broker, read from files only (no subprocess, no GLib), so that the
/// daemon (which caches them, `HandbackChecks`) and `browser-login doctor`
/// make the same checks: the default handler of each scheme (the
/// `mimeapps.list` files of the XDG MIME Applications specification, then
/// `mimeinfo.cache` and the desktop files, as `xdg-mime query default`
/// looks), the version of xdg-open (from its script), and the default
/// browser's packaging.
public struct DesktopSetup: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    private func variable(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
    private var paths: UserPaths { UserPaths(environment: environment) }

    /// `$XDG_DATA_HOME` then each of `$XDG_DATA_DIRS` (default `/usr/local/share:/usr/share`).
    var dataDirectories: [String] {
        [paths.dataHome] + (variable("XDG_DATA_DIRS") ?? "/usr/local/share:/usr/share").split(separator: ":").map(String.init)
    }

    /// The desktop names of `$XDG_CURRENT_DESKTOP`, lower-cased (for `NAME-mimeapps.list`).
    var desktopNames: [String] {
        (variable("XDG_CURRENT_DESKTOP") ?? "").split(separator: ":").map { $0.lowercased() }
    }

    /// The `mimeapps.list` files, most important first.
    var mimeAppsLists: [String] {
        let configDirectories =
            [paths.configHome] + (variable("XDG_CONFIG_DIRS") ?? "/etc/xdg").split(separator: ":").map(String.init)
        let applications = dataDirectories.map { $0 + "/applications" }
        return (configDirectories + applications).flatMap { directory in
            desktopNames.map { directory + "/" + $0 + "-mimeapps.list" } + [directory + "/mimeapps.list"]
        }
    }

    /// The path of desktop file `id` (a `-` in the id may stand for a subdirectory).
    public func desktopFilePath(_ id: String) -> String? {
        let names = [id] + (id.contains("-") ? [id.replacing("-", with: "/")] : [])
        for directory in dataDirectories {
            for name in names where FileSystem.exists(directory + "/applications/" + name) {
                return directory + "/applications/" + name
            }
        }
        return nil
    }

    /// Whether desktop file `id` is installed and its program is (xdg-mime skips one whose program is not).
    func isUsable(_ id: String) -> Bool {
        guard let path = desktopFilePath(id), let text = FileSystem.readText(path) else { return false }
        guard let exec = Self.value("Exec", in: text), let program = Self.program(ofExec: exec) else {
            return Self.value("DBusActivatable", in: text) == "true"
        }
        return Subprocess.findProgram(program, environment: environment) != nil
    }

    /// The desktop file id that opens `mimeType` (`x-scheme-handler/SCHEME`), or nil.
    public func defaultApplication(for mimeType: String) -> String? {
        for list in mimeAppsLists {
            guard let text = FileSystem.readText(list) else { continue }
            for id in Self.entries(mimeType, group: "Default Applications", in: text) where isUsable(id) {
                return id
            }
        }
        // No default: the first application that says it handles the type.
        for directory in dataDirectories {
            let applications = directory + "/applications"
            if let cache = FileSystem.readText(applications + "/mimeinfo.cache") {
                for id in Self.entries(mimeType, group: "MIME Cache", in: cache) where isUsable(id) { return id }
            }
            for name in (FileSystem.directoryEntries(applications) ?? []).sorted() where name.hasSuffix(".desktop") {
                guard let text = FileSystem.readText(applications + "/" + name),
                    (Self.value("MimeType", in: text) ?? "").split(separator: ";").contains(Substring(mimeType)),
                    isUsable(name)
                else { continue }
                return name
            }
        }
        return nil
    }

    /// Whether the broker's desktop file is the default handler of `scheme`.
    public func brokerHandlesScheme(_ scheme: String) -> Bool {
        defaultApplication(for: DesktopEntry.mimeType(scheme: scheme)) == DesktopEntry.fileName
    }

    // MARK: xdg-open

    /// The version of the xdg-open on `PATH` (`1.1.3`), read from its script
    /// (the line that answers `--version`); nil when it is missing or not a script.
    public func xdgOpenVersion() -> String? {
        guard let path = Subprocess.findProgram("xdg-open", environment: environment),
            let bytes = FileSystem.read(path), bytes.count <= 512 * 1024
        else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        for line in text.split(separator: "\n") {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\"" || $0 == "'" })
            guard words.count == 3, words[0] == "echo", words[1] == "xdg-open",
                words[2].first?.isNumber == true, words[2].allSatisfy({ $0.isNumber || $0 == "." })
            else { continue }
            return String(words[2])
        }
        return nil
    }

    /// xdg-utils before 1.2 (Debian 12 ships 1.1.3).
    public static func isOldXdgOpen(_ version: String?) -> Bool {
        let numbers = (version ?? "").split(separator: ".").map { Int($0) ?? 0 }
        return numbers.count >= 2 && (numbers[0], numbers[1]) < (1, 2)
    }

    /// Whether xdg-open would hand URLs to the desktop's own opener (gio,
    /// kde-open, exo-open, dde-open) rather than check them itself.
    public func desktopOpensURLsItself() -> Bool {
        let desktop = environment["XDG_CURRENT_DESKTOP"] ?? ""
        let own = ["Cinnamon", "X-Cinnamon", "KDE", "DEEPIN", "Deepin", "deepin", "MATE", "XFCE"]
        if own.contains(desktop) || desktop.hasPrefix("GNOME") { return true }
        if ["ENLIGHTENMENT", "LXDE", "LXQt", "X-Generic"].contains(desktop) { return false }
        let sessions = ["KDE_FULL_SESSION", "GNOME_DESKTOP_SESSION_ID", "MATE_DESKTOP_SESSION_ID"]
        if sessions.contains(where: { !(environment[$0] ?? "").isEmpty }) { return true }
        return ["gnome", "MATE", "xfce", "xfce4", "Xfce Session"].contains(environment["DESKTOP_SESSION"] ?? "")
    }

    /// xdg-utils before 1.2 decides that its argument is a file unless it
    /// starts with `[[:alpha:]+.-]+:`: a scheme with a digit (`app2:`) is taken
    /// for a file name and fails with "file does not exist" — unless the
    /// desktop's own opener gets the URL first.
    public func xdgOpenMangles(scheme: String, version: String?) -> Bool {
        scheme.contains(where: \.isNumber) && Self.isOldXdgOpen(version) && !desktopOpensURLsItself()
    }

    // MARK: The default browser

    /// Browsers whose usual desktop file ids are Flatpak or Snap packages.
    public static let sandboxedBrowserIds = [
        "org.mozilla.firefox", "org.chromium.Chromium", "com.google.Chrome", "com.brave.Browser", "com.microsoft.Edge",
        "com.opera.Opera", "com.vivaldi.Vivaldi", "io.gitlab.librewolf-community", "firefox_firefox",
        "chromium_chromium", "brave_brave", "opera_opera",
    ]

    /// The default browser (the handler of https, else http), or nil when none is set.
    public func defaultBrowser() -> DefaultBrowser? {
        guard let id = defaultApplication(for: "x-scheme-handler/https") ?? defaultApplication(for: "x-scheme-handler/http")
        else { return nil }
        let path = desktopFilePath(id)
        let name = id.hasSuffix(".desktop") ? String(id.dropLast(".desktop".count)) : id
        guard let path, let text = FileSystem.readText(path) else {
            let packaging: BrowserPackaging =
                Self.sandboxedBrowserIds.contains(name) ? (name.contains("_") ? .snap : .flatpak) : .host
            return DefaultBrowser(
                id: id, path: nil, packaging: packaging, flatpakAppId: packaging == .flatpak ? name : nil)
        }
        let exec = Self.value("Exec", in: text) ?? ""
        let words = exec.split(separator: " ").map(String.init).drop { $0 == "env" || $0.contains("=") }
        let program = words.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
        if program == "flatpak" || Self.value("X-Flatpak", in: text) != nil || path.contains("/flatpak/exports/") {
            let appId = Self.value("X-Flatpak", in: text) ?? Self.flatpakAppId(runArguments: Array(words)) ?? name
            return DefaultBrowser(id: id, path: path, packaging: .flatpak, flatpakAppId: appId)
        }
        if program == "snap" || words.first?.hasPrefix("/snap/") == true || Self.value("X-SnapInstanceName", in: text) != nil
            || path.hasPrefix("/var/lib/snapd/")
        {
            return DefaultBrowser(id: id, path: path, packaging: .snap, flatpakAppId: nil)
        }
        return DefaultBrowser(id: id, path: path, packaging: .host, flatpakAppId: nil)
    }

    /// The application id of `flatpak run [OPTIONS] APP-ID …`: the first word after `run` that is not an option.
    static func flatpakAppId(runArguments words: [String]) -> String? {
        guard let run = words.firstIndex(of: "run") else { return nil }
        return words[(run + 1)...].first { !$0.hasPrefix("-") && !$0.hasPrefix("@@") && !$0.hasPrefix("%") }
    }

    // MARK: Key files

    /// A key's value in a desktop file's `[Desktop Entry]` group.
    public static func value(_ key: String, in text: String) -> String? {
        var inEntry = false
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingBlanks()
            if line.hasPrefix("[") {
                inEntry = line == "[Desktop Entry]"
            } else if inEntry, line.hasPrefix(key + "=") {
                return String(line.dropFirst(key.count + 1))
            }
        }
        return nil
    }

    /// The program of an `Exec=` line (after `env` and its assignments).
    static func program(ofExec exec: String) -> String? {
        exec.split(separator: " ").map(String.init).drop { $0 == "env" || $0.contains("=") }.first
            .map { $0.hasPrefix("\"") ? String($0.dropFirst().prefix { $0 != "\"" }) : $0 }
    }

    /// The desktop file ids of `key` in `[group]` (`key=a.desktop;b.desktop;`).
    static func entries(_ key: String, group: String, in text: String) -> [String] {
        var inGroup = false
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingBlanks()
            if line.hasPrefix("[") {
                inGroup = line == "[\(group)]"
            } else if inGroup, let eq = line.firstIndex(of: "="), line[..<eq].trimmingBlanks() == key {
                return line[line.index(after: eq)...].split(separator: ";").map { String($0.trimmingBlanks()) }
                    .filter { !$0.isEmpty }
            }
        }
        return []
    }
}

extension Substring {
    fileprivate func trimmingBlanks() -> Substring {
        var s = self
        while let f = s.first, f == " " || f == "\t" || f == "\r" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s = s.dropLast() }
        return s
    }
}

/// Why a custom-scheme callback would not come back to the broker
/// (docs/desktop.md, "When the browser does not come back"); the raw value
/// is what the attempt's log line says.
public enum HandbackProblem: String, Sendable, Equatable {
    /// The broker's desktop file is not the default handler of the scheme (or there is none).
    case handlerNotDefault = "handler-not-default"
    /// xdg-open before 1.2 takes a scheme with a digit for a file name.
    case xdgOpenMangles = "xdg-open-mangles-scheme"
    /// The default browser is a Flatpak: a custom scheme leaves its sandbox only through the portal.
    case flatpakBrowser = "flatpak-browser"
    /// The default browser is a Snap: a custom scheme leaves it only through snapd.
    case snapBrowser = "snap-browser"
}

extension DesktopSetup {
    /// The first reason a custom-scheme callback would not come back, in the
    /// order `doctor` checks them; `browser` is the default browser when it
    /// is the one that opens (nil when a client file names its own).
    public static func handbackProblem(handlerIsDefault: Bool, xdgOpenMangles: Bool, browser: DefaultBrowser?)
        -> HandbackProblem?
    {
        if !handlerIsDefault { return .handlerNotDefault }
        if xdgOpenMangles { return .xdgOpenMangles }
        switch browser?.packaging {
        case .flatpak?: return .flatpakBrowser
        case .snap?: return .snapBrowser
        case .host?, nil: return nil
        }
    }

    /// A Flatpak application id: three or more dot-separated parts of letters, digits, `_` and `-`.
    public static func isFlatpakAppId(_ id: String) -> Bool {
        let parts = id.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count >= 3 && id.utf8.count <= 255
            && parts.allSatisfy { part in
                !part.isEmpty && part.first != "-"
                    && part.utf8.allSatisfy {
                        ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D
                    }
            }
    }
}
