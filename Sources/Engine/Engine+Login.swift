import BrokerCore
import BrokerStore
import BrowserLoginProtocol

extension BrokerEngine {
    // MARK: - login.start

    /// Starts a sign-in; `activationToken` (never stored) gives the browser
    /// this call opens the focus (`XDG_ACTIVATION_TOKEN`, `DESKTOP_STARTUP_ID`).
    public func start(
        client clientId: String, ephemeral: Bool, openBrowser: Bool, switchAccount: Bool, flow: SignInFlow? = nil,
        activationToken: String? = nil, addAccount: Bool = false, loginHint: String? = nil
    ) async throws -> AttemptView {
        let client = try client(clientId)
        let accounts = AccountRequest(add: addAccount, loginHint: loginHint)
        if flow == .device && server(client.id).localAttempts == nil {
            throw BrokerError(
                .deviceFlowUnsupported,
                "\(client.appName) signs in with a Browser Login server, which has no device sign-in; start without 'flow', or open the sign-in page on another device with 'browser-login start --no-browser'"
            )
        }
        if ephemeral && client.privateBrowserCommand == nil {
            throw BrokerError(
                .ephemeralUnsupported,
                "this client's browser cannot open a private session; set PrivateBrowser= in its client file (for example 'firefox --private-window %u')"
            )
        }
        // One start per client runs, as a work item; concurrent callers share it.
        return try await withCheckedThrowingContinuation { continuation in
            starting[clientId, default: []].append(continuation)
            guard starting[clientId]!.count == 1 else { return }
            let queued = work.submit {
                await self.runStart(
                    client, ephemeral: ephemeral, openBrowser: openBrowser, switchAccount: switchAccount, flow: flow,
                    activationToken: activationToken, accounts: accounts)
            }
            if !queued { startEnded(clientId, .failure(BrokerError.workRefused)) }
        }
    }

    private func runStart(
        _ client: ClientConfig, ephemeral: Bool, openBrowser: Bool, switchAccount: Bool, flow: SignInFlow?,
        activationToken: String?, accounts: AccountRequest
    ) async {
        let result: Result<AttemptView, any Error>
        do {
            result = .success(
                try await startNow(
                    client, ephemeral: ephemeral, openBrowser: openBrowser, switchAccount: switchAccount, flow: flow,
                    activationToken: activationToken, accounts: accounts))
        } catch { result = .failure(error) }
        startEnded(client.id, result)
    }

    private func startEnded(_ clientId: String, _ result: Result<AttemptView, any Error>) {
        for continuation in starting.removeValue(forKey: clientId) ?? [] { continuation.resume(with: result) }
    }

