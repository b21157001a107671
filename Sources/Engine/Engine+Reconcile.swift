import BrokerCore
import BrokerStore
import BrowserLoginProtocol

extension BrokerEngine {
    /// Runs the pending work of an attempt soon, off the caller's call (a
    /// work item; when none can be queued now, the timer tries again).
    func scheduleFollowUp(_ attemptId: String) {
        work.submit { await self.work(on: attemptId) }
    }

    /// Reconciles an uncertain attempt or runs its server follow-up, once at a time per attempt.
    func work(on attemptId: String) async {
        guard let record = try? store.attempt(id: attemptId) else { return }
        if record.state == .uncertain && record.resolution == .none {
            await reconcileNow(attemptId)
        } else if record.followUp != .none || record.state == .uncertain {
            await runFollowUp(attemptId)
        }
    }

    func backoff(_ record: inout AttemptRecord, _ problem: String) throws {
        record.reconcileTries += 1
        let seconds = min(300, 1 << min(record.reconcileTries, 9))
        record.nextReconcileAt = now().adding(milliseconds: Int64(seconds) * 1000)
        try attempts.save(&record)
        logger.notice(
            "server work postponed",
            ["attempt.id": record.id, "client": record.client, "retry.seconds": "\(seconds)", "error": problem])
    }

    // MARK: - Reconcile (§7)

    /// Settles an uncertain attempt with the server: adopt the session it
    /// issued if it is ours and alive, otherwise revoke it by proof; cancel
    /// a server attempt still pending; acknowledge what is settled.
    func reconcileNow(_ attemptId: String) async {
        await exclusively(attemptId, failure: "reconcile failed") { try await self.reconcileSteps(attemptId) }
    }

    /// Runs one attempt's server work, once at a time per attempt; a failure
    /// is logged and the timer tries again.
    private func exclusively(_ attemptId: String, failure: String, _ steps: () async throws -> Void) async {
        guard attempts.claim(attemptId) else { return }
        defer { attempts.unclaim(attemptId) }
        do { try await steps() } catch {
            logger.warning(failure, ["attempt.id": attemptId, "error": "\(error)"])
            timer.scheduled(now())
        }
    }

    private func reconcileSteps(_ attemptId: String) async throws {
        var record = try attempt(attemptId)
        guard record.state == .uncertain, record.resolution == .none else { return }
        let server = serverAttempts(record.client)
        let secrets: AttemptSecrets
        do { secrets = try await attemptSecrets(record) } catch {
            record = try attempt(attemptId)
            try backoff(&record, "keyring: \(error)")
            return
        }
        let ref = ServerAttemptRef(key: record.serverAttemptId ?? "", recoveryKey: secrets.recoveryKey)
        let status: ServerAttemptReport
        do {
            status = try await server.status(ref)
        } catch {
            record = try attempt(attemptId)
            if error.kind == .unknown {
                try settle(&record, .retired, followUp: .none)
                try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
                return
            }
            try backoff(&record, "\(error)")
            return
        }
        record = try attempt(attemptId)
        guard record.state == .uncertain, record.resolution == .none else { return }

        switch status.state {
        case .completed:
            guard let issuedAt = status.issuedAt, let tokenDigest = status.tokenDigest else {
                try backoff(&record, "status without receipt")
                return
            }
            if let session = secrets.session,
                Crypto.constantTimeEquals(Crypto.digest(session.accessToken), tokenDigest),
                status.sessionRevoked != true
            {
                switch await verify(session, server: self.server(record.client)) {
                case .alive:
                    try await adopt(&record, session: session, issuedAt: issuedAt)
                    return
                case .unreachable(let problem):
                    try backoff(&record, problem)
                    return
                case .dead:
                    break
                }
            }
            if let expires = status.sessionExpiresAt, now() >= expires {
                try settle(&record, .sessionExpired, followUp: .acknowledge, issuedAt: issuedAt, sessionExpiresAt: expires)
            } else {
                do {
                    try await server.revokeSession(ref)
                } catch {
                    record = try attempt(attemptId)
                    try backoff(&record, "revoke: \(error)")
                    return
                }
                record = try attempt(attemptId)
                try settle(
                    &record, .revoked, followUp: .acknowledge, issuedAt: issuedAt, sessionExpiresAt: status.sessionExpiresAt)
            }
        case .pending, .authorized:
            do {
                try await server.cancel(ref)
            } catch {
                record = try attempt(attemptId)
                if error.kind == .alreadyExchanged {
                    // Redeemed meanwhile: reconcile again from the top.
                    try backoff(&record, "exchanged meanwhile")
                    record.nextReconcileAt = now()
                    try attempts.save(&record)
                    return
                }
                try backoff(&record, "cancel: \(error)")
                return
            }
            record = try attempt(attemptId)
            try settle(&record, .cancelledAtServer, followUp: .acknowledge)
        case .cancelled, .expired:
            try settle(&record, .retired, followUp: .acknowledge)
        }
        try await followUpSteps(attemptId)
    }

