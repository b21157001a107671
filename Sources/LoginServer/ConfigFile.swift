import BrowserLoginProtocol
import Foundation

/// The configuration file: one JSON object (docs/server.md,
/// examples/server.json). Duplicate members are refused, unknown members
/// are refused (they are usually typos), and every error names the field.
extension ServerConfiguration {
    private struct File: Decodable {
        struct TLS: Decodable {
            var certificate: String?
            var key: String?
        }
        struct Limit: Decodable {
            var burst: Int?
            var perMinute: Int?
        }
        struct Limits: Decodable {
            var create: Limit?
            var exchange: Limit?
            var codeEntry: Limit?
        }
        struct Client: Decodable {
            var clientId: String?
            var appName: String?
            var returnUrls: [String]?
            var policy: String?
        }
        var listen: String?
        var port: Int?
        var basePath: String?
        var publicOrigin: String?
        var clients: [Client]?
        var lifetimeMillis: Int64?
        var sessionLifetimeMillis: Int64?
        var accessTokenLifetimeMillis: Int64?
        var refreshGraceMillis: Int64?
        var signInCodeLifetimeMillis: Int64?
        var database: String?
        var secretKey: String?
        var outbox: String?
        var tls: TLS?
        var testAccounts: [String]?
        var trustForwardedFor: Bool?
        var rateLimits: Limits?
        var connectionLimit: Int?
        var testExchangeDelayMillis: Int64?
        var signupMode: String?
        var waitlist: Bool?
        var allowedDomains: [String]?
        var invitationLifetimeMillis: Int64?
        var emailRedirectUris: [String]?
        var email: MailConfigFile.Email?
        var smtp: MailConfigFile.SMTP?
        var passkeyRpIds: [String]?
    }

    private static let knownMembers: [String: Set<String>] = [
        "": [
            "listen", "port", "basePath", "publicOrigin", "clients", "lifetimeMillis", "sessionLifetimeMillis",
            "accessTokenLifetimeMillis", "refreshGraceMillis", "signInCodeLifetimeMillis", "database", "secretKey",
            "outbox", "tls", "testAccounts", "trustForwardedFor", "rateLimits", "connectionLimit",
            "testExchangeDelayMillis", "$comment", "signupMode", "waitlist", "allowedDomains",
            "invitationLifetimeMillis", "emailRedirectUris", "email", "smtp", "upstreamProviders",
            "passkeyRpIds",
        ],
        "tls": ["certificate", "key"],
        "rateLimits": ["create", "exchange", "codeEntry"],
        "rateLimit": ["burst", "perMinute"],
        "client": ["clientId", "appName", "returnUrls", "policy"],
        "email": MailConfigFile.emailMembers,
        "smtp": MailConfigFile.smtpMembers,
    ]

    /// A path of the configuration file: an absolute one as it is, a relative
    /// one against `directory` (the file's folder; nil: the working directory).
    static func resolve(_ path: String, _ directory: String?) -> String {
        guard let directory, !path.hasPrefix("/") else { return path }
        return URL(fileURLWithPath: directory).appendingPathComponent(path).path
    }

