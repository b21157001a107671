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
        let signIn = server(client.id)
        if (flow ?? signIn.defaultFlow) == .device {
            try await signIn.deviceAvailable(client: client)
            return try await startDevice(client, signIn: signIn)
        }

        let id = "at_" + (try Crypto.randomToken(bytes: 12))
        // The scheme or a loopback listener of its own (Engine+LocalAttempts.swift), closed unless the attempt waits.
        let route = try chooseReturn(client, attemptId: id, ephemeral: ephemeral)
        var routeKept = false
        defer { if !routeKept { route.listener?.close() } }
        let authorization = try await signIn.authorize(
            client: client, redirectURI: route.url, accounts: accounts, ephemeral: ephemeral)
        let proofs = authorization.proofs
        var secrets = AttemptSecrets(
            codeVerifier: proofs.codeVerifier, recoveryKey: proofs.recoveryKey ?? "",
            authorizeUrl: nil, state: proofs.state,
            nonce: proofs.nonce, redirectURI: route.url, dpopKey: proofs.dpopKey)
        let keys = VaultKeys.attempt(client: client.id, attemptId: id)
        // The row, then the attempt is opened at the server, then its proofs
        // (with what the server answered) are kept, in one keyring write, and
        // it waits — all before the browser opens. A crash before the proofs
        // are kept leaves a `starting` row, which start-up recovery fails,
        // never a keyring item that nothing names; an attempt the server
        // opened meanwhile cannot be used by anyone (its verifier was never
        // kept) and ends there at its expiry.
        var record = AttemptRecord(
            id: id, client: client.id, state: .starting, returnURL: route.url, issuer: signIn.issuer,
            ephemeral: ephemeral, createdAt: now())
        if let known = vault.knownHealth(), !known.available {
            // A keyring known to be missing: nothing is sent, the attempt never existed for anyone.
            throw BrokerError(.vaultUnavailable, known.detail)
        }
        try attempts.insert(record)
        logger.info(
            "attempt created",
            ["attempt.id": id, "client": client.id, "return.via": route.via, "return.reason": route.reason])
        attempts.publish(record)

        var opened = OpenedAttempt(authorizeUrl: authorization.authorizeUrl, lookupKey: authorization.lookupKey)
        var problem: BrokerError?
        do throws(BrokerError) {
            if let open = authorization.open {
                let answer = try await open()
                opened.authorizeUrl = answer.authorizeUrl
                opened.lookupKey = answer.lookupKey ?? opened.lookupKey
                opened.expiresAt = answer.expiresAt
            }
        } catch { problem = error }
        if problem == nil { problem = try openedProblem(opened, client: client) }
        if let error = problem {
            // Nothing opened: the attempt ends; no proofs were kept.
            try attempts.commit(
                &record, .createFailed,
                error: AttemptError(
                    code: error.code.rawValue, message: error.message, serverCode: error.serverCode ?? error.providerError))
            throw error.with(attemptId: id)
        }
        // login.resume opens what the server answered.
        secrets.authorizeUrl = opened.authorizeUrl
        do {
            try await vault.storeJSON(secrets, label: VaultKeys.attemptLabel(appName: client.appName), attributes: keys)
        } catch {
            let failure = error.brokerError
            try attempts.commit(
                &record, .createFailed, error: AttemptError(code: failure.code.rawValue, message: failure.message))
            // Its proofs could not be kept: the server is told at once instead of at the attempt's expiry.
            if let kept = signIn.serverAttempts, let key = opened.lookupKey {
                try? await kept.cancel(ServerAttemptRef(key: key, recoveryKey: proofs.recoveryKey ?? ""))
            }
            throw failure.with(attemptId: id)
        }
        let (key, expiresAt) = (opened.lookupKey, opened.expiresAt ?? now().adding(milliseconds: signIn.attemptMilliseconds))
        try attempts.commit(&record, .created) {
            $0.serverAttemptId = key
            $0.expiresAt = expiresAt
        }
        if let listener = route.listener {
            loopbacks[id] = listener
            routeKept = true
        }
        var result = AttemptView(record)
        result.authorizeUrl = opened.authorizeUrl
        if openBrowser {
            do {
                try await launch(
                    opened.authorizeUrl, client: client, ephemeral: ephemeral, attemptId: id,
                    activationToken: activationToken, wait: flow == nil && authorization.deviceFallback)
            } catch let failure as BrokerError
                where failure.code == .browserFailed && flow == nil && authorization.deviceFallback
            {
                // No browser here: the device grant is the way through (docs/providers.md).
                logger.notice("no browser could be opened; signing in with a device code", ["client": client.id])
                try await fail(&record, BrokerError(.browserFailed, "no browser; continued as a device sign-in"))
                return try await startDevice(client, signIn: signIn)
            }
        }
        return result
    }

    /// The attempt's key must be new for the client (a server that gives one twice breaks the protocol).
    private func openedProblem(_ opened: OpenedAttempt, client: ClientConfig) throws -> BrokerError? {
        guard let key = opened.lookupKey else { return BrokerError(.serverProtocolError, "the server named no attempt") }
        if try store.attempts(serverAttemptId: key).contains(where: { $0.client == client.id }) {
            return BrokerError(.serverProtocolError, "the login server reused an attempt id it had already given")
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
        // Each registered protocol's reader is asked in turn whether the callback is its kind.
        var claimed: ClaimedCallback?
        for reader in callbackReaders where claimed == nil { claimed = try reader.claim(callback: url) }
        guard let callback = claimed else {
            throw BrokerError(.callbackInvalid, "the callback URL was refused: no sign-in protocol of this broker reads it")
        }
        let found = try store.attempts(serverAttemptId: callback.lookupKey).filter { clients[$0.client] != nil }
        if found.isEmpty {
            if !clients.values.contains(where: { isReturnTarget(callback.target, of: $0) }) {
                throw BrokerError(
                    .callbackMismatch, "the callback URL matches no configured client's return URL; nothing was changed")
            }
            throw BrokerError(
                .attemptUnknown, "the callback names no attempt of this broker (it may be old); start a new sign-in")
        }
        // Exactly the return URL the attempt registered: scheme, authority (the port included) and path.
        guard var record = found.first(where: { ReturnURL.attemptMatches($0.returnURL, callback.target) }) else {
            throw BrokerError(
                .callbackMismatch, "the callback URL is not the return URL its attempt registered; nothing was changed")
        }
        if case .code(let code) = callback.outcome, let answer = try repeated(record, code: code) { return answer }
        let client = try client(record.client)
        // While the attempt can still take a callback, its correlation value
        // (where the protocol has one) is compared with the vault's in
        // constant time. An ended attempt's proofs may be gone: it answers as it is.
        var secrets: AttemptSecrets?
        if record.state == .waiting || record.state == .exchanging {
            let proofs = try await attemptSecrets(record)
            secrets = proofs
            if let expected = proofs.state {
                guard let state = callback.state, Crypto.constantTimeEquals(expected, state) else {
                    throw BrokerError(
                        .callbackMismatch, "the callback's state is not its attempt's; nothing was changed",
                        attemptId: record.id)
                }
            }
        }
        do { try await server(client.id).check(callback, client: client) } catch { throw error.with(attemptId: record.id) }
        record = try attempt(record.id)
        switch callback.outcome {
        case .denied:
            return try await finishDenied(&record, secrets: secrets)
        case .failed(let refusal):
            try expireIfDue(&record)
            guard record.state == .waiting else { throw notWaiting(record) }
            let failure = refusal.with(attemptId: record.id)
            try await fail(&record, failure)
            throw failure
        case .code(let code):
            if record.state == .exchanging { return try await keepUntilSettled(&record, code: code) }
            try expireIfDue(&record)
            // Its proofs were read above while it was open (a waiting attempt cannot have ended meanwhile).
            guard record.state == .waiting, let secrets else { throw notWaiting(record) }
            return try await exchange(&record, code: code, secrets: secrets)
        }
    }

    /// A repeat of the callback that completed the attempt: answered, nothing
    /// sent — also once its proofs have left the keyring. (One whose exchange
    /// went uncertain and was reconciled without its session did not complete it.)
    private func repeated(_ record: AttemptRecord, code: String) throws -> AttemptView? {
        guard record.state == .completed || record.state == .acknowledged,
            record.resolution == .none || record.resolution == .adopted,
            let known = record.callbackDigest, Crypto.constantTimeEquals(known, Crypto.digest(code))
        else { return nil }
        var result = AttemptView(record)
        if record.state == .completed { result.session = try sessions.view(record.client) }
        return result
    }

    /// The user declined at the server. Where the server keeps the attempt,
    /// the denial is its own (§7: the attempt's status says `cancelled`)
    /// before anything ends here.
    private func finishDenied(_ record: inout AttemptRecord, secrets: AttemptSecrets?) async throws -> AttemptView {
        try expireIfDue(&record)
        guard record.state == .waiting, let secrets else { throw notWaiting(record) }
        let kept = server(record.client).serverAttempts
        if let kept {
            let report: ServerAttemptReport
            do {
                report = try await kept.status(
                    ServerAttemptRef(key: record.serverAttemptId ?? "", recoveryKey: secrets.recoveryKey))
            } catch {
                throw error.error.with(attemptId: record.id)
            }
            record = try attempt(record.id)
            guard report.state == .cancelled else {
                throw BrokerError(
                    .callbackInvalid,
                    "the error callback was not confirmed by the server (it says \(report.state.rawValue)); nothing was changed",
                    attemptId: record.id)
            }
            guard record.state == .waiting else { throw notWaiting(record) }
        }
        try attempts.commit(
            &record, .deniedConfirmed,
            error: AttemptError(code: BrokerErrorCode.accessDenied.rawValue, message: "the user declined the sign-in")
        ) { if kept != nil { $0.followUp = .acknowledge } }
        await ended(record)
        throw BrokerError(.accessDenied, "the user declined the sign-in in the browser", attemptId: record.id)
    }

    /// An attempt that ended: what it owes its server is done soon (a
    /// follow-up); one whose server keeps nothing is retired at once.
    func ended(_ record: AttemptRecord) async {
        if server(record.client).serverAttempts != nil { scheduleFollowUp(record.id) } else { await retire(record) }
    }

    func notWaiting(_ record: AttemptRecord) -> BrokerError {
        if record.state == .expired {
            return BrokerError(.attemptExpired, "the sign-in attempt has expired; start again", attemptId: record.id)
        }
        return BrokerError(
            .attemptNotWaiting, "the attempt is \(record.state.rawValue), not waiting for a callback",
            attemptId: record.id)
    }

    /// A callback that arrives while its attempt is exchanging (§7): it is
    /// kept (the latest one only), and this call answers once that exchange
    /// is settled — by exchanging the kept callback itself when the exchange
    /// was refused in a way that lets it be tried (Browser Login's
    /// `INVALID_GRANT`), else with the attempt as it then is.
    private func keepUntilSettled(_ record: inout AttemptRecord, code: String) async throws -> AttemptView {
        let token = attempts.keepCallback(for: record.id)
        let attemptId = record.id
        repeat {
            await attempts.waitForExchange(attemptId) { id in
                self.work.submit { await self.releaseExchangeWaiter(attemptId, id) }
            }
            record = try attempt(attemptId)
        } while record.state == .exchanging && attempts.isExchanging(attemptId) && !Task.isCancelled
        if attempts.takeKept(record.id, token: token), record.state == .waiting, !Task.isCancelled {
            let secrets = try await attemptSecrets(record)
            record = try attempt(attemptId)
            guard record.state == .waiting else { throw notWaiting(record) }
            return try await exchange(&record, code: code, secrets: secrets)
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

    /// The exchange, sent once (§7): a session is kept; a refusal does to the
    /// attempt what the protocol says; a request that provably never left lets
    /// the callback be delivered again; no definite answer is reconciled with
    /// a server that keeps the attempt, and ends the attempt where none does
    /// (a code is never sent twice).
    private func exchange(_ record: inout AttemptRecord, code: String, secrets: AttemptSecrets) async throws
        -> AttemptView
    {
        try beginExchange(&record, digest: Crypto.digest(code))
        let attemptId = record.id
        defer { attempts.exchangeSettled(attemptId) }
        let signIn = server(record.client)
        let grant: LocalGrant
        do {
            grant = try await signIn.redeem(
                code: code, key: record.serverAttemptId ?? "",
                proofs: LocalProofs(
                    codeVerifier: secrets.codeVerifier, recoveryKey: secrets.recoveryKey, state: secrets.state,
                    nonce: secrets.nonce, redirectURI: secrets.redirectURI ?? record.returnURL, dpopKey: secrets.dpopKey))
        } catch {
            record = try attempt(attemptId)
            throw try await exchangeFailed(&record, error)
        }
        TestFaults.hit("after-provider-exchange")
        let issued: IssuedSession
        do { issued = try await grant.complete() } catch {
            record = try attempt(attemptId)
            throw try await signInRefused(&record, error)
        }
        record = try attempt(attemptId)
        return try await exchanged(&record, issued, issuedAt: grant.issuedAt ?? now(), secrets: secrets)
    }

    /// The session an exchange issued, kept: in the attempt's vault item
    /// first, then as the client's session (§7 durability order).
    func exchanged(
        _ record: inout AttemptRecord, _ issued: IssuedSession, issuedAt: Timestamp, secrets: AttemptSecrets
    ) async throws -> AttemptView {
        // The protocol checked the answer against the attempt and the issued session.
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
        closeListener(record.id)
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

    /// An exchange without its session: the error the caller gets, after the
    /// attempt is changed as the failure says.
    private func exchangeFailed(_ record: inout AttemptRecord, _ failure: LocalRedeemFailure) async throws
        -> BrokerError
    {
        let kept = server(record.client).serverAttempts != nil
        switch failure {
        case .notSent(let refusal):
            let error = refusal.with(attemptId: record.id)
            guard record.state == .exchanging else { return error }
            try attempts.commit(
                &record, .exchangeNotSent,
                error: AttemptError(
                    code: refusal.code.rawValue,
                    message: "\(refusal.message.split(separator: ";").first ?? ""); the callback can be delivered again"))
            return error
        case .refused(let refusal, let then):
            let error = refusal.with(attemptId: record.id)
            if record.state == .cancelled {
                // Cancelled meanwhile: nothing was issued; the cancel's follow-up goes on.
                if kept { scheduleFollowUp(record.id) }
                return error
            }
            guard record.state == .exchanging else { return notWaiting(record) }
            try attempts.commit(
                &record, .exchangeRefused(then),
                error: AttemptError(
                    code: refusal.code.rawValue, message: refusal.message,
                    serverCode: refusal.serverCode ?? refusal.providerError)
            ) { r in
                if r.state == .uncertain { r.nextReconcileAt = self.now() }
                if kept && (r.state == .cancelled || r.state == .expired || r.state == .failed) { r.followUp = .acknowledge }
            }
            if record.state == .uncertain {
                scheduleFollowUp(record.id)
                return uncertain(record)
            }
            if record.state.isTerminal { await ended(record) }
            if then != .waits(triesKept: true) { attempts.dropKept(record.id) }
            return error
        case .uncertain(let detail, let refusal):
            if record.state == .cancelled {
                // Cancelled meanwhile: a session issued anyway must be revoked.
                guard kept else { return refusal.with(attemptId: record.id) }
                record.followUp = .revoke
                try attempts.save(&record)
                scheduleFollowUp(record.id)
                return refusal.with(attemptId: record.id)
            }
            guard record.state == .exchanging else { return refusal.with(attemptId: record.id) }
            guard kept else {
                // Nothing to ask about: the code is spent either way (docs/providers.md).
                let error = BrokerError(
                    .exchangeUncertain,
                    "the exchange got no definite answer (\(detail)); a code is never sent twice, so sign in again",
                    attemptId: record.id)
                try await fail(&record, error)
                return error
            }
            try attempts.commit(
                &record, .exchangeUncertain,
                error: AttemptError(code: BrokerErrorCode.exchangeUncertain.rawValue, message: detail)
            ) { $0.nextReconcileAt = self.now() }
            scheduleFollowUp(record.id)
            return uncertain(record)
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
        // A server that keeps no attempt has nothing to ask about (docs/providers.md).
        guard reconcile, let kept = server(record.client).serverAttempts else { return AttemptView(record) }
        switch record.state {
        case .uncertain where record.resolution == .none:
            await reconcileNow(record.id)
            record = try attempt(attemptId)
            return AttemptView(record)
        case .waiting:
            let secrets = try await attemptSecrets(record)
            let status: ServerAttemptReport
            do {
                status = try await kept.status(
                    ServerAttemptRef(key: record.serverAttemptId ?? "", recoveryKey: secrets.recoveryKey))
            } catch {
                var result = AttemptView(try attempt(attemptId))
                switch error.kind {
                case .unknown: result.serverState = "unknown"
                case .unanswered: result.serverState = "unreachable"
                default: result.serverState = "error"
                }
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