    enum Verification {
        case alive
        case dead
        case unreachable(String)
    }

    func verify(_ session: IssuedSession, server: any SignInProtocol) async -> Verification {
        do {
            switch try await server.verify(session) {
            case .alive, .accessTokenExpired: return .alive
            case .anotherSession: return .dead
            }
        } catch {
            switch error {
            case .ended, .refused: return .dead
            case .notSent, .unanswered, .indefinite: return .unreachable("\(error)")
            }
        }
    }

    private func adopt(_ record: inout AttemptRecord, session: IssuedSession, issuedAt: Timestamp) async throws {
        record = try attempt(record.id)
        guard record.state == .uncertain else { return }
        do {
            try await sessions.adopt(client: record.client, session: session, attemptId: record.id)
        } catch let error as VaultError {
            record = try attempt(record.id)
            try backoff(&record, "keyring: \(error)")
            return
        }
        record = try attempt(record.id)
        guard record.state == .uncertain else { return }
        try attempts.commit(&record, .adopted) {
            $0.resolution = .adopted
            $0.followUp = .acknowledge
            $0.receiptIssuedAt = issuedAt
            $0.receiptSessionExpiresAt = session.expiresAt
            $0.error = nil
            $0.nextReconcileAt = nil
        }
        logger.notice(
            "uncertain attempt adopted",
            ["attempt.id": record.id, "client": record.client, Logger.messageIDKey: LogEvent.attemptReconciled])
        try await followUpSteps(record.id)
    }

    private func settle(
        _ record: inout AttemptRecord, _ resolution: Resolution, followUp: ServerFollowUp, issuedAt: Timestamp? = nil,
        sessionExpiresAt: Timestamp? = nil
    ) throws {
        record.resolution = resolution
        record.followUp = followUp
        record.nextReconcileAt = nil
        if let issuedAt {
            record.receiptIssuedAt = issuedAt
            record.receiptSessionExpiresAt = sessionExpiresAt
        }
        try attempts.save(&record)
        logger.notice(
            "uncertain attempt reconciled",
            [
                "attempt.id": record.id, "client": record.client, "resolution": resolution.rawValue,
                Logger.messageIDKey: LogEvent.attemptReconciled,
            ])
        TestFaults.hit("after-reconcile-settled")
        // Reconciled: nothing waits on anyone, so the broker retires it itself (§7).
        try attempts.commit(&record, .acknowledge)
    }

    // MARK: - Server follow-ups

    /// Carries out the server work an attempt still owes: cancel, revoke by
    /// proof, acknowledge. Deletes the attempt's vault item once the server
    /// has forgotten the attempt, unless an unreconciled or unacknowledged
    /// uncertain attempt still needs it.
    func runFollowUp(_ attemptId: String) async {
        await exclusively(attemptId, failure: "server follow-up failed") { try await self.followUpSteps(attemptId) }
    }

