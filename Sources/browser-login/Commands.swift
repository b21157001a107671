import BrokerRPC
import BrowserLoginClient
import CommandLineKit
import Foundation

/// One subcommand: its declaration (options, help) and what it does.
struct Subcommand: Sendable {
    let command: Command
    /// Errors it throws (`BrowserLoginError`, `CLIError`) are reported by `main`.
    let run: @Sendable (Arguments, BrowserLoginClient) async throws -> Exit

    /// `synopsis`: the usage lines, for a command whose generated one would wrap badly.
    init(
        _ name: String, summary: String, arguments: [String] = [], options: [Option] = [], help: String,
        synopsis: String? = nil, run: @escaping @Sendable (Arguments, BrowserLoginClient) async throws -> Exit
    ) {
        command = Command(
            "browser-login " + name, summary: summary, arguments: arguments, options: options, description: help,
            synopsis: synopsis)
        self.run = run
    }

    var name: String { String(command.name.dropFirst("browser-login ".count)) }
}

let json = Option.flag("json", "print the answer as JSON")
/// `--account` of `session`, `sign-out` and `request` (docs/rpc.md "Several accounts per client").
let accountOption = Option.value(
    "account", "ACCOUNT", "this account of the client (a key that 'browser-login accounts' lists), not the current one")
let noBrowser = Option.flag("no-browser", "do not open the browser; print the link to open instead")

/// The `run` of a command that takes one positional argument, makes one call
/// with it, and prints the answer with `describe` (or as JSON).
func oneArgumentCall<View: Decodable & Sendable>(
    _ method: RPCMethod, params: @escaping @Sendable (String) -> any Encodable & Sendable,
    describe: @escaping @Sendable (View) -> String
) -> @Sendable (Arguments, BrowserLoginClient) async throws -> Exit {
    { args, broker in
        let answer = try await broker.call(method, params: try encode(params(args.positionals[0])))
        if args.has("json") { printJSON(answer) } else { print(describe(try decode(answer))) }
        return .ok
    }
}

/// Params as JSON for a raw call.
func encode(_ params: any Encodable & Sendable) throws -> JSONValue { try JSONValue(encoding: params) }

/// `--activation-token` of `start` and `resume`.
let activationTokenOption = Option.value(
    "activation-token", "TOKEN",
    "give the browser the focus with this xdg-activation token or startup id (default: $XDG_ACTIVATION_TOKEN)")

/// The focus token for a browser this command opens: `--activation-token`,
/// else a valid `$XDG_ACTIVATION_TOKEN` of this process, which is then
/// removed from the environment (a token is good for one window; nothing
/// this command starts later may reuse it). Nil when no browser opens.
func activationToken(_ args: Arguments, opening: Bool) -> String? {
    guard opening else { return nil }
    if let given = args["activation-token"] { return given }
    guard let inherited = ProcessInfo.processInfo.environment["XDG_ACTIVATION_TOKEN"] else { return nil }
    unsetenv("XDG_ACTIVATION_TOKEN")
    return LoginStartParams.isValidActivationToken(inherited) ? inherited : nil
}

/// Prints an attempt of `login.start` or `login.resume`, with its link when the browser was not opened.
func printStarted(_ answer: JSONValue, _ args: Arguments) throws -> Exit {
    if args.has("json") {
        printJSON(answer)
        return .ok
    }
    let a: AttemptView = try decode(answer)
    print(describeAttempt(a))
    if args.has("no-browser"), let url = a.authorizeUrl {
        print("open this link in your browser to sign in:\n  \(url)")
    }
    return .ok
}

// MARK: - Rendering

func age(_ from: Timestamp, now: Timestamp) -> String {
    duration(now.millisecondsSince1970 - from.millisecondsSince1970)
}

func until(_ to: Timestamp?, now: Timestamp) -> String {
    guard let to else { return "-" }
    let ms = to.millisecondsSince1970 - now.millisecondsSince1970
    return ms <= 0 ? "passed" : "in " + duration(ms)
}

func duration(_ ms: Int64) -> String {
    let s = max(0, ms / 1000)
    if s < 60 { return "\(s)s" }
    if s < 3600 { return "\(s / 60)m\(s % 60)s" }
    if s < 86400 { return "\(s / 3600)h\((s % 3600) / 60)m" }
    return "\(s / 86400)d"
}

