import BrowserLoginProtocol
import Dispatch
import Foundation
import Synchronization

/// The reference login server of docs/protocol.md, running: an HTTP listener on
/// libmicrohttpd, the SQLite store and the hosted page. Start one in-process
/// with `try LoginServer(configuration:)` (port 0 picks a free port; read
/// `origin`), stop it with `stop()`.
public final class LoginServer: Sendable {
    /// The issuer: the configured public origin, or `http://<listen>:<port>`.
    public let origin: String
    /// The URL the socket listens on (`http(s)://<listen>:<port>`), as printed in the ready line.
    public let listenURL: String
    /// The port actually bound.
    public let port: Int
    public let configuration: ServerConfiguration

    private let http: HTTPServer
    private let store: Store
    let service: LoginService
    private let sweeper: Mutex<DispatchSourceTimer?>

    /// Validates `configuration`, opens (and migrates) the database, loads or
    /// creates the server secret and starts listening.
    /// - Parameters:
    ///   - clock: now in milliseconds; tests pass a manual clock.
    ///   - mailer: the sign-in email sender; nil writes to the outbox directory.
    public init(
        configuration: ServerConfiguration, clock: @escaping ServerClock = Clocks.system, mailer: (any MailSender)? = nil
    ) throws {
        try configuration.validate()
        self.configuration = configuration
        var tls: (key: String, certificate: String)? = nil
        if let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath {
            guard let certificate = try? String(contentsOfFile: certificatePath, encoding: .utf8) else {
                throw ConfigurationError(field: "tls.certificate", rule: "readable", message: "cannot read the certificate file")
            }
            guard let key = try? String(contentsOfFile: keyPath, encoding: .utf8) else {
                throw ConfigurationError(field: "tls.key", rule: "readable", message: "cannot read the key file")
            }
            tls = (key, certificate)
        }
        let location = DatabaseLocation(configuration.databasePath)
        // The secret first: a PostgreSQL server without one fails before it connects.
        let secret = try ServerSecret.load(configuration, location: location)
        if case .postgres = location, mailer == nil, configuration.smtp == nil, configuration.outboxPath == nil {
            // The default (next to the database) means nothing for a URL.
            throw ConfigurationError(
                field: "outbox", rule: "required",
                message: "with PostgreSQL, set outbox (--outbox): the directory the sign-in emails are written to")
        }
        let store: Store
        do { store = try Store(location: location) } catch {
            switch location {
            case .sqlite:
                throw ConfigurationError(
                    field: "database", rule: "openable", message: "cannot open the SQLite database (\(error))")
            case .postgres:
                throw ConfigurationError(
                    field: "database", rule: "reachable",
                    message: "cannot use the PostgreSQL database \(location.redacted) (\(error)); check that it runs and the URL")
            }
        }
        self.store = store
        let sender: any MailSender =
            try mailer ?? configuration.smtp.map { try SMTPMailSender($0) }
            ?? OutboxMailSender(directory: configuration.resolvedOutboxPath)

        let slot = ServiceSlot()
        let http = try HTTPServer(
            address: configuration.listenAddress, port: configuration.port, tls: tls,
            maximumBody: LoginService.maximumBody, connectionLimit: configuration.connectionLimit,
            answersInPlace: { request in slot.service.withLock({ $0 })?.answersInPlace(request) ?? false }
        ) { request in
            guard let service = slot.service.withLock({ $0 }) else {
                return HTTPServerResponse(status: 503, headers: [("Cache-Control", "no-store"), ("Retry-After", "1")])
            }
            return service.handle(request)
        }
        self.http = http
        self.port = http.port
        let host = configuration.listenAddress.contains(":") ? "[\(configuration.listenAddress)]" : configuration.listenAddress
        self.listenURL = (tls == nil ? "http://" : "https://") + host + ":\(http.port)"
        self.origin = configuration.publicOrigin.map { (try? Origin($0).serialized) ?? $0 } ?? listenURL
        let service = LoginService(
            configuration: configuration, issuer: origin, store: store, secret: secret, clock: clock, mailer: sender)
        slot.service.withLock { $0 = service }
        self.service = service

        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "browser-login-server.sweep"))
        timer.schedule(deadline: .now(), repeating: .seconds(60))
        timer.setEventHandler {
            let now = clock()
            store.sweep { db in try Records.sweep(db, now: now) }
        }
        timer.resume()
        sweeper = Mutex(timer)
        Log.info("started", ["listen": listenURL, "issuer": origin, "base_path": configuration.basePath])
    }

    /// Applies a reloaded configuration (SIGHUP, docs/server.md): validated
    /// first (an invalid one changes nothing); the test account bases
    /// (`testAccounts`) take effect at once, ending the sessions of a removed
    /// base on their next request. Any other change needs a restart, and a
    /// warning says so.
    public func reload(_ new: ServerConfiguration) throws(ConfigurationError) {
        try new.validate()
        service.reloadTestAccounts(new.testAccounts)
        var rest = new
        rest.testAccounts = configuration.testAccounts
        if rest != configuration {
            Log.warning("the configuration changed beyond testAccounts; restart the server to apply the rest")
        }
        Log.info("configuration reloaded", ["test_accounts": "\(new.testAccounts.count)"])
    }

    /// Stops listening (waiting for requests in flight) and closes the database.
    public func stop() {
        if let timer = sweeper.withLock({ $0.take() }) {
            timer.cancel()
            http.stop()
            store.close()
        }
    }

    deinit { stop() }
}

/// Where the HTTP handler finds the service, which is made once the port is known.
private final class ServiceSlot: Sendable {
    let service = Mutex<LoginService?>(nil)
}
