import BrokerCore
import BrokerLoopback
import BrokerStore
import BrowserLoginProtocol

/// Sign-in with a protocol whose server keeps no attempt (a standard OAuth
/// 2.0 / OpenID Connect provider, docs/providers.md): through the system
/// browser over a loopback redirect or a private-use scheme, or as a device
/// sign-in. The protocol's steps are its `LocalAttemptSignIn`; the attempt
/// lives in the same ledger, vault and states as any other; what differs is
/// that the server keeps no attempt the broker can ask about, so an exchange
/// without a definite answer ends the attempt `failed` and is never re-sent.
extension BrokerEngine {
    // MARK: - login.start

    func startLocal(
        _ client: ClientConfig, signIn: any LocalAttemptSignIn, ephemeral: Bool, openBrowser: Bool, flow: SignInFlow?,
        activationToken: String? = nil, accounts: AccountRequest = .none
    ) async throws -> AttemptView {
        if (flow ?? signIn.defaultFlow) == .device {
            return try await startDevice(client, signIn: signIn)
        }
        let id = "at_" + (try Crypto.randomToken(bytes: 12))

        var listener: LoopbackListener?
        let redirectURI: String
        if let loopback = client.loopback {
            let opened = try openListener(loopback, port: loopback.port ?? 0, attemptId: id, client: client)
            listener = opened
            redirectURI = loopback.redirectURI(port: opened.port)
        } else if let returnURL = client.returnURL {
            redirectURI = returnURL.text
        } else {
            throw BrokerError(.clientUnknown, "the client has no ReturnUrl=; fix its client file")
        }
        let authorization: LocalAuthorization
        do { authorization = try await signIn.authorize(redirectURI: redirectURI, accounts: accounts) } catch {
            listener?.close()
            throw error
        }
        var authorizeUrl = authorization.authorizeUrl
        let proofs = authorization.proofs

        // The row, then the proofs, then the attempt is waiting — all before the browser opens.
        var record = AttemptRecord(
            id: id, client: client.id, state: .starting, returnURL: redirectURI, issuer: signIn.issuer,
            ephemeral: ephemeral, createdAt: now())
        try attempts.insert(record)
        var secrets = AttemptSecrets(
            codeVerifier: proofs.codeVerifier, recoveryKey: "", authorizeUrl: authorizeUrl, state: proofs.state,
            nonce: proofs.nonce, redirectURI: redirectURI, dpopKey: proofs.dpopKey)
        do {
            try await vault.storeJSON(
                secrets, label: VaultKeys.attemptLabel(appName: client.appName),
                attributes: VaultKeys.attempt(client: client.id, attemptId: id))
        } catch {
            listener?.close()
            try attempts.discard(record)
            throw error.brokerError
        }
        try attempts.commit(&record, .created) {
            $0.serverAttemptId = authorization.lookupKey
            $0.expiresAt = self.now().adding(milliseconds: signIn.attemptMilliseconds)
        }
        if let listener { loopbacks[id] = listener }
        logger.info("attempt created", ["attempt.id": id, "client": client.id])
        if let push = authorization.push {
            // RFC 9126: pushed once the attempt and its proofs are committed; a failed push opens nothing.
            do { authorizeUrl = try await push() } catch {
                var failure = error
                failure.attemptId = id
                try await fail(&record, failure)
                throw failure
            }
            // login.resume opens the pushed request, not the parameters it replaced.
            secrets.authorizeUrl = authorizeUrl
            try? await vault.storeJSON(
                secrets, label: VaultKeys.attemptLabel(appName: client.appName),
                attributes: VaultKeys.attempt(client: client.id, attemptId: id))
        }
        var result = AttemptView(record)
        result.authorizeUrl = authorizeUrl
        if openBrowser {
            do {
                try await launch(
                    authorizeUrl, client: client, ephemeral: ephemeral, attemptId: id,
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

    // MARK: - Browser Login's return URL

    /// The return URL a new Browser Login attempt registers at create, and the
    /// listener that receives it when it is a loopback redirect.
    struct ReturnRoute {
        /// The URL sent at create and kept by the attempt (a loopback one with its port).
        var url: String
        var listener: LoopbackListener?
        /// `scheme` or `loopback` (the attempt view's `returnVia`).
        var via: String
        /// Why: `only-scheme`, `only-loopback`, `scheme-handler-ok`, or the HandbackProblem.
        var reason: String
    }

    /// Picks a Browser Login attempt's return URL (docs/desktop.md, "When the
    /// browser does not come back"): the client's only one; or, when it lists
    /// a custom scheme and a loopback redirect, the scheme unless the
    /// launcher finds a reason the callback would not come back through it —
    /// the scheme's handler is not the broker's, xdg-open mangles the
    /// scheme, the default browser is a Flatpak or a Snap — and then the
    /// loopback redirect, on a listener of the attempt's own.
    func chooseReturn(_ client: ClientConfig, attemptId: String, ephemeral: Bool) throws -> ReturnRoute {
        guard let loopback = client.loopback else {
            return ReturnRoute(url: client.redirectText, listener: nil, via: "scheme", reason: "only-scheme")
        }
        var reason = "only-loopback"
        if let scheme = client.returnURL {
            let command = ephemeral ? client.privateBrowserCommand : client.browserCommand
            guard let problem = launcher.handbackProblem(scheme: scheme.scheme, command: command) else {
                return ReturnRoute(url: scheme.text, listener: nil, via: "scheme", reason: "scheme-handler-ok")
            }
            reason = problem.rawValue
        }
        let listener = try openListener(loopback, port: loopback.port ?? 0, attemptId: attemptId, client: client)
        return ReturnRoute(
            url: loopback.redirectURI(port: listener.port), listener: listener, via: "loopback", reason: reason)
    }

    /// Whether `target` is one of `client`'s return URLs (a loopback one on any port).
    func isReturnTarget(_ target: URLParts, of client: ClientConfig) -> Bool {
        if client.returnURL?.matches(target) == true { return true }
        guard let loopback = client.loopback, let registered = try? ReturnURL("http://\(loopback.host.urlHost)\(loopback.path)")
        else { return false }
        return registered.matches(target)
    }

    // MARK: - The loopback listener

    func openListener(_ loopback: LoopbackRedirect, port: UInt16, attemptId: String, client: ClientConfig) throws
        -> LoopbackListener
    {
        let host: LoopbackHost = loopback.host == .ipv4 ? .ipv4 : .ipv6
        do {
            return try LoopbackListener.open(host: host, port: port, path: loopback.path, work: listenerWork) {
                [weak self] url in
                guard let self else { return LoopbackPage(status: 503, title: "Sign-in failed", message: "The broker stopped.") }
                return await self.loopbackCallback(url, appName: client.appName, attemptId: attemptId)
            }
        } catch {
            switch error {
            case .portInUse(let port):
                throw BrokerError(
                    .busy,
                    "port \(port) of \(loopback.host.rawValue) is in use by another program, so the sign-in's redirect cannot be received; close that program, or remove the fixed port from ReturnUrl= if the provider allows any port",
                    attemptId: attemptId)
            case .failed(let reason):
                throw BrokerError(
                    .busy, "the loopback redirect could not be opened (\(reason)); try again", attemptId: attemptId)
            }
        }
    }

    /// A request on a listener's exact path: a callback like any other, and
    /// the page says how it ended, in words (never a code or a URL). The
    /// listener closes once its attempt has ended.
    func loopbackCallback(_ url: String, appName: String, attemptId: String) async -> LoopbackPage {
        defer {
            let state = try? store.attempt(id: attemptId)?.state
            if state != .waiting && state != .exchanging { closeListener(attemptId) }
        }
        do {
            let view = try await finish(url: url)
            if view.state == .completed {
                return LoopbackPage(
                    status: 200, title: "Signed in", message: "You are signed in to \(appName). You can close this tab.")
            }
            return LoopbackPage(
                status: 200, title: "Sign-in \(view.state.rawValue)",
                message: "The sign-in to \(appName) is \(view.state.rawValue). You can close this tab.")
        } catch let error as BrokerError {
            if error.code == .accessDenied {
                return LoopbackPage(
                    status: 200, title: "Sign-in declined",
                    message: "You declined to sign in to \(appName). You can close this tab.")
            }
            return LoopbackPage(
                status: 400, title: "Sign-in failed", message: "The sign-in to \(appName) failed: \(error.message)")
        } catch {
            return LoopbackPage(status: 500, title: "Sign-in failed", message: "The sign-in to \(appName) failed.")
        }
    }

    /// Closes the attempt's listener: at once from inside its own delivery (it stops after the page); from
    /// anywhere else, stopping waits for its pages and its polling thread, so it runs as a work item (inline
    /// only when the work service refuses it).
    func closeListener(_ attemptId: String) {
        guard let listener = loopbacks.removeValue(forKey: attemptId) else { return }
        if listener.closesAtOnce || !work.submit({ listener.close() }) { listener.close() }
    }

    /// Closes the listeners and stops the polls of attempts that ended.
    func sweepLocalAttempts() {
        for id in Array(loopbacks.keys) {
            let state = try? store.attempt(id: id)?.state
            if state != .waiting && state != .exchanging { closeListener(id) }
        }
    }

    /// After a restart (docs/providers.md): a waiting loopback attempt
    /// listens on its port again (ended `failed` when the port is taken),
    /// and a waiting device sign-in polls again. A Browser Login attempt that
    /// returns over loopback listens again too (when its port is taken, its
    /// callback can still be pasted: `browser-login finish URL`).
    func resumeLocalAttempts() async {
        guard let waiting = try? store.list(states: [.waiting]) else { return }
        for var record in waiting {
            guard let client = clients[record.client], loopbacks[record.id] == nil else { continue }
            if server(client.id).localAttempts == nil {
                if let loopback = client.loopback, let parts = URLParts(splitting: record.returnURL),
                    parts.scheme == "http", let port = parts.portText.flatMap({ UInt16($0) })
                {
                    do {
                        loopbacks[record.id] = try openListener(
                            loopback, port: port, attemptId: record.id, client: client)
                    } catch {
                        logger.warning(
                            "after a restart the sign-in's loopback port is taken; its callback can still be finished by hand",
                            ["attempt.id": record.id, "port": "\(port)"])
                    }
                }
                continue
            }
            guard !devicePolls.contains(record.id) else { continue }
            if let loopback = client.loopback, let parts = URLParts(splitting: record.returnURL),
                let portText = parts.portText, let port = UInt16(portText)
            {
                do {
                    loopbacks[record.id] = try openListener(loopback, port: port, attemptId: record.id, client: client)
                } catch {
                    try? await fail(
                        &record,
                        BrokerError(
                            .busy,
                            "after a restart the sign-in's redirect port \(port) was taken by another program; sign in again"
                        ))
                }
            } else if let secrets = try? await attemptSecrets(record), secrets.deviceCode != nil {
                startDevicePolling(record.id, interval: secrets.device?.interval ?? 5)
            }
        }
    }

    // MARK: - The callback

    /// A callback a protocol without server attempts claimed.
    func finishLocal(_ callback: ClaimedCallback) async throws -> AttemptView {
        let candidates = try store.attempts(serverAttemptId: callback.lookupKey).filter {
            clients[$0.client].map { server($0.id).localAttempts != nil } ?? false
        }
        guard var record = candidates.first else {
            let knownTarget = clients.values.contains { client in
                if let loopback = client.loopback {
                    return callback.target.scheme == "http" && callback.target.path == loopback.path
                        && callback.target.host.map { $0 == loopback.host.rawValue || $0 == loopback.host.urlHost }
                            ?? false
                }
                return server(client.id).localAttempts != nil && (client.returnURL?.matches(callback.target) ?? false)
            }
            if !knownTarget {
                throw BrokerError(
                    .callbackMismatch, "the callback URL matches no configured client's redirect; nothing was changed")
            }
            throw BrokerError(
                .attemptUnknown, "the callback's state names no attempt of this broker (it may be old); start a new sign-in")
        }
        // Exactly the redirect URI the attempt sent: scheme, authority (the port included) and path.
        guard let sent = URLParts(splitting: record.returnURL), sent.scheme == callback.target.scheme,
            sent.authority == callback.target.authority, sent.path == callback.target.path
        else {
            throw BrokerError(
                .callbackMismatch, "the callback URL is not the redirect its attempt sent; nothing was changed",
                attemptId: record.id)
        }
        if case .code(let code) = callback.outcome, record.state == .completed || record.state == .acknowledged,
            let known = record.callbackDigest, Crypto.constantTimeEquals(known, Crypto.digest(code))
        {
            // The callback that completed the attempt, again: answer, send
            // nothing — also once its proofs have left the keyring.
            var result = AttemptView(record)
            if record.state == .completed { result.session = try sessions.view(record.client) }
            return result
        }
        let client = try client(record.client)
        guard let signIn = server(client.id).localAttempts else { throw BrokerError.clientUnknown(client.id) }
        // The lookup by digest found the attempt; while it can still take a
        // callback, its state is also compared with the vault's in constant time.
        // (An ended attempt's proofs may be gone: it answers as it is, below.)
        var secrets: AttemptSecrets?
        if record.state == .waiting || record.state == .exchanging {
            let proofs = try await attemptSecrets(record)
            secrets = proofs
            guard let state = proofs.state, Crypto.constantTimeEquals(state, callback.state) else {
                throw BrokerError(
                    .callbackMismatch, "the callback's state is not its attempt's; nothing was changed",
                    attemptId: record.id)
            }
        }
        do { try await signIn.check(callback) } catch { throw error.with(attemptId: record.id) }
        record = try attempt(record.id)
        switch callback.outcome {
        case .denied:
            try expireIfDue(&record)
            guard record.state == .waiting else { throw notWaiting(record) }
            try attempts.commit(
                &record, .deniedConfirmed,
                error: AttemptError(code: BrokerErrorCode.accessDenied.rawValue, message: "the user declined the sign-in"))
            await retire(record)
            throw BrokerError(.accessDenied, "the user declined the sign-in in the browser", attemptId: record.id)
        case .failed(let refusal):
            try expireIfDue(&record)
            guard record.state == .waiting else { throw notWaiting(record) }
            let failure = refusal.with(attemptId: record.id)
            try await fail(&record, failure)
            throw failure
        case .code(let code):
            let digest = Crypto.digest(code)
            if record.state == .completed || record.state == .acknowledged,
                let known = record.callbackDigest, Crypto.constantTimeEquals(known, digest)
            {
                // The callback that completed the attempt, again: answer, send nothing.
                var result = AttemptView(record)
                if record.state == .completed { result.session = try sessions.view(record.client) }
                return result
            }
            if record.state == .exchanging {
                // Answer once the exchange in flight is settled, with the attempt as it then is.
                let attemptId = record.id
                while record.state == .exchanging && attempts.isExchanging(attemptId) && !Task.isCancelled {
                    await attempts.waitForExchange(attemptId) { id in
                        self.work.submit { await self.releaseExchangeWaiter(attemptId, id) }
                    }
                    record = try attempt(attemptId)
                }
                var result = AttemptView(record)
                if record.state == .completed { result.session = try sessions.view(record.client) }
                return result
            }
            try expireIfDue(&record)
            // Its proofs were read above while it was open (a waiting attempt cannot have ended meanwhile).
            guard record.state == .waiting, let secrets else { throw notWaiting(record) }
            return try await exchangeLocal(&record, code: code, digest: digest, secrets: secrets, signIn: signIn)
        }
    }

    /// The exchange, sent once (docs/providers.md): a definite refusal or no
    /// definite answer ends the attempt `failed` (the code is spent either
    /// way); only a request that provably never left lets the callback be
    /// delivered again.
    private func exchangeLocal(
        _ record: inout AttemptRecord, code: String, digest: String, secrets: AttemptSecrets,
        signIn: any LocalAttemptSignIn
    ) async throws -> AttemptView {
        try beginExchange(&record, digest: digest)
        let attemptId = record.id
        defer { attempts.exchangeSettled(attemptId) }
        let grant: LocalGrant
        do {
            grant = try await signIn.redeem(
                code: code,
                proofs: LocalProofs(
                    codeVerifier: secrets.codeVerifier, state: secrets.state ?? "", nonce: secrets.nonce,
                    redirectURI: secrets.redirectURI ?? record.returnURL, dpopKey: secrets.dpopKey))
        } catch {
            record = try attempt(attemptId)
            throw try await localExchangeFailed(&record, error)
        }
        TestFaults.hit("after-provider-exchange")
        let issued: IssuedSession
        do { issued = try await grant.complete() } catch {
            record = try attempt(attemptId)
            throw try await signInRefused(&record, error)
        }
        record = try attempt(attemptId)
        closeListener(attemptId)
        return try await exchanged(&record, issued, issuedAt: now(), secrets: secrets)
    }

    /// Granted tokens (of an exchange or a device poll) that sign no one in:
    /// the protocol revoked them; the attempt ends `failed`.
    func signInRefused(_ record: inout AttemptRecord, _ failure: BrokerError) async throws -> BrokerError {
        let error = failure.with(attemptId: record.id)
        logger.warning(
            "sign-in refused: \(error.code.rawValue)", ["attempt.id": record.id, "client": record.client])
        try await fail(&record, error)
        return error
    }

    private func localExchangeFailed(_ record: inout AttemptRecord, _ failure: LocalRedeemFailure) async throws
        -> BrokerError
    {
        let error: BrokerError
        switch failure {
        case .notSent(let refusal), .refused(let refusal): error = refusal.with(attemptId: record.id)
        case .uncertain(let detail, let refusal):
            // Cancelled meanwhile: whatever happened, nothing is kept.
            guard record.state == .exchanging else { return refusal.with(attemptId: record.id) }
            error = BrokerError(
                .exchangeUncertain,
                "the provider gave no definite answer to the exchange (\(detail)); a code is never sent twice, so sign in again",
                attemptId: record.id)
        }
        guard record.state == .exchanging else { return error }
        if case .notSent = failure {
            try attempts.commit(
                &record, .exchangeNotSent,
                error: AttemptError(
                    code: BrokerErrorCode.providerUnreachable.rawValue,
                    message: "the provider could not be reached; the callback can be delivered again"))
            return error
        }
        try await fail(&record, error)
        return error
    }

    /// Ends a waiting or exchanging provider attempt `failed` with `error`, and retires it.
    func fail(_ record: inout AttemptRecord, _ error: BrokerError) async throws {
        if record.state == .waiting || record.state == .exchanging {
            try attempts.commit(
                &record, .providerFailed,
                error: AttemptError(code: error.code.rawValue, message: error.message, serverCode: error.providerError))
        }
        await retire(record)
    }

    /// An ended provider attempt owes its provider nothing: its listener
    /// closes and its proofs leave the keyring at once.
    func retire(_ record: AttemptRecord) async {
        closeListener(record.id)
        try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
    }

    // MARK: - The device authorization grant

    func startDevice(_ client: ClientConfig, signIn: any LocalAttemptSignIn) async throws -> AttemptView {
        // Refused before any attempt exists when the server offers no device sign-in.
        try await signIn.deviceAvailable()
        let id = "at_" + (try Crypto.randomToken(bytes: 12))
        var record = AttemptRecord(
            id: id, client: client.id, state: .starting, returnURL: "", issuer: signIn.issuer,
            ephemeral: false, createdAt: now())
        try attempts.insert(record)
        let grant: DeviceGrant
        do {
            grant = try await signIn.authorizeDevice()
        } catch {
            let brokerError = error.with(attemptId: id)
            try attempts.commit(
                &record, .createFailed,
                error: AttemptError(
                    code: brokerError.code.rawValue, message: brokerError.message, serverCode: brokerError.providerError))
            throw brokerError
        }
        let device = grant.view
        let secrets = AttemptSecrets(
            codeVerifier: "", recoveryKey: "", deviceCode: grant.deviceCode, device: device, dpopKey: grant.dpopKey)
        do {
            try await vault.storeJSON(
                secrets, label: VaultKeys.attemptLabel(appName: client.appName),
                attributes: VaultKeys.attempt(client: client.id, attemptId: id))
        } catch {
            try attempts.commit(
                &record, .createFailed,
                error: AttemptError(code: error.brokerError.code.rawValue, message: error.message))
            throw error.brokerError.with(attemptId: id)
        }
        try attempts.commit(&record, .created) {
            $0.serverAttemptId = grant.lookupKey
            $0.expiresAt = self.now().adding(milliseconds: Int64(grant.expiresInSeconds) * 1000)
        }
        logger.info("device sign-in created", ["attempt.id": id, "client": client.id])
        startDevicePolling(id, interval: device.interval)
        var result = AttemptView(record)
        result.device = device
        return result
    }

    func startDevicePolling(_ attemptId: String, interval: Int) {
        guard !devicePolls.contains(attemptId),
            work.submit({ await self.pollDevice(attemptId, interval: interval) })
        else { return }
        devicePolls.insert(attemptId)
    }

    /// RFC 8628 §3.4–3.5: polls at `interval`, 5 s more after `slow_down`;
    /// the attempt ends `denied`, `expired` or, with tokens, as an exchange does.
    private func pollDevice(_ attemptId: String, interval start: Int) async {
        defer { devicePolls.remove(attemptId) }
        var interval = start
        var failures = 0
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(interval))
            guard var record = try? attempt(attemptId), record.state == .waiting,
                let signIn = server(record.client).localAttempts
            else { return }
            if (try? expireIfDue(&record)) == true { return }
            guard let secrets = try? await attemptSecrets(record), let deviceCode = secrets.deviceCode else {
                continue  // The keyring cannot be read now: try again at the next interval.
            }
            let poll = await signIn.poll(deviceCode: deviceCode, dpopKey: secrets.dpopKey)
            switch poll {
            case .refused(let refusal):
                guard var record = try? attempt(attemptId), record.state == .waiting else { return }
                try? await fail(&record, refusal.with(attemptId: attemptId))
                return
            case .unreachable:
                // The server is unreachable or failing: poll again, more slowly.
                failures += 1
                if failures >= 3 { interval = min(interval * 2, 60) }
                continue
            default:
                failures = 0
            }
            guard var record = try? attempt(attemptId), record.state == .waiting else { return }
            switch poll {
            case .refused, .unreachable:
                continue
            case .pending:
                continue
            case .slowDown:
                interval += 5
            case .denied:
                _ = try? attempts.commit(
                    &record, .deniedConfirmed,
                    error: AttemptError(code: BrokerErrorCode.accessDenied.rawValue, message: "the user declined the sign-in"))
                await retire(record)
                return
            case .expired:
                try? expireLocally(&record)
                await retire(record)
                return
            case .granted(let grant):
                do {
                    try beginExchange(&record, digest: nil)
                    defer { attempts.exchangeSettled(attemptId) }
                    let issued: IssuedSession
                    do {
                        issued = try await grant.complete()
                    } catch {
                        record = try attempt(attemptId)
                        _ = try await signInRefused(&record, error)
                        return
                    }
                    record = try attempt(attemptId)
                    _ = try await exchanged(&record, issued, issuedAt: now(), secrets: secrets)
                } catch {
                    logger.warning(
                        "device sign-in could not be kept", ["attempt.id": attemptId, "error": "\(error)"])
                }
                return
            }
        }
    }
}
