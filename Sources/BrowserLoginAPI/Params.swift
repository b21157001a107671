// The params and results of each method (docs/rpc.md "Methods"). Optional
// params are left out of the request when nil; the daemon applies the
// documented defaults.

/// `login.start`.
public struct LoginStartParams: Codable, Sendable, Equatable {
    public var client: String
    public var ephemeral: Bool?
    public var openBrowser: Bool?
    public var switchAccount: Bool?
    /// `"browser"` or `"device"` (docs/providers.md); absent: the client's `Flow=`.
    public var flow: String?
    /// An xdg-activation token (Wayland) or startup-notification id (X11)
    /// from the app's toolkit: the browser gets it as `XDG_ACTIVATION_TOKEN`
    /// and `DESKTOP_STARTUP_ID`, so the compositor lets its window come to
    /// the front. Used for this launch only, never stored.
    public var activationToken: String?
    /// Sign in one more account (an `Accounts=multiple` client), the signed-in ones staying.
    public var addAccount: Bool?
    /// An email address the sign-in page pre-fills.
    public var loginHint: String?
    public init(
        client: String, ephemeral: Bool? = nil, openBrowser: Bool? = nil, switchAccount: Bool? = nil,
        flow: String? = nil, activationToken: String? = nil, addAccount: Bool? = nil, loginHint: String? = nil
    ) {
        self.client = client
        self.ephemeral = ephemeral
        self.openBrowser = openBrowser
        self.switchAccount = switchAccount
        self.flow = flow
        self.activationToken = activationToken
        self.addAccount = addAccount
        self.loginHint = loginHint
    }

    /// The longest `loginHint`: an email address (RFC 5321's 254 bytes).
    public static let maximumLoginHintBytes = 254

    /// Whether `hint` may be a `loginHint`: 1 to 254 bytes, no control characters.
    public static func isValidLoginHint(_ hint: String) -> Bool {
        !hint.isEmpty && hint.utf8.count <= maximumLoginHintBytes
            && hint.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
    }

    /// The longest `activationToken` the broker takes: real ones (a
    /// compositor's xdg-activation token, an X11 startup id) are well under 100 bytes.
    public static let maximumActivationTokenBytes = 256

    /// Whether `token` may be an `activationToken`: 1 to 256 visible ASCII
    /// characters (no blanks or control characters), as it goes into the
    /// browser's environment.
    public static func isValidActivationToken(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.count <= maximumActivationTokenBytes
            && token.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }
}

/// `login.resume`.
public struct LoginResumeParams: Codable, Sendable, Equatable {
    public var attemptId: String
    public var openBrowser: Bool?
    /// As in `LoginStartParams`: focus for the browser this call opens.
    public var activationToken: String?
    public init(attemptId: String, openBrowser: Bool? = nil, activationToken: String? = nil) {
        self.attemptId = attemptId
        self.openBrowser = openBrowser
        self.activationToken = activationToken
    }
}

/// `login.finish`.
public struct LoginFinishParams: Codable, Sendable, Equatable {
    public var url: String
    public init(url: String) { self.url = url }
}

/// `login.cancel` and `login.acknowledge`.
public struct AttemptParams: Codable, Sendable, Equatable {
    public var attemptId: String
    public init(attemptId: String) { self.attemptId = attemptId }
}

/// `login.status`.
public struct LoginStatusParams: Codable, Sendable, Equatable {
    public var attemptId: String
    public var reconcile: Bool?
    public init(attemptId: String, reconcile: Bool? = nil) {
        self.attemptId = attemptId
        self.reconcile = reconcile
    }
}

/// `login.list`.
public struct LoginListParams: Codable, Sendable, Equatable {
    public var client: String?
    public var states: [AttemptState]?
    public init(client: String? = nil, states: [AttemptState]? = nil) {
        self.client = client
        self.states = states
    }
}

/// `session.get` and `session.signOut`: `account` (an `accountKey`) names
/// one of the client's accounts; absent, the current one.
public struct ClientParams: Codable, Sendable, Equatable {
    public var client: String
    public var account: String?
    public init(client: String, account: String? = nil) {
        self.client = client
        self.account = account
    }
}

/// `session.list`.
public struct SessionListParams: Codable, Sendable, Equatable {
    public var client: String
    public init(client: String) { self.client = client }
}

/// `session.use`.
public struct SessionUseParams: Codable, Sendable, Equatable {
    public var client: String
    public var account: String
    public init(client: String, account: String) {
        self.client = client
        self.account = account
    }
}

/// The most accounts one `Accounts=multiple` client holds (docs/rpc.md).
public enum AccountLimits {
    public static let maximumAccounts = 16
}

