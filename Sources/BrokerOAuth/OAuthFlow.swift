import BrokerCore
import BrokerJOSE
import BrowserLoginProtocol

/// The sign-in flow at a standard provider (docs/providers.md) in the
/// engine's neutral steps: authorization code + PKCE with `state` and `nonce`
/// through the browser, and the device authorization grant. The provider keeps
/// no attempt the broker can ask about; the attempt is found by a digest of
/// its `state` (or device code).
extension OAuthSignIn {
    /// Not Browser Login's base path: every path of the API origin is the app's.
    public func reservesAppPath(_ path: String, client: ClientConfig) -> Bool { false }

    public var defaultFlow: SignInFlow { settings.flow }
    public var issuer: String { settings.issuer }
    /// The provider's own authorization codes live minutes; its login page may take longer.
    public var attemptMilliseconds: Int64 { 15 * 60_000 }

    /// The SQLite key of an attempt: a digest of its `state`, so that a
    /// callback finds its attempt by one indexed lookup of a value that says
    /// nothing about the state itself; the state is then compared in constant
    /// time with the one in the vault.
    static func stateKey(_ state: String) -> String { "st_" + Crypto.digest(state) }

    /// An added account (docs/rpc.md) asks the provider to let the user pick
    /// or sign in as another account: `prompt=select_account`, or `login` when
    /// the metadata lists `prompt_values_supported` without it; `login_hint`
    /// pre-fills the address.
    public func authorize(client: ClientConfig, redirectURI: String, accounts: AccountRequest, ephemeral: Bool)
        async throws(BrokerError) -> LocalAuthorization
    {
        do throws(ProviderError) {
            let metadata = try await provider.metadata()
            let verifier: ProofSecret
            let state: String
            let nonce: String?
            do {
                verifier = try ProofSecret.generate()
                state = try Crypto.randomToken(bytes: 32)
                nonce = settings.kind == .oidc ? try Crypto.randomToken(bytes: 32) : nil
            } catch { throw .notSent("no randomness") }
            var prompt: String?
            if accounts.add {
                let supported = metadata.promptValuesSupported
                prompt = supported == nil || supported!.contains("select_account") ? "select_account" : "login"
            }
            let dpopKey: DPoPKey?
            if try provider.usesDPoP(metadata) {
                do { dpopKey = try DPoPKey.generate() } catch { throw .keyNotMade }
            } else {
                dpopKey = nil
            }
            let pushTo = try provider.pushEndpoint(metadata)
            let (endpoint, parameters) = try await provider.authorizeParameters(
                redirectURI: redirectURI, state: state, nonce: nonce, codeChallenge: verifier.challenge, prompt: prompt,
                loginHint: accounts.loginHint)
            let url = OAuthProvider.url(endpoint, adding: parameters)
            var push: (@Sendable () async throws(BrokerError) -> OpenedAttempt)?
            if let pushTo {
                let provider = self.provider
                push = { () async throws(BrokerError) -> OpenedAttempt in
                    do throws(ProviderError) {
                        return OpenedAttempt(
                            authorizeUrl: try await provider.pushAuthorization(
                                to: pushTo, authorizationEndpoint: endpoint, parameters: parameters))
                    } catch { throw error.pushFailure }
                }
            }
            return LocalAuthorization(
                authorizeUrl: url,
                proofs: LocalProofs(
                    codeVerifier: verifier.value, state: state, nonce: nonce, redirectURI: redirectURI,
                    dpopKey: dpopKey?.serialized),
                lookupKey: Self.stateKey(state), deviceFallback: metadata.deviceAuthorizationEndpoint != nil, open: push)
        } catch { throw error.brokerError() }
    }

    /// RFC 9207: the issuer that answered must be the client's. Fails closed:
    /// without the metadata, whether `iss` is promised is unknown.
    public func check(_ callback: ClaimedCallback, client: ClientConfig) async throws(BrokerError) {
        let metadata: ProviderMetadata
        do { metadata = try await provider.metadata() } catch { throw error.brokerError() }
        switch metadata.checkCallbackIssuer(callback.issuer, issuerIsTemplate: settings.issuerIsTemplate) {
        case .accepted: break
        case .mismatch(let issuer, let expected):
            throw BrokerError(
                .issuerMismatch,
                "the callback's issuer is not this client's provider (\(ProviderError.issuerText(issuer)) instead of \(ProviderError.issuerText(expected))); nothing was changed"
            )
        case .missing:
            // OAUTH.md §2: an error callback without `iss` can only end the attempt, so it is accepted;
            // a code callback without the promised `iss` is refused.
            guard case .code = callback.outcome else { break }
            throw BrokerError(
                .callbackInvalid,
                "the callback lacks the 'iss' parameter its provider promises (RFC 9207); nothing was changed")
        }
    }

