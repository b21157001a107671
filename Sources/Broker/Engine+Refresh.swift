import BrokerCore
import BrokerStore
import BrowserLoginProtocol
import Foundation

extension BrokerEngine {
    /// The signed-in session's secrets, or `NOT_SIGNED_IN`.
    func currentSession(_ clientId: String) async throws -> SessionSecrets {
        guard let record = try store.session(client: clientId), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client is not signed in; start a sign-in with login.start")
        }
        if let cached = sessionCache[clientId] { return cached }
        let found: SessionSecrets?
        do {
            found = try await vault.lookupJSON(SessionSecrets.self, attributes: VaultKeys.session(client: clientId))
        } catch { throw error.brokerError }
        guard let found else {
            // Not in the keyring now is not "gone" (a keyring restored from a
            // backup, another keyring daemon): the session stays signed in and
            // works again once its item is back; signing out ends it.
            throw BrokerError(
                .vaultUnavailable,
                "the session's tokens are not in the keyring now; unlock or restore the login keyring, or sign out and sign in again"
            )
        }
        if try store.session(client: clientId)?.status == .signedIn { sessionCache[clientId] = found }
        return found
    }

    /// Rotates the session's tokens (§5.7). Concurrent callers share one
    /// refresh. A lost answer is repeated once (inside the grace window the
    /// server gives the same successor). The new pair is in the vault before
    /// either token is used.
    func refreshSession(_ clientId: String, current: SessionSecrets) async throws -> SessionSecrets {
        if let running = refreshing[clientId] { return try await running.value }
        let task = Task { try await self.refreshNow(clientId, current: current) }
        refreshing[clientId] = task
        defer { refreshing[clientId] = nil }
        return try await task.value
    }

    private func refreshNow(_ clientId: String, current: SessionSecrets) async throws -> SessionSecrets {
        let server = server(clientId)
        let token = current.session.refreshToken
        var answer: RefreshResponse?
        var lastFailure: LoginServerError?
        for attempt in 0..<2 {
            do {
                answer = try await server.refresh(refreshToken: token)
                break
            } catch {
                lastFailure = error
                if case .noAnswer = error, attempt == 0 { continue }
                break
            }
        }
        guard let answer else {
            let failure = lastFailure ?? .noAnswer("no answer")
            if case .refused(_, let code, _, _) = failure,
                code == .sessionRevoked || code == .sessionExpired || code == .authUserDisabled
            {
                try await endSession(clientId, status: code == .sessionExpired ? .expired : .revoked, reason: code.rawValue)
                throw BrokerError(
                    .notSignedIn, "the session ended at the server (\(code.rawValue)); sign in again",
                    serverCode: code.rawValue)
            }
            throw failure.brokerError()
        }
        var next = current
        next.session.accessToken = answer.accessToken
        next.session.accessTokenExpiresAt = answer.accessTokenExpiresAt
        next.session.refreshToken = answer.refreshToken
        next.session.expiresAt = answer.expiresAt
        let client = try client(clientId)
        do {
            try await vault.storeJSON(
                next, label: VaultKeys.sessionLabel(appName: client.appName, email: next.session.account.email),
                attributes: VaultKeys.session(client: clientId))
        } catch { throw error.brokerError }
        guard var record = try store.session(client: clientId), record.status == .signedIn else {
            throw BrokerError(.notSignedIn, "the client was signed out meanwhile")
        }
        record.accessTokenExpiresAt = answer.accessTokenExpiresAt
        record.expiresAt = answer.expiresAt
        record.updatedAt = now()
        try store.save(record)
        sessionCache[clientId] = next
        nextRefresh[clientId] = nil
        logger.info("session refreshed", ["client": clientId])
        publishSessionIfChanged(clientId)
        return next
    }

    /// Ends a session that ended elsewhere: revoked at the server, expired,
    /// or its tokens lost. Removes its vault item and notifies subscribers.
    func endSession(_ clientId: String, status: SessionStatus, reason: String?) async throws {
        guard var record = try store.session(client: clientId), record.status == .signedIn else { return }
        record.status = status
        record.reason = reason
        record.updatedAt = now()
        try store.save(record)
        sessionCache[clientId] = nil
        nextRefresh[clientId] = nil
        nextVerify[clientId] = nil
        try? await vault.remove(attributes: VaultKeys.session(client: clientId))
        logger.notice("session ended", ["client": clientId, "status": status.rawValue, "reason": reason ?? "-"])
        publishSessionIfChanged(clientId)
    }

    /// The timer's session work: expire sessions past their absolute expiry,
    /// refresh access tokens before they expire (with jitter), and verify
    /// sessions with `GET session` on a slow interval.
    func maintainSessions() async {
        guard let sessions = try? store.sessions() else { return }
        let now = now()
        for session in sessions where session.status == .signedIn {
            let client = session.client
            guard clients[client] != nil else { continue }
            if let expires = session.expiresAt, now >= expires {
                try? await endSession(client, status: .expired, reason: ServerErrorCode.sessionExpired.rawValue)
                continue
            }
            if refreshing[client] == nil, let accessExpiry = session.accessTokenExpiresAt,
                accessExpiry < (session.expiresAt ?? accessExpiry.adding(milliseconds: 1)),
                !clockAheadOfServer(session, now: now)
            {
                let due = nextRefresh[client] ?? refreshTime(now: now, accessExpiry: accessExpiry, updatedAt: session.updatedAt)
                nextRefresh[client] = due
                if now >= due {
                    nextRefresh[client] = now.adding(milliseconds: 5_000)
                    Task {
                        guard let current = try? await self.currentSession(client) else { return }
                        _ = try? await self.refreshSession(client, current: current)
                    }
                    continue
                }
            }
            let verifyDue = nextVerify[client] ?? now
            if now >= verifyDue {
                nextVerify[client] = now.adding(milliseconds: verifyIntervalMilliseconds)
                Task { await self.verifySession(client) }
            }
        }
    }

    /// True for a while after the session got an access token that had
    /// already expired by this machine's clock when it arrived: the clock is
    /// ahead of the server's, so the token's expiry says nothing here, and
    /// refreshing again at once would only get another such token (a refresh
    /// every tick). Such a session is refreshed at most once a minute; a
    /// `401 TOKEN_EXPIRED` still refreshes it at once.
    func clockAheadOfServer(_ session: SessionRecord, now: Timestamp) -> Bool {
        guard let accessExpiry = session.accessTokenExpiresAt, accessExpiry <= session.updatedAt else { return false }
        return now < session.updatedAt.adding(milliseconds: 60_000)
    }

    /// A refresh time before the access token expires: at 75–90% of its
    /// remaining life (random jitter), at least 2 s before expiry.
    func refreshTime(now: Timestamp, accessExpiry: Timestamp, updatedAt: Timestamp) -> Timestamp {
        let life = max(0, accessExpiry.millisecondsSince1970 - updatedAt.millisecondsSince1970)
        let fraction = Double.random(in: 0.75...0.9)
        let at = updatedAt.millisecondsSince1970 + Int64(Double(life) * fraction)
        return Timestamp(millisecondsSince1970: min(at, accessExpiry.millisecondsSince1970 - 2_000))
    }

    /// Checks one session with `GET session`; a session that ended at the
    /// server ends here with the server's code as the reason.
    func verifySession(_ clientId: String) async {
        guard let secrets = try? await currentSession(clientId) else { return }
        let failure: LoginServerError
        do {
            _ = try await server(clientId).session(accessToken: secrets.session.accessToken)
            if var record = try? store.session(client: clientId), record.status == .signedIn {
                record.verifiedAt = now()
                try? store.save(record)
            }
            return
        } catch {
            failure = error
        }
        do {
            guard case .refused(_, let code, _, _) = failure else { return }
            switch code {
            case .tokenExpired:
                _ = try? await refreshSession(clientId, current: secrets)
            case .sessionRevoked, .authUserDisabled, .unauthenticated:
                try? await endSession(clientId, status: .revoked, reason: code.rawValue)
            case .sessionExpired:
                try? await endSession(clientId, status: .expired, reason: code.rawValue)
            default:
                break
            }
        }
    }
}
