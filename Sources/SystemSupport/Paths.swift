#if canImport(Glibc)
    import Glibc
#endif

/// The one reader of the XDG base directories (the XDG Base Directory
/// specification: an unset or empty variable takes its default) and of
/// where the broker keeps its socket, state and client files.
public struct UserPaths: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    private func variable(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }

    /// `$HOME`, else the user database's home directory.
    public var home: String {
        if let home = variable("HOME") { return home }
        if let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }

    /// `$XDG_CONFIG_HOME`, default `~/.config`.
    public var configHome: String { variable("XDG_CONFIG_HOME") ?? home + "/.config" }
    /// `$XDG_DATA_HOME`, default `~/.local/share`.
    public var dataHome: String { variable("XDG_DATA_HOME") ?? home + "/.local/share" }
    /// `$XDG_STATE_HOME`, default `~/.local/state`.
    public var stateHome: String { variable("XDG_STATE_HOME") ?? home + "/.local/state" }

    /// The broker's socket (docs/rpc.md, Connecting), the same rule for the
    /// daemon, the CLI and the URL handler: `--socket PATH` (`option`), else
    /// `$BROWSER_LOGIN_SOCKET`, else `$XDG_RUNTIME_DIR/browser-login/broker.sock`;
    /// nil when none is set.
    public func brokerSocket(option: String? = nil) -> String? {
        if let option { return option }
        if let path = variable("BROWSER_LOGIN_SOCKET") { return path }
        return variable("XDG_RUNTIME_DIR").map { $0 + "/browser-login/broker.sock" }
    }

    /// The broker's state directory: `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`), else `$XDG_STATE_HOME/browser-login`.
    public var brokerStateDirectory: String { variable("STATE_DIRECTORY") ?? stateHome + "/browser-login" }

    /// The client drop-in directories, most important first:
    /// `$XDG_CONFIG_HOME/browser-login/clients.d`, then each `$XDG_DATA_DIRS/browser-login/clients.d`
    /// (default `/usr/local/share:/usr/share`).
    public var clientDirectories: [String] {
        let dataDirectories = (variable("XDG_DATA_DIRS") ?? "/usr/local/share:/usr/share").split(separator: ":")
        return ([configHome] + dataDirectories.map(String.init)).map { $0 + "/browser-login/clients.d" }
    }

    /// `$XDG_DATA_HOME/applications`, where user desktop files go.
    public var applicationsDirectory: String { dataHome + "/applications" }

    /// `$XDG_CONFIG_HOME/mimeapps.list`, where `xdg-mime default` writes.
    public var mimeAppsList: String { configHome + "/mimeapps.list" }
}
