import BrowserLoginProtocol

/// The server's request handling without a listener: one request in, one
/// response out, exactly as the HTTP listener would call it (routing, the
/// common rules, every route), on an in-memory database. For fuzzing the
/// request parsing and for tests that need no socket.
public final class LoginRequestHandler: Sendable {
    /// The maximum body the listener accepts; larger bodies arrive as `bodyTooLarge`.
    public static let maximumBody = LoginService.maximumBody

    private let service: LoginService
    private let store: Store

    /// - Parameters:
    ///   - issuer: the server origin the routes compare `Origin` with and put in callbacks.
    ///   - mailer: receives the sign-in emails.
    public init(
        configuration: ServerConfiguration, issuer: String, clock: @escaping ServerClock = Clocks.system,
        mailer: any MailSender
    ) throws {
        try configuration.validate()
        store = try Store(path: ":memory:")
        service = LoginService(
            configuration: configuration, issuer: issuer, store: store, secret: try Crypto.randomBytes(32), clock: clock,
            mailer: mailer)
    }

    public func handle(_ request: HTTPServerRequest) -> HTTPServerResponse { service.handle(request) }

    deinit { store.close() }
}
