import BrokerCore
import BrokerLoopback
import BrokerStore
import BrowserLoginProtocol

/// How the browser comes back to the broker, whatever the protocol: the
/// return URL an attempt registers (a private-use scheme, or a loopback
/// redirect on a listener of the attempt's own), the listeners' lifecycle
/// across restarts, how an attempt that ends is retired, and the device
/// authorization grant (RFC 8628) of a protocol that offers one.
extension BrokerEngine {
    // MARK: - The return URL

    /// The return URL a new attempt registers, and the listener that receives
    /// it when it is a loopback redirect.
    struct ReturnRoute {
        /// The URL sent at create and kept by the attempt (a loopback one with its port).
        var url: String
        var listener: LoopbackListener?
        /// `scheme` or `loopback` (the attempt view's `returnVia`).
        var via: String
        /// Why: `only-scheme`, `only-loopback`, `scheme-handler-ok`, or the HandbackProblem.
        var reason: String
    }

    /// Picks an attempt's return URL (docs/desktop.md, "When the
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

    /// After a restart (docs/providers.md, docs/desktop.md): a waiting
    /// attempt that returns over loopback listens on its port again, and a
    /// waiting device sign-in polls again. When another program took the
    /// port, an attempt the server keeps waits (its callback can still be
    /// finished by hand, `browser-login finish URL`, and the server ends it
    /// at its expiry); one whose server keeps nothing ends `failed` now.
    func resumeLocalAttempts() async {
        guard let waiting = try? store.list(states: [.waiting]) else { return }
        for var record in waiting {
            guard let client = clients[record.client], loopbacks[record.id] == nil else { continue }
            if let loopback = client.loopback, let parts = URLParts(splitting: record.returnURL), parts.scheme == "http",
                let port = parts.portText.flatMap({ UInt16($0) })
            {
                do {
                    loopbacks[record.id] = try openListener(loopback, port: port, attemptId: record.id, client: client)
                } catch {
                    if server(client.id).serverAttempts != nil {
                        logger.warning(
                            "after a restart the sign-in's loopback port is taken; its callback can still be finished by hand",
                            ["attempt.id": record.id, "port": "\(port)"])
                    } else {
                        try? await fail(
                            &record,
                            BrokerError(
                                .busy,
                                "after a restart the sign-in's redirect port \(port) was taken by another program; sign in again"
                            ))
                    }
                }
            } else if record.returnURL.isEmpty, !devicePolls.contains(record.id),
                let secrets = try? await attemptSecrets(record), secrets.deviceCode != nil
            {
                startDevicePolling(record.id, interval: secrets.device?.interval ?? 5)
            }
        }
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

    /// Ends a waiting or exchanging attempt `failed` with `error`, and retires it.
    func fail(_ record: inout AttemptRecord, _ error: BrokerError) async throws {
        if record.state == .waiting || record.state == .exchanging {
            try attempts.commit(
                &record, .providerFailed,
                error: AttemptError(code: error.code.rawValue, message: error.message, serverCode: error.providerError))
        }
        await retire(record)
    }

    /// An ended attempt whose server keeps nothing owes it nothing: its
    /// listener closes and its proofs leave the keyring at once.
    func retire(_ record: AttemptRecord) async {
        closeListener(record.id)
        try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
    }

    // MARK: - The device authorization grant

    func startDevice(_ client: ClientConfig, signIn: any SignInProtocol) async throws -> AttemptView {
        // Refused before any attempt exists when the server offers no device sign-in.
        try await signIn.deviceAvailable(client: client)
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
            guard var record = try? attempt(attemptId), record.state == .waiting else { return }
            let signIn = server(record.client)
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