/// What an admin should do about an attempt, or "-".
func nextStep(_ a: AttemptView) -> String {
    let id = a.attemptId
    switch a.state {
    case .waiting:
        if let device = a.device {
            return
                "open \(device.verificationUri) and enter the code \(device.userCode), or 'browser-login cancel \(id)'"
        }
        if a.serverState == "authorized" {
            return
                "signed in at the server but the callback never arrived: check the URL handler (browser-login doctor), then 'browser-login resume \(id)'"
        }
        return "finish signing in in the browser, or 'browser-login resume \(id)' / 'browser-login cancel \(id)'"
    case .starting, .exchanging:
        return "in progress; wait a moment"
    case .uncertain:
        if a.reconciled {
            return "reconciled: 'browser-login acknowledge \(id)'"
        }
        return
            "the exchange's answer was lost; the broker reconciles it when the server answers ('browser-login status' retries now)"
    case .cancelled, .expired, .denied, .failed:
        return "'browser-login acknowledge \(id)' to clear it"
    case .completed, .acknowledged:
        return "-"
    }
}

func table(_ rows: [[String]]) -> String {
    guard let first = rows.first else { return "" }
    var widths = [Int](repeating: 0, count: first.count)
    for row in rows { for (i, cell) in row.enumerated() where i < row.count - 1 { widths[i] = max(widths[i], cell.count) } }
    return rows.map { row in
        row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }.joined(separator: "\n")
}

func describeAttempt(_ a: AttemptView) -> String {
    var text = "attempt \(a.attemptId): \(a.state.rawValue) (client \(a.client))"
    if let error = a.error { text += "\n  error: \(error.code) — \(error.message)" }
    if let advice = serverCodeAdvice(a.error?.serverCode) { text += "\n  " + advice }
    return text
}

/// What people should do about a server code that no retry fixes, or nil.
func serverCodeAdvice(_ code: String?) -> String? {
    switch code {
    case "AUTH_USER_DISABLED"?:
        "this account is disabled at the login server: contact your administrator to enable it (signing in again will not work until then)"
    default: nil
    }
}

func describeSession(_ s: SessionView) -> String {
    var text = "\(s.client): \(s.status.rawValue)"
    if !s.current { text += " (not the current account)" }
    if let account = s.account { text += " as \(account.displayName) <\(account.email)>" }
    if let expires = s.expiresAt { text += ", until \(expires.rfc3339)" }
    if let reason = s.reason { text += " (reason: \(reason))" }
    if let advice = serverCodeAdvice(s.reason) { text += "\n  " + advice }
    return text
}

/// The accounts table of `accounts` and `status`: who, how, until when, which is current. No secret is in a view.
func accountRows(_ sessions: [SessionView], client: Bool) -> [[String]] {
    let now = Timestamp.now()
    var rows = [(client ? ["CLIENT"] : []) + ["ACCOUNT", "KEY", "STATUS", "UNTIL", "CURRENT"]]
    for s in sessions {
        let who = s.account.map { "\($0.displayName) <\($0.email)>" } ?? "-"
        var status = s.status.rawValue
        if let reason = s.reason { status += " (\(reason))" }
        rows.append(
            (client ? [s.client] : []) + [
                who, s.accountKey ?? "-", status, s.status == .signedIn ? until(s.expiresAt, now: now) : "-",
                s.current ? "yes" : "",
            ])
    }
    return rows
}

/// Every configured client's accounts (those held: never signed in is not listed); clients this program may not use are skipped.
func allAccounts(_ broker: BrowserLoginClient, only client: String?) async throws -> [SessionView] {
    var ids: [String] = []
    if let client {
        ids = [client]
    } else {
        let list: [ClientSummary] = try decode(try await broker.call(.clientsList, params: nil))
        ids = list.map(\.id)
    }
    var out: [SessionView] = []
    for id in ids {
        guard let answer = try? await broker.call(.sessionList, params: encode(SessionListParams(client: id))),
            let views: [SessionView] = try? decode(answer)
        else { continue }
        out += views.filter { $0.accountKey != nil }
    }
    return out
}