    private func followUpSteps(_ attemptId: String) async throws {
        var record = try attempt(attemptId)
        guard record.followUp != .none else {
            try await retireIfReconciled(&record)
            return
        }
        let server = serverAttempts(record.client)
        let keys = VaultKeys.attempt(client: record.client, attemptId: record.id)
        guard let serverId = record.serverAttemptId,
            let secrets = try? await vault.lookupJSON(AttemptSecrets.self, attributes: keys)
        else {
            record = try attempt(attemptId)
            record.followUp = .none
            try attempts.save(&record)
            return
        }
        let ref = ServerAttemptRef(key: serverId, recoveryKey: secrets.recoveryKey)
        var step = record.followUp
        if record.reconcileTries > 0 {
            // An earlier try may have reached the server: never send it again
            // blind (docs/protocol.md §4); ask `status` (safe) and act on what it says.
            do {
                step = Self.followUp(step, after: try await server.status(ref))
            } catch {
                switch error.kind {
                case .unknown, .proofRefused:
                    step = .none
                default:
                    record = try attempt(attemptId)
                    try backoff(&record, "status: \(error)")
                    return
                }
            }
        }
        while step != .none {
            do {
                switch step {
                case .cancel:
                    try await server.cancel(ref)
                    step = .acknowledge
                case .revoke:
                    try await server.revokeSession(ref)
                    step = .acknowledge
                case .acknowledge:
                    try await server.acknowledge(ref)
                    step = .none
                case .none:
                    break
                }
            } catch {
                switch error.kind {
                case .alreadyExchanged where step == .cancel:
                    // A callback won the race on another path: revoke, never adopt.
                    step = .revoke
                case .stillActive where step == .acknowledge:
                    step = .cancel
                case .unknown, .proofRefused:
                    step = .none
                default:
                    record = try attempt(attemptId)
                    record.followUp = step
                    try backoff(&record, "\(step.rawValue): \(error)")
                    return
                }
            }
        }
        record = try attempt(attemptId)
        // The server has forgotten the attempt. Its proofs are useless now,
        // except for an uncertain attempt awaiting its local acknowledge.
        // They go before the follow-up is marked done, so a crash in between
        // repeats the (idempotent) removal rather than leaving them behind.
        if record.state != .uncertain {
            do { try await vault.remove(attributes: keys) } catch {
                record = try attempt(attemptId)
                record.followUp = .acknowledge
                try backoff(&record, "keyring: \(error)")
                return
            }
            TestFaults.hit("after-proofs-removed")
            record = try attempt(attemptId)
        }
        record.followUp = .none
        record.nextReconcileAt = nil
        try attempts.save(&record)
        try await retireIfReconciled(&record)
    }

    /// An uncertain attempt that is reconciled and owes the server nothing
    /// more is retired here (§7: the broker acknowledges it on its own),
    /// also when the broker stopped between those steps.
    private func retireIfReconciled(_ record: inout AttemptRecord) async throws {
        guard record.state == .uncertain, record.resolution != .none, record.followUp == .none else { return }
        try attempts.commit(&record, .acknowledge)
        try? await vault.remove(attributes: VaultKeys.attempt(client: record.client, attemptId: record.id))
    }

    /// The follow-up still owed for `intent`, given what the server reports now.
    static func followUp(_ intent: ServerFollowUp, after status: ServerAttemptReport) -> ServerFollowUp {
        switch status.state {
        case .pending, .authorized: return .cancel
        case .cancelled, .expired: return .acknowledge
        case .completed:
            if intent == .revoke || intent == .cancel { return status.sessionRevoked == true ? .acknowledge : .revoke }
            return .acknowledge
        }
    }

    /// An attempt left `exchanging` with no exchange in flight (the broker
    /// stopped, or its answer could not be committed) is uncertain, due for
    /// reconciliation now.
    func markUncertain(_ record: inout AttemptRecord, _ message: String) throws {
        if server(record.client).serverAttempts == nil {
            // The server keeps no attempt to ask about, and the code is spent (docs/providers.md).
            try attempts.commit(
                &record, .providerFailed,
                error: AttemptError(
                    code: BrokerErrorCode.exchangeUncertain.rawValue,
                    message:
                        "the exchange got no definite answer (\(message.split(separator: ";").first ?? "")); a code is never sent twice, so sign in again"
                )
            ) { $0.followUp = .acknowledge }  // which removes its proofs from the keyring
            return
        }
        try attempts.commit(
            &record, .recovered,
            error: AttemptError(code: BrokerErrorCode.exchangeUncertain.rawValue, message: message)
        ) { $0.nextReconcileAt = self.now() }
    }
}