    private func startNow(
        _ client: ClientConfig, ephemeral: Bool, openBrowser: Bool, switchAccount: Bool, flow: SignInFlow?,
        activationToken: String?, accounts: AccountRequest
    ) async throws -> AttemptView {
        if accounts.add && !switchAccount {
            // docs/rpc.md: a new account beside the signed-in ones, at most 16.
            if try sessions.heldAccounts(client.id) >= AccountLimits.maximumAccounts {
                throw BrokerError(
                    .accountLimit,
                    "\(client.appName) holds \(AccountLimits.maximumAccounts) accounts, the most a client may; sign one out first (browser-login sign-out \(client.id) --account KEY)"
                )
            }
        } else if let session = try store.session(client: client.id), session.status == .signedIn {
            guard switchAccount else {
                throw BrokerError(
                    .alreadySignedIn,
                    "\(client.appName) is already signed in as \(session.account?.email ?? "an account"); sign out first, or start with switchAccount=true"
                )
            }
            _ = try await signOut(client: client.id)
        }
        if var live = try store.list(client: client.id, states: [.waiting], limit: 1).first, try !expireIfDue(&live) {
            return try await resume(attemptId: live.id, openBrowser: openBrowser, activationToken: activationToken)
        }
        if let signIn = server(client.id).localAttempts {
            return try await startLocal(
                client, signIn: signIn, ephemeral: ephemeral, openBrowser: openBrowser, flow: flow,
                activationToken: activationToken, accounts: accounts)
        }

        // Both proofs are in the vault and the row is committed before create is sent.
        let codeVerifier = try ProofSecret.generate()
        let recoveryKey = try ProofSecret.generate()
        let id = "at_" + (try Crypto.randomToken(bytes: 12))
        var secrets = AttemptSecrets(codeVerifier: codeVerifier.value, recoveryKey: recoveryKey.value)
        let keys = VaultKeys.attempt(client: client.id, attemptId: id)
        // The row first, then the proofs: a crash between them leaves a
        // `starting` row, which start-up recovery fails and cleans up, never
        // a vault item that nothing names.
        let createdAt = now()
        // The scheme or a loopback listener of its own (Engine+LocalAttempts.swift), closed unless the attempt waits.
        let route = try chooseReturn(client, attemptId: id, ephemeral: ephemeral)
        var routeKept = false
        defer { if !routeKept { route.listener?.close() } }
        var record = AttemptRecord(
            id: id, client: client.id, state: .starting, returnURL: route.url,
            issuer: client.server.serialized, ephemeral: ephemeral, createdAt: createdAt)
        try attempts.insert(record)
        do {
            try await vault.storeJSON(secrets, label: VaultKeys.attemptLabel(appName: client.appName), attributes: keys)
        } catch {
            // Nothing was sent: the attempt never existed for anyone.
            try attempts.discard(record)
            throw error.brokerError
        }
        logger.info(
            "attempt created",
            ["attempt.id": id, "client": client.id, "return.via": route.via, "return.reason": route.reason])
        attempts.publish(record)

        let created: CreateAttemptResponse
        do {
            created = try await attemptControl(client.id).create(
                CreateAttemptRequest(
                    clientId: client.id, returnUrl: route.url, codeChallenge: codeVerifier.challenge,
                    recoveryChallenge: recoveryKey.challenge, ephemeral: ephemeral,
                    prompt: accounts.add ? "login" : nil, loginHint: accounts.loginHint))
        } catch {
            let brokerError = error.brokerError(attemptId: id)
            try attempts.commit(
                &record, .createFailed,
                error: AttemptError(
                    code: brokerError.code.rawValue, message: brokerError.message, serverCode: brokerError.serverCode))
            try? await vault.remove(attributes: keys)
            throw brokerError
        }
        if let problem = try createProblem(created, client: client) {
            try attempts.commit(
                &record, .createFailed, error: AttemptError(code: problem.code.rawValue, message: problem.message))
            try? await vault.remove(attributes: keys)
            throw problem.with(attemptId: id)
        }
        secrets.authorizeUrl = created.authorizeUrl
        do {
            try await vault.storeJSON(secrets, label: VaultKeys.attemptLabel(appName: client.appName), attributes: keys)
        } catch {
            try attempts.commit(
                &record, .createFailed, error: AttemptError(code: error.brokerError.code.rawValue, message: error.message))
            throw error.brokerError.with(attemptId: id)
        }
        try attempts.commit(&record, .created) {
            $0.serverAttemptId = created.attemptId
            $0.expiresAt = created.expiresAt
        }
        if let listener = route.listener {
            loopbacks[id] = listener
            routeKept = true
        }
        var result = AttemptView(record)
        result.authorizeUrl = created.authorizeUrl
        if openBrowser {
            try await launch(
                created.authorizeUrl, client: client, ephemeral: ephemeral, attemptId: id,
                activationToken: activationToken)
        }
        return result
    }

    /// §7 Create: the issuer must be the configured origin and the id new for the client.
    private func createProblem(_ created: CreateAttemptResponse, client: ClientConfig) throws -> BrokerError? {
        if created.issuer != client.server.serialized {
            return BrokerError(
                .serverProtocolError,
                "the login server answered with another issuer than the client's Server= origin; check the client file")
        }
        if !isValidOpaqueId(created.attemptId) {
            return BrokerError(.serverProtocolError, "the login server answered with a malformed attempt id")
        }
        if try store.attempts(serverAttemptId: created.attemptId).contains(where: { $0.client == client.id }) {
            return BrokerError(.serverProtocolError, "the login server reused an attempt id it had already given")
        }
        guard let parts = URLParts(splitting: created.authorizeUrl),
            parts.scheme == "https" || (parts.scheme == "http" && client.server.isLoopback)
        else {
            return BrokerError(.serverProtocolError, "the login server's authorizeUrl is not an https URL")
        }
        return nil
    }