/// What `sign-out` says: who was signed out (`before`, the session as it
/// was), and what becomes of the revoke. The broker's answer does not say
/// whether the server confirmed it (docs/rpc.md: the sign-out is local at
/// once; the revoke is the broker's to send, and stays owed while the
/// server cannot be reached), so neither does this: it says the broker
/// sends it and where its outcome is logged. `revokedAtServer` false: the
/// provider cannot be told at all.
func describeSignOut(_ s: SessionView, before: SessionView) -> String {
    if before.status == .signedOut || before.status == .signingIn {
        return "\(s.client) was not signed in: nothing to sign out"
    }
    var text = "signed out of \(s.client)"
    if let account = s.account ?? before.account {
        let who = "\(account.displayName) <\(account.email)>"
        switch before.status {
        case .expired: text += " (\(who), whose session had expired)"
        case .revoked: text += " (\(who), whose session had been revoked)"
        default: text += " (was signed in as \(who))"
        }
    }
    if s.revokedAtServer == false {
        return text
            + "\nthe provider has no revocation endpoint: its tokens are forgotten here but were not revoked there; to end your browser session with the provider too, use the provider's own sign-out page"
    }
    return text
        + "\nthe tokens are forgotten here; the broker revokes the session at the server, and while the server cannot be reached the revoke stays owed and is retried (its log says 'sign-out revoke owed' then)"
}

// MARK: - Commands

