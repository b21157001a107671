import BrowserLoginAPI

/// A sign-in protocol without server attempts that can ask its sign-in page
/// for another account (docs/rpc.md "Several accounts per client": OpenID
/// Connect's `prompt` and `login_hint`).
public protocol AccountPromptingSignIn: Sendable {
    func authorize(redirectURI: String, addAccount: Bool, loginHint: String?) async throws(BrokerError)
        -> LocalAuthorization
}

/// A `LocalAttemptSignIn` whose browser sign-in asks for an added account
/// (`login.start` with `addAccount` or `loginHint`); every other step is the
/// protocol's own.
public struct AccountSignIn: LocalAttemptSignIn {
    public let base: any LocalAttemptSignIn
    public let addAccount: Bool
    public let loginHint: String?

    public init(_ base: any LocalAttemptSignIn, addAccount: Bool, loginHint: String?) {
        self.base = base
        self.addAccount = addAccount
        self.loginHint = loginHint
    }

    public var defaultFlow: SignInFlow { base.defaultFlow }
    public var issuer: String { base.issuer }
    public var attemptMilliseconds: Int64 { base.attemptMilliseconds }
    public func authorize(redirectURI: String) async throws(BrokerError) -> LocalAuthorization {
        guard let prompting = base as? any AccountPromptingSignIn else {
            return try await base.authorize(redirectURI: redirectURI)
        }
        return try await prompting.authorize(redirectURI: redirectURI, addAccount: addAccount, loginHint: loginHint)
    }
    public func check(_ callback: ClaimedCallback) async throws(BrokerError) { try await base.check(callback) }
    public func redeem(code: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        try await base.redeem(code: code, proofs: proofs)
    }
    public func deviceAvailable() async throws(BrokerError) { try await base.deviceAvailable() }
    public func authorizeDevice() async throws(BrokerError) -> DeviceGrant { try await base.authorizeDevice() }
    public func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome {
        await base.poll(deviceCode: deviceCode, dpopKey: dpopKey)
    }
}