    /// `wait`: until it is known whether the browser started (the caller falls back to a device sign-in).
    func launch(
        _ url: String, client: ClientConfig, ephemeral: Bool, attemptId: String, activationToken: String?,
        wait: Bool = false
    ) async throws {
        let command = ephemeral ? client.privateBrowserCommand : client.browserCommand
        do throws(BrokerError) {
            // Answers once the browser is started; a failure found later reaches the attempt (Launcher.swift).
            if let watch = try await launcher.launch(url, command: command, activationToken: activationToken) {
                if wait, let failure = await watch() { throw failure }
                if !wait { watchLaunch(watch, attemptId: attemptId) }
            }
        } catch {
            throw error.with(attemptId: attemptId)
        }
    }

    // MARK: - login.resume

    public func resume(attemptId: String, openBrowser: Bool, activationToken: String? = nil) async throws
        -> AttemptView
    {
        var record = try attempt(attemptId)
        try expireIfDue(&record)
        var result = AttemptView(record)
        guard record.state == .waiting else { return result }
        let client = try client(record.client)
        let secrets: AttemptSecrets?
        do {
            secrets = try await vault.lookupJSON(
                AttemptSecrets.self, attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
        } catch { throw error.brokerError.with(attemptId: attemptId) }
        if let device = secrets?.device {
            // A device sign-in: the code and the address again, no browser.
            result.device = device
            return result
        }
        guard let url = secrets?.authorizeUrl else {
            throw BrokerError(
                .vaultUnavailable,
                "the attempt's proofs are missing from the keyring; cancel it and start a new sign-in",
                attemptId: attemptId)
        }
        result.authorizeUrl = url
        if openBrowser {
            try await launch(
                url, client: client, ephemeral: record.ephemeral, attemptId: attemptId,
                activationToken: activationToken)
        }
        return result
    }

    /// Expires a waiting attempt past its expiry (the server is told by the `cancel` follow-up).
    @discardableResult
    func expireIfDue(_ record: inout AttemptRecord) throws -> Bool {
        guard record.state == .waiting, let expiresAt = record.expiresAt, now() >= expiresAt else { return false }
        try expireLocally(&record)
        return true
    }

    func expireLocally(_ record: inout AttemptRecord) throws {
        try attempts.commit(
            &record, .localExpiry,
            error: AttemptError(
                code: BrokerErrorCode.attemptExpired.rawValue, message: "the sign-in was not finished in time; start again")
        ) { $0.followUp = .cancel }
    }

    // MARK: - login.finish

    public func finish(url: String) async throws -> AttemptView {
        // Each registered protocol's reader is asked whether the callback is its kind.
        for reader in callbackReaders {
            if let claimed = try reader.claim(callback: url) { return try await finishLocal(claimed) }
        }
        let callback: Callback
        do { callback = try Callback(parsing: url) } catch {
            throw BrokerError(.callbackInvalid, "the callback URL was refused: \(error.message)")
        }
        var candidates = try store.attempts(serverAttemptId: callback.attempt)
        if candidates.isEmpty {
            let knownTarget = clients.values.contains { isReturnTarget(callback.target, of: $0) }
            if !knownTarget {
                throw BrokerError(
                    .callbackMismatch, "the callback URL matches no configured client's return URL; nothing was changed")
            }
            throw BrokerError(
                .attemptUnknown, "the callback names no attempt of this broker (it may be old); start a new sign-in")
        }
        candidates = candidates.filter {
            clients[$0.client].map { server($0.id).attemptControl != nil } ?? false
                && ReturnURL.attemptMatches($0.returnURL, callback.target)
        }
        guard var record = candidates.first else {
            throw BrokerError(
                .callbackMismatch, "the callback URL is not the return URL its attempt registered; nothing was changed")
        }
        let client = try client(record.client)
        guard callback.issuer == client.server.serialized else {
            throw BrokerError(
                .issuerMismatch, "the callback's issuer is not this client's login server; nothing was changed",
                attemptId: record.id)
        }
        switch callback.outcome {
        case .error:
            return try await finishError(&record)
        case .code(let code):
            return try await finishCode(&record, callback: callback, code: code)
        }
    }

    private func finishError(_ record: inout AttemptRecord) async throws -> AttemptView {
        guard record.state == .waiting else { throw notWaiting(record) }
        let secrets = try await attemptSecrets(record)
        let status: StatusResponse
        do {
            status = try await attemptControl(record.client).status(
                attemptId: record.serverAttemptId ?? "", recoveryKey: secrets.recoveryKey)
        } catch {
            throw error.brokerError(attemptId: record.id)
        }
        record = try attempt(record.id)
        guard status.state == .cancelled else {
            throw BrokerError(
                .callbackInvalid,
                "the error callback was not confirmed by the server (it says \(status.state.rawValue)); nothing was changed",
                attemptId: record.id)
        }
        guard record.state == .waiting else { throw notWaiting(record) }
        try attempts.commit(
            &record, .deniedConfirmed,
            error: AttemptError(code: BrokerErrorCode.accessDenied.rawValue, message: "the user declined the sign-in")
        ) { $0.followUp = .acknowledge }
        scheduleFollowUp(record.id)
        throw BrokerError(.accessDenied, "the user declined the sign-in in the browser", attemptId: record.id)
    }

    func notWaiting(_ record: AttemptRecord) -> BrokerError {
        if record.state == .expired {
            return BrokerError(.attemptExpired, "the sign-in attempt has expired; start again", attemptId: record.id)
        }
        return BrokerError(
            .attemptNotWaiting, "the attempt is \(record.state.rawValue), not waiting for a callback",
            attemptId: record.id)
    }

    private func finishCode(_ record: inout AttemptRecord, callback: Callback, code: String) async throws -> AttemptView {
        let digest = Crypto.digest(code)
        if record.state == .completed || record.state == .acknowledged,
            record.resolution == .none || record.resolution == .adopted,
            let known = record.callbackDigest, Crypto.constantTimeEquals(known, digest)
        {
            // A repeat of the callback that completed the attempt: answer, send nothing. (One whose
            // exchange went uncertain and was reconciled without its session did not complete it.)
            var result = AttemptView(record)
            if record.state == .completed { result.session = try sessions.view(record.client) }
            return result
        }
        if record.state == .exchanging {
            return try await keepUntilSettled(&record, callback: callback, code: code)
        }
        try expireIfDue(&record)
        guard record.state == .waiting else { throw notWaiting(record) }
        return try await exchange(&record, code: code, digest: digest)
    }

    /// A callback that arrives while its attempt is exchanging (§7): it is
    /// kept (the latest one only), and this call answers once that exchange
    /// is settled — by exchanging the kept callback itself when the exchange
    /// answered `INVALID_GRANT`, else with the attempt as it then is.
    private func keepUntilSettled(_ record: inout AttemptRecord, callback: Callback, code: String) async throws
        -> AttemptView
    {
        let token = attempts.keep(callback, for: record.id)
        let attemptId = record.id
        repeat {
            await attempts.waitForExchange(attemptId) { id in
                self.work.submit { await self.releaseExchangeWaiter(attemptId, id) }
            }
            record = try attempt(attemptId)
        } while record.state == .exchanging && attempts.isExchanging(attemptId) && !Task.isCancelled
        if attempts.takeKept(record.id, token: token) {
            if record.state == .waiting && !Task.isCancelled {
                return try await finishCode(&record, callback: callback, code: code)
            }
        }
        var result = AttemptView(record)
        if record.state == .completed { result.session = try sessions.view(record.client) }
        return result
    }

    func releaseExchangeWaiter(_ attemptId: String, _ id: UInt64) {
        attempts.releaseExchangeWaiter(attemptId, id)
    }

    /// The attempt is `exchanging` (with the callback's digest; a device
    /// sign-in has none) before the exchange is sent, and known to be in
    /// flight until the caller settles it.
    func beginExchange(_ record: inout AttemptRecord, digest: String?) throws {
        try attempts.commit(&record, .exchangeBegan) {
            if let digest { $0.callbackDigest = digest }
            $0.error = nil
        }
        attempts.exchangeStarted(record.id)
        TestFaults.hit("after-exchanging-commit")
    }

    private func exchange(_ record: inout AttemptRecord, code: String, digest: String) async throws -> AttemptView {
        try beginExchange(&record, digest: digest)
        let attemptId = record.id
        defer { attempts.exchangeSettled(attemptId) }
        let secrets: AttemptSecrets
        do {
            secrets = try await attemptSecrets(record)
        } catch {
            try attempts.commit(&record, .exchangeNotSent)
            throw error
        }
        let result: Result<ExchangeResponse, LoginServerError>
        do {
            result = .success(
                try await attemptControl(record.client).exchange(
                    attemptId: record.serverAttemptId ?? "", ExchangeRequest(code: code, codeVerifier: secrets.codeVerifier)))
        } catch {
            result = .failure(error)
        }
        record = try attempt(record.id)
        switch result {
        case .success(let answer):
            return try await exchanged(
                &record, answer.session, issuedAt: answer.receipt.issuedAt, secrets: secrets)
        case .failure(let failure):
            return try await exchangeFailed(&record, failure)
        }
    }

    /// The session an exchange issued, kept: in the attempt's vault item
    /// first, then as the client's session (§7 durability order).
    func exchanged(
        _ record: inout AttemptRecord, _ issued: IssuedSession, issuedAt: Timestamp, secrets: AttemptSecrets
    ) async throws -> AttemptView {
        // The protocol checked the receipt against the attempt and the issued session.
        let client = try client(record.client)
        var withSession = secrets
        withSession.session = issued
        var vaultProblem: VaultError?
        do {
            try await vault.storeJSON(
                withSession, label: VaultKeys.attemptLabel(appName: client.appName),
                attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
        } catch { vaultProblem = error }
        TestFaults.hit("after-session-in-vault")
        record = try attempt(record.id)

        if record.state == .cancelled {
            // Cancelled while the exchange was in flight: revoke, never adopt.
            _ = try? await server(record.client).revoke(issued)
            record.followUp = .acknowledge
            try attempts.save(&record)
            scheduleFollowUp(record.id)
            return AttemptView(record)
        }
        guard record.state == .exchanging else { return AttemptView(record) }
        func notKept() throws {
            try attempts.commit(
                &record, .exchangeUncertain,
                error: AttemptError(
                    code: BrokerErrorCode.exchangeUncertain.rawValue, message: "the session could not be kept in the keyring")
            ) { $0.nextReconcileAt = self.now() }
        }
        if let vaultProblem {
            try notKept()
            scheduleFollowUp(record.id)
            throw vaultProblem.brokerError.with(attemptId: record.id)
        }
        do {
            try await sessions.adopt(client: record.client, session: issued, attemptId: record.id)
        } catch let error as VaultError {
            try notKept()
            throw error.brokerError.with(attemptId: record.id)
        }
        try attempts.commit(&record, .exchangeSucceeded) {
            $0.receiptIssuedAt = issuedAt
            $0.receiptSessionExpiresAt = issued.expiresAt
            $0.followUp = .acknowledge
            $0.error = nil
        }
        attempts.dropKept(record.id)
        scheduleFollowUp(record.id)
        var result = AttemptView(record)
        result.session = try sessions.view(record.client)
        return result
    }

    private func exchangeFailed(_ record: inout AttemptRecord, _ failure: LoginServerError) async throws -> AttemptView {
        if record.state == .cancelled {
            // Cancelled meanwhile: whatever the answer, a session issued anyway must be revoked.
            if case .refused = failure {} else { record.followUp = .revoke }
            try attempts.save(&record)
            scheduleFollowUp(record.id)
            throw failure.brokerError(attemptId: record.id)
        }
        guard record.state == .exchanging else { throw notWaiting(record) }
        switch failure {
        case .refused(_, let code, _, _):
            let brokerError = failure.brokerError(attemptId: record.id)
            let error = AttemptError(code: brokerError.code.rawValue, message: brokerError.message, serverCode: code.rawValue)
            try attempts.commit(&record, .exchangeRefused(code), error: error) { r in
                if r.state == .uncertain { r.nextReconcileAt = self.now() }
                if r.state == .cancelled || r.state == .expired || r.state == .failed { r.followUp = .acknowledge }
            }
            if record.state == .uncertain {
                scheduleFollowUp(record.id)
                throw uncertain(record)
            }
            if record.state.isTerminal { scheduleFollowUp(record.id) }
            // Only an INVALID_GRANT lets a kept callback be tried (§7).
            if code != .invalidGrant { attempts.dropKept(record.id) }
            throw brokerError
        case .notSent:
            try attempts.commit(
                &record, .exchangeNotSent,
                error: AttemptError(
                    code: BrokerErrorCode.serverUnreachable.rawValue,
                    message: "the login server could not be reached; the callback can be delivered again"))
            throw failure.brokerError(attemptId: record.id)
        default:
            try attempts.commit(
                &record, .exchangeUncertain,
                error: AttemptError(code: BrokerErrorCode.exchangeUncertain.rawValue, message: "\(failure)")
            ) { $0.nextReconcileAt = self.now() }
            scheduleFollowUp(record.id)
            throw uncertain(record)
        }
    }

    func uncertain(_ record: AttemptRecord) -> BrokerError {
        BrokerError(
            .exchangeUncertain,
            "the exchange got no definite answer; the broker reconciles it with the server — see 'browser-login status'",
            attemptId: record.id)
    }

    func attemptSecrets(_ record: AttemptRecord) async throws -> AttemptSecrets {
        let found: AttemptSecrets?
        do {
            found = try await vault.lookupJSON(
                AttemptSecrets.self, attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
        } catch { throw error.brokerError.with(attemptId: record.id) }
        guard let found else {
            throw BrokerError(
                .vaultUnavailable, "the attempt's proofs are missing from the keyring; cancel it and sign in again",
                attemptId: record.id)
        }
        return found
    }

    // MARK: - login.cancel

    public func cancel(attemptId: String) async throws -> AttemptView {
        var record = try attempt(attemptId)
        switch record.state {
        case .cancelled:
            return AttemptView(record)
        case .waiting, .exchanging:
            try attempts.commit(
                &record, .cancel,
                error: AttemptError(code: "CANCELLED", message: "the sign-in was cancelled")
            ) { $0.followUp = .cancel }
            attempts.dropKept(record.id)
            await runFollowUp(record.id)
            return AttemptView(try attempt(attemptId))
        default:
            throw notWaiting(record)
        }
    }

    // MARK: - login.status

    public func status(attemptId: String, reconcile: Bool) async throws -> AttemptView {
        var record = try attempt(attemptId)
        try expireIfDue(&record)
        // A server that keeps no attempt (a standard provider) has nothing to ask about (docs/providers.md).
        guard reconcile, server(record.client).attemptControl != nil else { return AttemptView(record) }
        switch record.state {
        case .uncertain where record.resolution == .none:
            await reconcileNow(record.id)
            record = try attempt(attemptId)
            return AttemptView(record)
        case .waiting:
            let secrets = try await attemptSecrets(record)
            let status: StatusResponse
            do {
                status = try await attemptControl(record.client).status(
                    attemptId: record.serverAttemptId ?? "", recoveryKey: secrets.recoveryKey)
            } catch {
                var result = AttemptView(try attempt(attemptId))
                result.serverState = "unreachable"
                if case .refused(_, let code, _, _) = error { result.serverState = code == .attemptUnknown ? "unknown" : "error" }
                return result
            }
            record = try attempt(attemptId)
            if record.state == .waiting {
                try attempts.commit(&record, .serverReported(status.state)) { r in
                    if r.state == .uncertain { r.nextReconcileAt = self.now() }
                    if r.state == .cancelled || r.state == .expired { r.followUp = .acknowledge }
                }
                if record.state != .waiting { scheduleFollowUp(record.id) }
            }
            var result = AttemptView(record)
            result.serverState = status.state.rawValue
            return result
        default:
            return AttemptView(record)
        }
    }

    // MARK: - login.acknowledge

    public func acknowledge(attemptId: String) async throws -> AttemptView {
        var record = try attempt(attemptId)
        guard record.state != .acknowledged else { return AttemptView(record) }
        if record.state == .uncertain && record.resolution == .none {
            // One more try before refusing: the server may be back.
            await reconcileNow(record.id)
            record = try attempt(attemptId)
        }
        let followUp = record.followUp
        try attempts.commit(&record, .acknowledge)
        if followUp == .acknowledge || followUp == .cancel || followUp == .revoke {
            await runFollowUp(record.id)
        } else {
            try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
        }
        return AttemptView(try attempt(attemptId))
    }
}

/// Server ids are opaque and URL-safe (docs/protocol.md §4).
func isValidOpaqueId(_ id: String) -> Bool {
    (16...256).contains(id.utf8.count)
        && id.utf8.allSatisfy {
            ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F
                || $0 == 0x2E || $0 == 0x7E
        }
}