let subcommands: [Subcommand] = [
    Subcommand(
        "status", summary: "show login attempts that need attention (or all of them)",
        options: [
            .flag("all", "every attempt, finished ones included (newest 1000)"),
            .value("client", "ID", "only this client's attempts"), .flag("json", "print the attempts as a JSON array"),
            .flag("no-reconcile", "do not contact the servers"),
        ],
        help: """
            Shows the broker's login attempts as a table: id, client, state, age,
            expiry, last error, and the next step for a stuck one. Without --all,
            only attempts that are in progress or need attention are shown.
            Waiting and uncertain attempts are checked with their server first
            (an uncertain attempt is reconciled), unless --no-reconcile.

            Then each client's accounts: who is signed in, how, until when, and
            which account is the client's current one (no token or other secret
            is ever shown). --json prints the attempts only; 'browser-login
            accounts CLIENT --json' gives a client's accounts.
            """,
        run: { args, broker in
            let states = args.has("all") ? nil : AttemptState.allCases.filter(\.needsAttention)
            var attempts =
                try await broker.call(.loginList, params: encode(LoginListParams(client: args["client"], states: states)))
                .arrayValue ?? []
            var views: [AttemptView] = try attempts.map { try decode($0) }
            if !args.has("no-reconcile") {
                for (i, a) in views.enumerated() where a.state == .waiting || a.state == .uncertain {
                    let params = try encode(LoginStatusParams(attemptId: a.attemptId, reconcile: true))
                    if let fresh = try? await broker.call(.loginStatus, params: params),
                        let view: AttemptView = try? decode(fresh)
                    {
                        (attempts[i], views[i]) = (fresh, view)
                    }
                }
            }
            if args.has("json") {
                printJSON(.array(attempts))
                return .ok
            }
            let accounts = try await allAccounts(broker, only: args["client"])
            defer {
                if !accounts.isEmpty {
                    print("\naccounts:")
                    print(table(accountRows(accounts, client: true)))
                }
            }
            if attempts.isEmpty {
                print(args.has("all") ? "no login attempts" : "no login attempts need attention (--all shows every attempt)")
                return .ok
            }
            let now = Timestamp.now()
            var rows = [["ID", "CLIENT", "STATE", "AGE", "EXPIRES", "LAST ERROR", "NEXT STEP"]]
            for a in views {
                rows.append([
                    a.attemptId, a.client, a.state.rawValue + (a.serverState.map { " (server: \($0))" } ?? ""),
                    age(a.createdAt, now: now), a.state == .waiting ? until(a.expiresAt, now: now) : "-",
                    a.error?.code ?? "-", nextStep(a),
                ])
            }
            print(table(rows))
            return .ok
        }),
    Subcommand(
        "start", summary: "sign a client in through the browser", arguments: ["CLIENT"],
        options: [
            noBrowser, .flag("ephemeral", "use the client's private-session browser (PrivateBrowser=)"),
            .flag("switch-account", "sign the current account out first"),
            .flag("add-account", "sign in one more account, the signed-in ones staying (Accounts=multiple)"),
            .value("login-hint", "ADDRESS", "the email address the sign-in page fills in"),
            .flag(
                "device",
                "sign in on another device (phone, laptop): print an address and a code, then wait (OAuth 2.0 and OpenID Connect clients)"
            ),
            .flag("wait", "wait until the client is signed in (see below)"),
            .value("timeout", "SECONDS", "with --wait or --device: stop waiting after SECONDS"),
            activationTokenOption,
            .flag("json", "print the attempt as JSON (with --wait: the session once signed in)"),
        ],
        help: """
            Starts a sign-in for CLIENT and opens the browser on the login page.
            If the client already has a waiting attempt, that attempt is reopened.

            With --wait, the command then waits until CLIENT is signed in and
            prints its session: exit status 0 once signed in (also when it already
            was), 1 when the attempt ends otherwise (cancelled, denied, expired,
            failed), 75 (WAIT_TIMEOUT) when --timeout passes first; the attempt
            goes on. Without --timeout it waits until the attempt ends. When the
            browser cannot be opened, the link is printed and the wait goes on.

            With --add-account (a client whose file says Accounts=multiple), the
            accounts already signed in stay, and the sign-in page asks for a
            fresh sign-in instead of offering the browser's current account; the
            new account becomes current ('browser-login accounts' lists them,
            'browser-login use' switches). An account the client holds already
            is signed in again, replacing its old session. --login-hint fills
            the page's address field. At most 16 accounts (ACCOUNT_LIMIT).
            --wait then waits for this sign-in, not for the current account.

            With --device (or for a client whose file says Flow=device), nothing
            opens here: the broker asks the provider for a code, and the command
            prints "To sign in, open ADDRESS and enter the code CODE", with a QR
            code of the address when the output is a terminal, then waits until
            the sign-in is finished, refused or expired. This is the way in over
            SSH or on a machine without a browser (RFC 8628; docs/providers.md).

            On Wayland a compositor raises a new window only with an activation
            token. --activation-token passes one (from the app's toolkit) to the
            browser as XDG_ACTIVATION_TOKEN and DESKTOP_STARTUP_ID; without it,
            the command's own $XDG_ACTIVATION_TOKEN (set by whatever launched the
            command, for example a terminal) is used, once.
            """,
        synopsis: """
            browser-login start CLIENT [--no-browser] [--ephemeral]
                    [--switch-account | --add-account] [--login-hint ADDRESS]
                    [--device] [--wait] [--timeout SECONDS]
                    [--activation-token TOKEN] [--json]
            """,
        run: { args, broker in
            let device = args.has("device")
            let wait = args.has("wait")
            let timeout = try timeoutOption(args)
            if timeout != nil && !wait && !device {
                throw CLIError("USAGE", "--timeout is for --wait (or --device); see --help", .usage)
            }
            let params = LoginStartParams(
                client: args.positionals[0], ephemeral: args.has("ephemeral"),
                openBrowser: !args.has("no-browser") && !device, switchAccount: args.has("switch-account"),
                flow: device ? "device" : nil,
                activationToken: activationToken(args, opening: !args.has("no-browser") && !device),
                addAccount: args.has("add-account") ? true : nil, loginHint: args["login-hint"])
            var answer: JSONValue
            do {
                answer = try await broker.call(.loginStart, params: encode(params))
            } catch let error as BrowserLoginError where error.code == .browserFailed {
                // The attempt stays waiting when the browser failed: offer its
                // link (and with --wait, go on waiting for it).
                guard let id = error.data.attemptId,
                    let resumed = try? await broker.call(
                        .loginResume, params: encode(LoginResumeParams(attemptId: id, openBrowser: false))),
                    let url = (try? decode(resumed, as: AttemptView.self))?.authorizeUrl
                else { throw error }
                writeError(CLIError(error, client: params.client))
                if args.has("json") && !wait {
                    printJSON(resumed)
                } else if !args.has("json") {
                    print("open this link in your browser to sign in:\n  \(url)")
                }
                guard wait else { return .unavailable }
                answer = resumed
            } catch let error as BrowserLoginError where error.code == .alreadySignedIn && wait {
                let session = try await broker.call(.sessionGet, params: encode(ClientParams(client: params.client)))
                if args.has("json") { printJSON(session) } else { print("signed in: " + describeSession(try decode(session))) }
                return .ok
            }
            let attempt: AttemptView = try decode(answer)
            if let shown = attempt.device, !args.has("json") {
                return try await waitForDeviceSignIn(broker, attempt: attempt, device: shown, timeout: timeout)
            }
            guard wait else { return try printStarted(answer, args) }
            if args.has("json") {
                if attempt.device != nil { printJSON(answer) }
            } else {
                _ = try printStarted(answer, args)
                print("waiting for the sign-in to finish…")
            }
            fflush(nil)
            return try await waitForSignIn(
                broker, attempt: attempt, timeout: timeout, json: args.has("json"), adding: params.addAccount == true)
        }),
    Subcommand(
        "finish", summary: "deliver a callback URL to the broker (the URL handler runs this)", arguments: ["URL"],
        options: [json],
        help: """
            Hands the app's return URL, as the browser opened it, to the broker,
            which checks it and completes the sign-in. The desktop runs this as the
            URL handler of each client's scheme (see 'browser-login install-handler').
            Exit status 0 when the attempt completed (or was already complete).
            """,
        run: oneArgumentCall(.loginFinish, params: { LoginFinishParams(url: $0) }, describe: describeAttempt)),
    Subcommand(
        "cancel", summary: "cancel a login attempt", arguments: ["ATTEMPT_ID"], options: [json],
        help: "Cancels the attempt locally at once (later callbacks are refused), then at\nthe server.",
        run: oneArgumentCall(
            .loginCancel, params: { AttemptParams(attemptId: $0) }, describe: describeAttempt)),
    Subcommand(
        "resume", summary: "reopen the browser for a waiting attempt", arguments: ["ATTEMPT_ID"],
        options: [.flag("no-browser", "print the link instead of opening it"), activationTokenOption, json],
        help: """
            Reopens the login page of a waiting attempt (for example after a restart).
            --activation-token works as for 'start'.
            """,
        run: { args, broker in
            let params = LoginResumeParams(
                attemptId: args.positionals[0], openBrowser: !args.has("no-browser"),
                activationToken: activationToken(args, opening: !args.has("no-browser")))
            return try printStarted(try await broker.call(.loginResume, params: encode(params)), args)
        }),
    Subcommand(
        "acknowledge", summary: "clear a finished or reconciled attempt", arguments: ["ATTEMPT_ID"], options: [json],
        help: """
            Acknowledges a finished attempt: its proofs are removed from the keyring
            and the server forgets it. An uncertain attempt can be acknowledged only
            once it is reconciled (its possible session adopted or revoked).
            """,
        run: oneArgumentCall(
            .loginAcknowledge, params: { AttemptParams(attemptId: $0) }, describe: describeAttempt)),
    Subcommand(
        "session", summary: "show a client's session", arguments: ["CLIENT"], options: [accountOption, json],
        help: """
            Shows whether CLIENT is signed in, as which account, and until when,
            and (without --json) which vault keeps the broker's secrets:
            secret-service, or file (Vault=file in broker.conf). Exit status 0
            only when it is signed in; 1 (with the state printed) when it is
            signed out, signing in, expired or revoked. A session signed out
            with reason VAULT_KEY_LOST lost its tokens with the file vault's key
            (the machine restarted): sign in again. With --account, that account's
            session rather than the current account's.
            """,
        run: { args, broker in
            let answer = try await broker.call(
                .sessionGet, params: encode(ClientParams(client: args.positionals[0], account: args["account"])))
            let session: SessionView = try decode(answer)
            if args.has("json") {
                printJSON(answer)
            } else {
                print(describeSession(session))
                // The vault is the broker's, not the session's: it comes from broker.info.
                if let info: BrokerInfo = try? decode(try await broker.call(.brokerInfo, params: nil)) {
                    print("vault: \(info.vault)")
                }
            }
            return session.status == .signedIn ? .ok : .failure
        }),
    Subcommand(
        "sign-out", summary: "sign a client out", arguments: ["CLIENT"], options: [accountOption, json],
        help: """
            Signs CLIENT out: the session is removed at once, and the broker revokes
            it at the server (later, while the server is down: the revoke stays
            owed and is retried; the broker's log says so). It says who was signed
            out; whether the server confirmed the revoke is in the broker's log,
            not in this answer. A provider without a revocation endpoint
            (GitHub, Entra) cannot be told: the tokens are forgotten here, and the
            provider's own sign-out page ends the browser session there.
            Without --account, the current account is signed out (a client with
            several accounts then makes the most recently used other one current).
            """,
        run: { args, broker in
            let params = try encode(ClientParams(client: args.positionals[0], account: args["account"]))
            if args.has("json") {
                printJSON(try await broker.call(.sessionSignOut, params: params))
                return .ok
            }
            // The session as it was: who is signed out, or that nobody was.
            let before: SessionView = try decode(try await broker.call(.sessionGet, params: params))
            print(describeSignOut(try decode(try await broker.call(.sessionSignOut, params: params)), before: before))
            return .ok
        }),
    Subcommand(
        "accounts", summary: "list a client's accounts", arguments: ["CLIENT"], options: [json],
        help: """
            Lists the accounts CLIENT holds: who, the status of each one's session,
            until when, its key (for --account and 'browser-login use'), and which
            one is current (the one the app uses when it names none). The current
            account comes first, then the most recently used. A client whose file
            says Accounts=multiple may hold up to 16; others hold one.
            """,
        run: { args, broker in
            let answer = try await broker.call(
                .sessionList, params: encode(SessionListParams(client: args.positionals[0])))
            if args.has("json") {
                printJSON(answer)
                return .ok
            }
            let views: [SessionView] = try decode(answer)
            let held = views.filter { $0.accountKey != nil }
            if held.isEmpty {
                print("\(args.positionals[0]) holds no account: sign in with 'browser-login start \(args.positionals[0])'")
                return .ok
            }
            print(table(accountRows(held, client: false)))
            return .ok
        }),
    Subcommand(
        "use", summary: "make one of a client's accounts the current one", arguments: ["CLIENT", "ACCOUNT"],
        options: [json],
        help: """
            Makes ACCOUNT (a key that 'browser-login accounts CLIENT' lists) the
            current account of CLIENT: the one its app, 'session', 'request' and
            'sign-out' use when they name none. Nobody is signed in or out.
            """,
        run: { args, broker in
            let answer = try await broker.call(
                .sessionUse,
                params: encode(SessionUseParams(client: args.positionals[0], account: args.positionals[1])))
            if args.has("json") { printJSON(answer) } else { print("current: " + describeSession(try decode(answer))) }
            return .ok
        }),
    requestCommand,
    Subcommand(
        "clients", summary: "list the configured clients", options: [json],
        help: """
            Lists the clients the broker has configured (from clients.d/*.conf): each
            one's protocol (browser-login, oidc or oauth2), its server or issuer, and
            its redirect (a custom scheme, or a loopback http://127.0.0.1/… address).
            """,
        run: { args, broker in
            let answer = try await broker.call(.clientsList, params: nil)
            if args.has("json") {
                printJSON(answer)
                return .ok
            }
            let list: [ClientSummary] = try decode(answer)
            if list.isEmpty {
                print("no clients are configured; add a file to ~/.config/browser-login/clients.d/ (see browser-login(1))")
                return .ok
            }
            var rows = [["ID", "APP", "PROTOCOL", "SERVER", "REDIRECT", "POLICY"]]
            for c in list {
                rows.append([c.id, c.appName, c.protocol, c.server, c.returnUrl, c.policy])
            }
            print(table(rows))
            return .ok
        }),
    Subcommand(
        "watch", summary: "stream session and attempt changes",
        options: [.value("client", "ID", "only this client's changes", repeatable: true), json],
        help: "Subscribes to the broker's events and prints each change as it happens,\nuntil interrupted.",
        run: { args, broker in
            let clients = args.all("client")
            for try await event in try await broker.rawEvents(clients: clients.isEmpty ? nil : clients) {
                if args.has("json") {
                    printJSON(["method": .string(event.method), "params": event.params])
                } else if event.method == RPCNotification.sessionChanged.rawValue,
                    let changed: SessionChanged = try? decode(event.params)
                {
                    print("session  " + describeSession(changed.session))
                } else if event.method == RPCNotification.loginChanged.rawValue,
                    let changed: LoginChanged = try? decode(event.params)
                {
                    print("attempt  " + describeAttempt(changed.attempt).replacingOccurrences(of: "\n", with: " "))
                }
                fflush(nil)
            }
            throw CLIError("CONNECTION_LOST", "the broker closed the connection", .unavailable)
        }),
    installHandlerCommand,
    doctorCommand,
    vaultCommand,
]
