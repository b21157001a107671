import BrokerCore
import BrokerStore
import BrowserLoginProtocol
import Foundation

extension BrokerEngine {
    // MARK: - session.get

    public func session(client clientId: String) throws -> SessionView {
        _ = try client(clientId)
        return try sessionView(clientId)
    }

    // MARK: - session.wait

    /// Answers once the client is signed in (also for a sign-in that starts
    /// after the call), or nil after `timeoutMilliseconds` — or at once when
    /// the calling task is cancelled (its connection closed): the waiter and
    /// its timeout are removed then, nothing of the wait is left behind.
    public func waitForSession(client clientId: String, timeoutMilliseconds: Int) async throws -> SessionView? {
        _ = try client(clientId)
        let current = try sessionView(clientId)
        if current.status == .signedIn { return current }
        if Task.isCancelled { return nil }
        waiterCounter += 1
        let id = waiterCounter
        // The timeout: one sleeping task, ended as soon as the wait ends in any way.
        let timer = Task {
            try await Task.sleep(nanoseconds: UInt64(timeoutMilliseconds) * 1_000_000)
            self.timeOutWaiter(client: clientId, id: id)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            // Runs on this actor up to the suspension: the waiter is registered
            // before anything else (the cancellation's removal included) can run here.
            await withCheckedContinuation { continuation in
                waiters[clientId, default: [:]][id] = continuation
            }
        } onCancel: {
            timer.cancel()
            Task { await self.timeOutWaiter(client: clientId, id: id) }
        }
    }

    private func timeOutWaiter(client: String, id: UInt64) {
        if let continuation = waiters[client]?.removeValue(forKey: id) {
            continuation.resume(returning: nil)
        }
    }

    /// Resumes every waiter (at shutdown).
    public func releaseWaiters() {
        for (_, list) in waiters { for continuation in list.values { continuation.resume(returning: nil) } }
        waiters.removeAll()
    }

    // MARK: - session.signOut

    /// Signs out locally at once, then revokes at the server; when the
    /// server cannot be reached, the revoke is owed and retried later.
    public func signOut(client clientId: String) async throws -> SessionView {
        let client = try client(clientId)
        guard var record = try store.session(client: clientId), record.status != .signedOut else {
            return try sessionView(clientId)
        }
        let keys = VaultKeys.session(client: clientId)
        let secrets: SessionSecrets?
        do { secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys) } catch {
            throw error.brokerError
        }
        // Signed out locally first, with the revoke owed; then the tokens move
        // to the owed-revoke item. A crash in between leaves them in the
        // session item, where the owed revoke finds them.
        record = try store.session(client: clientId) ?? record
        record.status = .signedOut
        record.reason = nil
        record.revokePending = record.revokePending || secrets != nil
        record.updatedAt = now()
        try store.save(record)
        sessionCache[clientId] = nil
        nextRefresh[clientId] = nil
        nextVerify[clientId] = nil
        logger.info("signed out", ["client": clientId])
        publishSessionIfChanged(clientId)
        if let secrets {
            do {
                try await vault.storeJSON(
                    secrets, label: VaultKeys.revokeLabel(appName: client.appName),
                    attributes: VaultKeys.pendingRevoke(client: clientId))
                faultPoint("after-revoke-item")
                try? await vault.remove(attributes: keys)
            } catch {
                logger.notice("the owed revoke keeps the session item", ["client": clientId, "error": "\(error)"])
            }
        }
        if record.revokePending { await revokePending(clientId) }
        return try sessionView(clientId)
    }

    /// Revokes a signed-out session at the server (RFC 7009), at most once
    /// in flight per client (docs/protocol.md §4). The revoke stays owed only when
    /// it provably never reached the server (`notSent`); one that may have
    /// reached it (no answer, a 5xx, a broken answer) is never sent again.
    func revokePending(_ clientId: String) async {
        guard !revokesInFlight.contains(clientId),
            let record = try? store.session(client: clientId), record.revokePending
        else { return }
        revokesInFlight.insert(clientId)
        defer { revokesInFlight.remove(clientId) }
        let keys = VaultKeys.pendingRevoke(client: clientId)
        // The tokens are in the owed-revoke item, or still in the session
        // item when the broker stopped before moving them.
        let signedOut = record.status != .signedIn
        var secrets: SessionSecrets?
        do {
            secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: keys)
            if secrets == nil && signedOut {
                secrets = try await vault.lookupJSON(SessionSecrets.self, attributes: VaultKeys.session(client: clientId))
            }
        } catch {
            // Cannot read the keyring now: the revoke stays owed.
            logger.notice("sign-out revoke postponed: keyring", ["client": clientId, "error": "\(error)"])
            return
        }
        if let secrets {
            do {
                faultPoint("before-signout-revoke")
                _ = try await server(clientId).revokeByToken(accessToken: secrets.session.accessToken)
                faultPoint("after-signout-revoke")
                logger.info("signed-out session revoked at the server", ["client": clientId])
            } catch {
                switch error {
                case .notSent:
                    logger.notice(
                        "sign-out revoke owed: the server could not be reached", ["client": clientId, "error": "\(error)"])
                    return
                case .refused:
                    logger.info("signed-out session revoked at the server", ["client": clientId])
                default:
                    logger.warning(
                        "sign-out revoke may not have reached the server; it is not sent again (PROTOCOL.md §4)",
                        ["client": clientId, "error": "\(error)"])
                }
            }
        }
        try? await vault.remove(attributes: keys)
        if signedOut { try? await vault.remove(attributes: VaultKeys.session(client: clientId)) }
        if var record = try? store.session(client: clientId), record.revokePending {
            record.revokePending = false
            record.updatedAt = now()
            try? store.save(record)
        }
    }

    func retryPendingRevokes() async {
        guard let sessions = try? store.sessions() else { return }
        for session in sessions where session.revokePending {
            await revokePending(session.client)
        }
    }
}
