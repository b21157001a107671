import BrokerCore
import BrokerSystem
import Engine
import SystemSupport

/// broker.conf: the broker's own settings (docs/operations.md, "broker.conf").
/// A key file like the client files, one `[Broker]` group:
///
///     [Broker]
///     Vault=file
///     VaultDirectory=/home/ada/.local/state/browser-login/vault
///
/// No file means every default (the Secret Service vault). An unknown
/// group, key or value is an error: the broker does not start (exit 78),
/// so a mistyped `Vault=` never falls back to another vault silently.
public struct BrokerConfig: Sendable, Equatable {
    public enum VaultKind: String, Sendable, CaseIterable {
        case secretService = "secret-service"
        case file
    }

    public static let group = "Broker"
    static let knownKeys = ["Vault", "VaultDirectory"]

    /// Which vault keeps the secrets.
    public var vault: VaultKind = .secretService
    /// `VaultDirectory=`: the file vault's directory (default: `vault` in the state directory).
    public var vaultDirectory: String?

    public init(vault: VaultKind = .secretService, vaultDirectory: String? = nil) {
        self.vault = vault
        self.vaultDirectory = vaultDirectory
    }

    /// `$XDG_CONFIG_HOME/browser-login/broker.conf`.
    public static func defaultPath(_ paths: UserPaths) -> String { paths.configHome + "/browser-login/broker.conf" }

    /// Reads the file at `path`. A missing file is every default, unless
    /// `required` (it was named with `--config`). Warnings come with a config;
    /// any error means no config.
    public static func load(path: String, required: Bool) -> (config: BrokerConfig?, problems: [ConfigProblem]) {
        guard FileSystem.exists(path) else {
            if required {
                return (nil, [ConfigProblem(.error, file: path, key: nil, "does not exist; create it or drop --config")])
            }
            return (BrokerConfig(), [])
        }
        switch KeyFileGroups.read(path: path, group: Self.group) {
        case .failure(let problem): return (nil, [problem])
        case .success(let groups): return validate(file: path, groups: groups)
        }
    }

    /// Validates the groups of a broker.conf (pure, for tests).
    public static func validate(file: String, groups: [(group: String, keys: [(key: String, value: String)])])
        -> (config: BrokerConfig?, problems: [ConfigProblem])
    {
        var problems: [ConfigProblem] = []
        func error(_ key: String?, _ message: String) { problems.append(ConfigProblem(.error, file: file, key: key, message)) }
        var config = BrokerConfig()
        for (group, keys) in groups {
            guard group == Self.group else {
                error(nil, "unknown group [\(group)]; the broker's settings go under [\(Self.group)]")
                continue
            }
            for (key, raw) in keys {
                let value = raw.trimmingBlanks()
                switch key {
                case "Vault":
                    guard let kind = VaultKind(rawValue: value) else {
                        error(
                            key,
                            "'\(value)' is not a vault; use Vault=secret-service (the desktop keyring, the default) or Vault=file (an encrypted file vault whose key is in the kernel keyring)"
                        )
                        continue
                    }
                    config.vault = kind
                case "VaultDirectory":
                    guard value.hasPrefix("/"), !value.contains("\0") else {
                        error(key, "'\(value)' is not an absolute path; write the full path of the file vault's directory")
                        continue
                    }
                    config.vaultDirectory = value
                default:
                    error(
                        key,
                        "unknown key; [\(Self.group)] takes \(Self.knownKeys.joined(separator: " and ")) (docs/operations.md)")
                }
            }
        }
        if config.vault == .secretService, config.vaultDirectory != nil {
            problems.append(
                ConfigProblem(
                    .warning, file: file, key: "VaultDirectory",
                    "ignored: it applies to Vault=file only, and this file says Vault=secret-service (or nothing)"))
        }
        return (problems.contains { $0.severity == .error } ? nil : config, problems)
    }
}