    /// Parses a configuration file. Relative paths in it are resolved
    /// against `directory` (the file's folder). Does not validate: call
    /// `validate()` after applying flags.
    public static func load(json data: Data, relativeTo directory: String? = nil) throws(ConfigurationError)
        -> ServerConfiguration
    {
        func fail(_ field: String, _ rule: String, _ message: String) -> ConfigurationError {
            ConfigurationError(field: field, rule: rule, message: message)
        }
        do { try StrictJSON.validateObject(data) } catch {
            switch error {
            case .duplicateMember: throw fail("(file)", "no-duplicates", "a member appears twice in an object")
            case .notAnObject: throw fail("(file)", "object", "the file is one JSON object")
            default: throw fail("(file)", "json", "the file is not valid JSON")
            }
        }
        try checkMembers(data)
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: data)
        } catch let error as DecodingError {
            throw fail(fieldPath(error), "type", "the value has the wrong type")
        } catch {
            throw fail("(file)", "json", "the file is not valid JSON")
        }
        func path(_ p: String?) -> String? { p.map { resolve($0, directory) } }
        var c = ServerConfiguration()
        if let v = file.listen { c.listenAddress = v }
        if let v = file.port { c.port = v }
        if let v = file.basePath { c.basePath = v }
        c.publicOrigin = file.publicOrigin
        if let v = file.lifetimeMillis { c.lifetimeMillis = v }
        if let v = file.sessionLifetimeMillis { c.sessionLifetimeMillis = v }
        if let v = file.accessTokenLifetimeMillis { c.accessTokenLifetimeMillis = v }
        if let v = file.refreshGraceMillis { c.refreshGraceMillis = v }
        if let v = file.signInCodeLifetimeMillis { c.signInCodeLifetimeMillis = v }
        if let v = file.database { c.databasePath = DatabaseLocation.isPostgresURL(v) ? v : path(v) ?? v }
        c.secretKeyPath = path(file.secretKey)
        c.outboxPath = path(file.outbox)
        c.tlsCertificatePath = path(file.tls?.certificate)
        c.tlsKeyPath = path(file.tls?.key)
        if let v = file.testAccounts { c.testAccounts = v }
        if let v = file.trustForwardedFor { c.trustForwardedFor = v }
        if let v = file.connectionLimit { c.connectionLimit = v }
        if let v = file.testExchangeDelayMillis { c.testExchangeDelayMillis = v }
        if let v = file.signupMode {
            guard let mode = SignupMode(rawValue: v) else {
                throw fail("signupMode", "one-of", "the sign-up mode is 'open', 'invite' or 'domain'")
            }
            c.signupMode = mode
        }
        if let v = file.waitlist { c.waitlist = v }
        if let v = file.allowedDomains { c.allowedDomains = v }
        if let v = file.invitationLifetimeMillis { c.invitationLifetimeMillis = v }
        if let v = file.passkeyRpIds { c.passkeyRpIds = v }
        func limit(_ l: File.Limit?, _ d: RateLimit) -> RateLimit {
            RateLimit(burst: l?.burst ?? d.burst, perMinute: l?.perMinute ?? d.perMinute)
        }
        c.rateLimits.create = limit(file.rateLimits?.create, c.rateLimits.create)
        c.rateLimits.exchange = limit(file.rateLimits?.exchange, c.rateLimits.exchange)
        c.rateLimits.codeEntry = limit(file.rateLimits?.codeEntry, c.rateLimits.codeEntry)
        for (i, client) in (file.clients ?? []).enumerated() {
            let field = "clients[\(i)]"
            guard let id = client.clientId else { throw fail(field + ".clientId", "required", "every client has a clientId") }
            guard let appName = client.appName else {
                throw fail(field + ".appName", "required", "every client has an appName")
            }
            guard let urls = client.returnUrls else {
                throw fail(field + ".returnUrls", "required", "every client has returnUrls")
            }
            guard let policyText = client.policy else {
                throw fail(field + ".policy", "required", "every client has a policy: confirm or automatic")
            }
            guard let policy = ClientPolicy(rawValue: policyText) else {
                throw fail(field + ".policy", "one-of", "the policy is 'confirm' or 'automatic'")
            }
            var returnUrls: [ReturnURL] = []
            for (j, text) in urls.enumerated() {
                do { returnUrls.append(try ReturnURL(text)) } catch {
                    throw fail("\(field).returnUrls[\(j)]", error.rule, error.message)
                }
            }
            c.clients.append(ClientRegistration(clientId: id, appName: appName, returnUrls: returnUrls, policy: policy))
        }
        try MailConfigFile.apply(redirects: file.emailRedirectUris, email: file.email, smtp: file.smtp, to: &c, path: path)
        c.upstreamProviders = try loadUpstreamProviders(json: data, relativeTo: directory)
        return c
    }

    private static func checkMembers(_ data: Data) throws(ConfigurationError) {
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        func check(_ object: Any?, _ kind: String, _ field: String) throws(ConfigurationError) {
            guard let object = object as? [String: Any], let known = knownMembers[kind] else { return }
            for key in object.keys.sorted() where !known.contains(key) {
                let name = field.isEmpty ? key : field + "." + key
                throw ConfigurationError(field: name, rule: "known-member", message: "'\(key)' is not a configuration field")
            }
        }
        try check(root, "", "")
        try check(root["tls"], "tls", "tls")
        try check(root["rateLimits"], "rateLimits", "rateLimits")
        try check(root["email"], "email", "email")
        try check(root["smtp"], "smtp", "smtp")
        if let limits = root["rateLimits"] as? [String: Any] {
            for (name, value) in limits { try check(value, "rateLimit", "rateLimits." + name) }
        }
        if let clients = root["clients"] as? [Any] {
            for (i, client) in clients.enumerated() { try check(client, "client", "clients[\(i)]") }
        }
    }

    private static func fieldPath(_ error: DecodingError) -> String {
        let context: DecodingError.Context
        var extra: CodingKey? = nil
        switch error {
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c): context = c
        case .keyNotFound(let key, let c):
            context = c
            extra = key
        @unknown default: return "(file)"
        }
        var out = ""
        for key in context.codingPath + (extra.map { [$0] } ?? []) {
            if let index = key.intValue { out += "[\(index)]" } else { out += (out.isEmpty ? "" : ".") + key.stringValue }
        }
        return out.isEmpty ? "(file)" : out
    }
}