/// `session.wait`.
public struct SessionWaitParams: Codable, Sendable, Equatable {
    public static let defaultTimeoutMs = 5000
    public static let maximumTimeoutMs = 300_000
    public var client: String
    public var timeoutMs: Int?
    public var account: String?
    public init(client: String, timeoutMs: Int? = nil, account: String? = nil) {
        self.client = client
        self.timeoutMs = timeoutMs
        self.account = account
    }
}

/// `http.request` (docs/rpc.md "`http.request`").
public struct HTTPRequestParams: Codable, Sendable, Equatable {
    public var client: String
    public var method: String
    public var path: String
    public var query: [String: String]?
    public var headers: [String: String]?
    public var body: String?
    public var bodyBase64: String?
    public var timeoutMs: Int?
    public var account: String?
    public init(
        client: String, method: String, path: String, query: [String: String]? = nil,
        headers: [String: String]? = nil, body: String? = nil, bodyBase64: String? = nil, timeoutMs: Int? = nil,
        account: String? = nil
    ) {
        self.client = client
        self.account = account
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.bodyBase64 = bodyBase64
        self.timeoutMs = timeoutMs
    }
}

/// `http.request`'s result: text bodies in `body`, others in `bodyBase64`.
public struct HTTPResponseResult: Codable, Sendable, Equatable {
    public var status: Int
    /// Lower-case names; repeated headers joined with `, `.
    public var headers: [String: String]
    public var body: String?
    public var bodyBase64: String?
    public init(status: Int, headers: [String: String], body: String? = nil, bodyBase64: String? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bodyBase64 = bodyBase64
    }
}

/// `events.subscribe`.
public struct SubscribeParams: Codable, Sendable, Equatable {
    public var clients: [String]?
    public init(clients: [String]? = nil) { self.clients = clients }
}

/// `events.subscribe`'s result.
public struct SubscribeResult: Codable, Sendable, Equatable {
    public var subscription: String
    public init(subscription: String) { self.subscription = subscription }
}

/// `events.unsubscribe`.
public struct UnsubscribeParams: Codable, Sendable, Equatable {
    public var subscription: String
    public init(subscription: String) { self.subscription = subscription }
}

/// `events.unsubscribe`'s result: `{}`.
public struct EmptyResult: Codable, Sendable, Equatable {
    public init() {}
}

/// `broker.info`'s result.
public struct BrokerInfo: Codable, Sendable, Equatable {
    public var version: String
    public var `protocol`: Int
    public var socket: String
    /// `secret-service`, or `file` (`Vault=file` in broker.conf).
    public var vault: String
    public var vaultAvailable: Bool
    public var vaultLocked: Bool
    public var vaultDetail: String
    /// The file vault only: its directory, and whether its key is sealed with a
    /// passphrase (`browser-login vault unlock` opens it after a restart).
    public var vaultDirectory: String?
    public var vaultSealed: Bool?
    public init(
        version: String, protocol: Int = BrowserLoginAPI.protocolVersion, socket: String,
        vault: String = "secret-service", vaultAvailable: Bool, vaultLocked: Bool, vaultDetail: String
    ) {
        self.version = version
        self.protocol = `protocol`
        self.socket = socket
        self.vault = vault
        self.vaultAvailable = vaultAvailable
        self.vaultLocked = vaultLocked
        self.vaultDetail = vaultDetail
    }
}

/// One element of `clients.list`'s result (docs/rpc.md).
public struct ClientSummary: Codable, Sendable, Equatable {
    public var id: String
    public var appName: String
    /// `browser-login`, `oidc` or `oauth2` (docs/providers.md).
    public var `protocol`: String
    /// The login server, or the issuer's origin.
    public var server: String
    /// The redirect as configured: a custom scheme, or a loopback address
    /// without its per-attempt port.
    public var returnUrl: String
    public var policy: String
    public init(
        id: String, appName: String, protocol: String = "browser-login", server: String, returnUrl: String,
        policy: String
    ) {
        self.id = id
        self.appName = appName
        self.protocol = `protocol`
        self.server = server
        self.returnUrl = returnUrl
        self.policy = policy
    }

    enum CodingKeys: String, CodingKey {
        case id, appName, `protocol`, server, returnUrl, policy
    }

    /// A broker from before standard providers sends no `protocol`: its
    /// clients are all Browser Login clients.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        appName = try c.decode(String.self, forKey: .appName)
        self.protocol = try c.decodeIfPresent(String.self, forKey: .protocol) ?? "browser-login"
        server = try c.decode(String.self, forKey: .server)
        returnUrl = try c.decode(String.self, forKey: .returnUrl)
        policy = try c.decode(String.self, forKey: .policy)
    }
}