    /// The exchange, sent once: a definite refusal or no definite answer
    /// spends the code; only a request that provably never left does not.
    public func redeem(code: String, key: String, proofs: LocalProofs) async throws(LocalRedeemFailure) -> LocalGrant {
        let tokens: TokenResponse
        var dpop: DPoPKey?
        if let serialized = proofs.dpopKey {
            guard let key = DPoPKey(serialized: serialized) else { throw .refused(Self.keyUnavailable) }
            dpop = key
        }
        do {
            tokens = try await provider.exchange(
                code: code, redirectURI: proofs.redirectURI, codeVerifier: proofs.codeVerifier, dpop: dpop)
        } catch {
            if error.certainlyNotSent { throw .notSent(error.brokerError()) }
            if error.isDefinite { throw .refused(error.brokerError()) }
            throw .uncertain("\(error)", error.brokerError())
        }
        let openid = settings.kind == .oidc && settings.scopes.contains("openid")
        return grant(tokens, nonce: proofs.nonce, idTokenRequired: openid, dpop: dpop)
    }

    /// Tokens that sign no one in are revoked at once where the provider can
    /// (nothing is owed: they were never kept).
    /// `dpop`: the key the token request proved; the session keeps it when
    /// the tokens are DPoP-bound (`token_type` `DPoP`).
    func grant(_ tokens: TokenResponse, nonce: String?, idTokenRequired: Bool, dpop: DPoPKey? = nil) -> LocalGrant {
        let bound = tokens.tokenType.lowercased() == "dpop" ? dpop : nil
        return LocalGrant { () async throws(BrokerError) -> IssuedSession in
            do throws(TokenAnswerFailure) {
                return try await issue(tokens, nonce: nonce, idTokenRequired: idTokenRequired, dpop: bound)
            } catch {
                let unkept = IssuedSession(
                    sessionId: "", accessToken: tokens.accessToken, accessTokenExpiresAt: nil,
                    refreshToken: tokens.refreshToken, expiresAt: nil, authenticatedAt: clock.now(), authMethod: "",
                    account: Account(userId: "", email: "", displayName: ""), dpopKey: bound?.serialized)
                _ = try? await revoke(unkept)
                throw error.brokerError()
            }
        }
    }

    // MARK: - The device authorization grant

    public func deviceAvailable(client: ClientConfig) async throws(BrokerError) {
        do throws(ProviderError) {
            // (The metadata already carries the client file's *Endpoint keys.)
            if try await provider.metadata().deviceAuthorizationEndpoint == nil { throw ProviderError.noDeviceEndpoint }
        } catch { throw error.brokerError() }
    }

    public func authorizeDevice() async throws(BrokerError) -> DeviceGrant {
        let authorization: DeviceAuthorization
        let dpopKey: DPoPKey?
        do throws(ProviderError) {
            // The device authorization request itself carries no proof (OAUTH.md §6); every poll does.
            authorization = try await provider.deviceAuthorization()
            if try provider.usesDPoP(try await provider.metadata()) {
                do { dpopKey = try DPoPKey.generate() } catch { throw .keyNotMade }
            } else {
                dpopKey = nil
            }
        } catch { throw error.brokerError() }
        let view = AttemptView.DeviceView(
            userCode: authorization.userCode, verificationUri: authorization.verificationURI,
            verificationUriComplete: authorization.verificationURIComplete, interval: max(1, authorization.interval))
        // A key like a browser attempt's, so that its follow-ups (the
        // removal of its device code once it ends) run the same way.
        return DeviceGrant(
            deviceCode: authorization.deviceCode, view: view, expiresInSeconds: max(authorization.expiresIn, 1),
            lookupKey: "dv_" + Crypto.digest(authorization.deviceCode), dpopKey: dpopKey?.serialized)
    }

    public func poll(deviceCode: String, dpopKey: String?) async -> DevicePollOutcome {
        var dpop: DPoPKey?
        if let dpopKey {
            guard let key = DPoPKey(serialized: dpopKey) else { return .refused(Self.keyUnavailable) }
            dpop = key
        }
        let poll: DevicePoll
        do { poll = try await provider.pollDevice(deviceCode: deviceCode, dpop: dpop) } catch {
            return error.isDefinite ? .refused(error.brokerError()) : .unreachable
        }
        switch poll {
        case .pending: return .pending
        case .slowDown: return .slowDown
        case .denied: return .denied
        case .expired: return .expired
        case .tokens(let tokens): return .granted(grant(tokens, nonce: nil, idTokenRequired: false, dpop: dpop))
        }
    }
}

/// The callbacks of standard providers (RFC 6749 §4.1.2, RFC 9207): they
/// name a `state` and no `attempt`.
public struct OAuthCallbacks: CallbackReader {
    public init() {}

    public func claim(callback url: String) throws(BrokerError) -> ClaimedCallback? {
        guard ProviderCallback.isProviderCallback(url) else { return nil }
        let callback: ProviderCallback
        do { callback = try ProviderCallback(parsing: url) } catch {
            throw BrokerError(.callbackInvalid, "the callback URL was refused: \(error.message)")
        }
        let outcome: ClaimedCallback.Outcome
        switch callback.outcome {
        case .code(let code): outcome = .code(code)
        case .error(let error, _) where error == "access_denied": outcome = .denied
        case .error(let error, let description):
            outcome = .failed(ProviderError.refused(status: 302, error: error, description: description).brokerError())
        }
        return ClaimedCallback(
            lookupKey: OAuthSignIn.stateKey(callback.state), target: callback.target, state: callback.state,
            issuer: callback.issuer, outcome: outcome)
    }
}
