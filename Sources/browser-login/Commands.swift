import BrokerRPC
import BrowserLoginProtocol
import Foundation

struct Subcommand: Sendable {
    let name: String
    let summary: String
    let usage: String
    let help: String
    let flags: Set<String>
    let options: Set<String>
    let run: @Sendable (Arguments, RPCClientFactory) throws -> Exit
}

/// Opens connections lazily so `--help` never needs the daemon.
struct RPCClientFactory: Sendable {
    let socketOption: String?
    func make() throws -> RPCClient { try connect(try socketPath(socketOption)) }
}

func requireOne(_ args: Arguments, _ what: String) throws -> String {
    guard args.positionals.count == 1 else { throw CLIError("expected exactly one \(what); see --help", .usage) }
    return args.positionals[0]
}

/// The `run` of a command that takes one positional argument, makes one call
/// with it as `param`, and prints the answer with `describe` (or as JSON).
func oneArgumentCall(
    _ placeholder: String, method: String, param: String, describe: @escaping @Sendable (JSONValue) -> String
) -> @Sendable (Arguments, RPCClientFactory) throws -> Exit {
    { args, rpc in
        let value = try requireOne(args, placeholder)
        let answer = try call(try rpc.make(), method, [param: .string(value)])
        if args.flags.contains("json") { printJSON(answer) } else { print(describe(answer)) }
        return .ok
    }
}

func requireNone(_ args: Arguments) throws {
    guard args.positionals.isEmpty else { throw CLIError("unexpected argument '\(args.positionals[0])'; see --help", .usage) }
}

// MARK: - Rendering

func age(_ from: String?, now: Timestamp) -> String {
    guard let from, let t = Timestamp(rfc3339: from) else { return "-" }
    return duration(now.millisecondsSince1970 - t.millisecondsSince1970)
}

func until(_ to: String?, now: Timestamp) -> String {
    guard let to, let t = Timestamp(rfc3339: to) else { return "-" }
    let ms = t.millisecondsSince1970 - now.millisecondsSince1970
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
func nextStep(_ a: JSONValue) -> String {
    let id = a["attemptId"]?.stringValue ?? ""
    switch a["state"]?.stringValue {
    case "waiting":
        if a["serverState"]?.stringValue == "authorized" {
            return
                "signed in at the server but the callback never arrived: check the URL handler (browser-login doctor), then 'browser-login resume \(id)'"
        }
        return "finish signing in in the browser, or 'browser-login resume \(id)' / 'browser-login cancel \(id)'"
    case "starting", "exchanging":
        return "in progress; wait a moment"
    case "uncertain":
        if a["reconciled"]?.boolValue == true {
            return "reconciled: 'browser-login acknowledge \(id)'"
        }
        return
            "the exchange's answer was lost; the broker reconciles it when the server answers ('browser-login status' retries now)"
    case "completed":
        return "-"
    case "cancelled", "expired", "denied", "failed":
        return "'browser-login acknowledge \(id)' to clear it"
    default:
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

func describeAttempt(_ a: JSONValue) -> String {
    var text =
        "attempt \(a["attemptId"]?.stringValue ?? "?"): \(a["state"]?.stringValue ?? "?") (client \(a["client"]?.stringValue ?? "?"))"
    if let error = a["error"], error != .null {
        text += "\n  error: \(error["code"]?.stringValue ?? "") — \(error["message"]?.stringValue ?? "")"
    }
    return text
}

func describeSession(_ s: JSONValue) -> String {
    let client = s["client"]?.stringValue ?? "?"
    let status = s["status"]?.stringValue ?? "?"
    var text = "\(client): \(status)"
    if let account = s["account"], account != .null {
        text += " as \(account["displayName"]?.stringValue ?? "") <\(account["email"]?.stringValue ?? "")>"
    }
    if let expires = s["expiresAt"]?.stringValue { text += ", until \(expires)" }
    if let reason = s["reason"]?.stringValue { text += " (reason: \(reason))" }
    return text
}

// MARK: - Commands

let subcommands: [Subcommand] = [
    Subcommand(
        name: "status", summary: "show login attempts that need attention (or all of them)",
        usage: "browser-login status [--all] [--client ID] [--json] [--no-reconcile]",
        help: """
            Shows the broker's login attempts as a table: id, client, state, age,
            expiry, last error, and the next step for a stuck one. Without --all,
            only attempts that are in progress or need attention are shown.
            Waiting and uncertain attempts are checked with their server first
            (an uncertain attempt is reconciled), unless --no-reconcile.

              --all            every attempt, finished ones included (newest 1000)
              --client ID      only this client's attempts
              --json           print the attempts as a JSON array
              --no-reconcile   do not contact the servers
            """,
        flags: ["all", "json", "no-reconcile"], options: ["client"],
        run: { args, rpc in
            try requireNone(args)
            let client = try rpc.make()
            var params: [String: JSONValue] = [:]
            if let c = args.options["client"] { params["client"] = .string(c) }
            if !args.flags.contains("all") {
                params["states"] = .array(["starting", "waiting", "exchanging", "uncertain"].map { .string($0) })
            }
            var attempts = try call(client, "login.list", .object(params)).arrayValue ?? []
            if !args.flags.contains("no-reconcile") {
                for (i, a) in attempts.enumerated() where ["waiting", "uncertain"].contains(a["state"]?.stringValue ?? "") {
                    if let id = a["attemptId"]?.stringValue,
                        let fresh = try? client.call("login.status", params: ["attemptId": .string(id), "reconcile": true])
                    {
                        attempts[i] = fresh
                    }
                }
            }
            if args.flags.contains("json") {
                printJSON(.array(attempts))
                return .ok
            }
            if attempts.isEmpty {
                print(
                    args.flags.contains("all")
                        ? "no login attempts" : "no login attempts need attention (--all shows every attempt)")
                return .ok
            }
            let now = Timestamp.now()
            var rows = [["ID", "CLIENT", "STATE", "AGE", "EXPIRES", "LAST ERROR", "NEXT STEP"]]
            for a in attempts {
                let state = (a["state"]?.stringValue ?? "?") + (a["serverState"]?.stringValue.map { " (server: \($0))" } ?? "")
                let expiry = a["state"]?.stringValue == "waiting" ? until(a["expiresAt"]?.stringValue, now: now) : "-"
                rows.append([
                    a["attemptId"]?.stringValue ?? "?", a["client"]?.stringValue ?? "?", state,
                    age(a["createdAt"]?.stringValue, now: now), expiry, a["error"]?["code"]?.stringValue ?? "-", nextStep(a),
                ])
            }
            print(table(rows))
            return .ok
        }),
    Subcommand(
        name: "start", summary: "sign a client in through the browser",
        usage: "browser-login start CLIENT [--no-browser] [--ephemeral] [--switch-account] [--json]",
        help: """
            Starts a sign-in for CLIENT and opens the browser on the login page.
            If the client already has a waiting attempt, that attempt is reopened.

              --no-browser      do not open the browser; print the link to open instead
              --ephemeral       use the client's private-session browser (PrivateBrowser=)
              --switch-account  sign the current account out first
              --json            print the attempt as JSON
            """,
        flags: ["no-browser", "ephemeral", "switch-account", "json"], options: [],
        run: { args, rpc in
            let clientId = try requireOne(args, "CLIENT")
            let client = try rpc.make()
            let a: JSONValue
            do {
                a = try client.call(
                    "login.start",
                    params: [
                        "client": .string(clientId), "openBrowser": .bool(!args.flags.contains("no-browser")),
                        "ephemeral": .bool(args.flags.contains("ephemeral")),
                        "switchAccount": .bool(args.flags.contains("switch-account")),
                    ])
            } catch let error as RPCError {
                // The attempt stays waiting when the browser failed: offer its link.
                if error.applicationCode == "BROWSER_FAILED", let id = error.data?["attemptId"]?.stringValue,
                    let url = try? client.call("login.resume", params: ["attemptId": .string(id), "openBrowser": false])[
                        "authorizeUrl"]?.stringValue
                {
                    writeError(describe(error))
                    print("open this link in your browser to sign in:\n  \(url)")
                    return .unavailable
                }
                throw CLIError(describe(error), exitCode(error))
            } catch let error as RPCClientError {
                throw CLIError("the broker connection failed: \(error)", .unavailable)
            }
            if args.flags.contains("json") {
                printJSON(a)
                return .ok
            }
            print(describeAttempt(a))
            if args.flags.contains("no-browser"), let url = a["authorizeUrl"]?.stringValue {
                print("open this link in your browser to sign in:\n  \(url)")
            }
            return .ok
        }),
    Subcommand(
        name: "finish", summary: "deliver a callback URL to the broker (the URL handler runs this)",
        usage: "browser-login finish URL",
        help: """
            Hands the app's return URL, as the browser opened it, to the broker,
            which checks it and completes the sign-in. The desktop runs this as the
            URL handler of each client's scheme (see 'browser-login install-handler').
            Exit status 0 when the attempt completed (or was already complete).
            """,
        flags: ["json"], options: [],
        run: oneArgumentCall("URL", method: "login.finish", param: "url", describe: describeAttempt)),
    Subcommand(
        name: "cancel", summary: "cancel a login attempt", usage: "browser-login cancel ATTEMPT_ID",
        help: "Cancels the attempt locally at once (later callbacks are refused), then at the server.",
        flags: ["json"], options: [],
        run: oneArgumentCall("ATTEMPT_ID", method: "login.cancel", param: "attemptId", describe: describeAttempt)),
    Subcommand(
        name: "resume", summary: "reopen the browser for a waiting attempt",
        usage: "browser-login resume ATTEMPT_ID [--no-browser]",
        help:
            "Reopens the login page of a waiting attempt (for example after a restart).\n\n  --no-browser  print the link instead of opening it",
        flags: ["no-browser", "json"], options: [],
        run: { args, rpc in
            let id = try requireOne(args, "ATTEMPT_ID")
            let a = try call(
                try rpc.make(), "login.resume",
                [
                    "attemptId": .string(id),
                    "openBrowser": .bool(!args.flags.contains("no-browser")),
                ])
            if args.flags.contains("json") {
                printJSON(a)
                return .ok
            }
            print(describeAttempt(a))
            if args.flags.contains("no-browser"), let url = a["authorizeUrl"]?.stringValue {
                print("open this link in your browser to sign in:\n  \(url)")
            }
            return .ok
        }),
    Subcommand(
        name: "acknowledge", summary: "clear a finished or reconciled attempt",
        usage: "browser-login acknowledge ATTEMPT_ID",
        help: """
            Acknowledges a finished attempt: its proofs are removed from the keyring
            and the server forgets it. An uncertain attempt can be acknowledged only
            once it is reconciled (its possible session adopted or revoked).
            """,
        flags: ["json"], options: [],
        run: oneArgumentCall("ATTEMPT_ID", method: "login.acknowledge", param: "attemptId", describe: describeAttempt)),
    Subcommand(
        name: "session", summary: "show a client's session", usage: "browser-login session CLIENT [--json]",
        help: "Shows whether CLIENT is signed in, as which account, and until when.",
        flags: ["json"], options: [],
        run: oneArgumentCall("CLIENT", method: "session.get", param: "client", describe: describeSession)),
    Subcommand(
        name: "sign-out", summary: "sign a client out", usage: "browser-login sign-out CLIENT",
        help: "Signs CLIENT out: the session is removed at once and revoked at the server (later, if the server is down).",
        flags: ["json"], options: [],
        run: oneArgumentCall("CLIENT", method: "session.signOut", param: "client", describe: describeSession)),
    Subcommand(
        name: "clients", summary: "list the configured clients", usage: "browser-login clients [--json]",
        help: "Lists the clients the broker has configured (from clients.d/*.conf).",
        flags: ["json"], options: [],
        run: { args, rpc in
            try requireNone(args)
            let list = try call(try rpc.make(), "clients.list").arrayValue ?? []
            if args.flags.contains("json") {
                printJSON(.array(list))
                return .ok
            }
            if list.isEmpty {
                print("no clients are configured; add a file to ~/.config/browser-login/clients.d/ (see browser-login(1))")
                return .ok
            }
            var rows = [["ID", "APP", "SERVER", "RETURN URL", "POLICY"]]
            for c in list {
                rows.append(["id", "appName", "server", "returnUrl", "policy"].map { c[$0]?.stringValue ?? "" })
            }
            print(table(rows))
            return .ok
        }),
    Subcommand(
        name: "watch", summary: "stream session and attempt changes", usage: "browser-login watch [--client ID]... [--json]",
        help: "Subscribes to the broker's events and prints each change as it happens, until interrupted.",
        flags: ["json"], options: ["client"],
        run: { args, rpc in
            try requireNone(args)
            let client = try rpc.make()
            var params: [String: JSONValue] = [:]
            if let c = args.options["client"] { params["clients"] = .array([.string(c)]) }
            _ = try call(client, "events.subscribe", .object(params))
            while true {
                let message: RPCClientMessage
                do { message = try client.nextMessage(timeout: .seconds(86400)) } catch RPCClientError.timedOut {
                    continue
                } catch {
                    throw CLIError("the broker closed the connection", .unavailable)
                }
                guard case .notification(let method, let params) = message else { continue }
                if args.flags.contains("json") {
                    printJSON(["method": .string(method), "params": params ?? .null])
                } else if method == "session.changed", let s = params?["session"] {
                    print("session  " + describeSession(s))
                } else if method == "login.changed", let a = params?["attempt"] {
                    print("attempt  " + describeAttempt(a).replacingOccurrences(of: "\n", with: " "))
                }
                fflush(nil)
            }
        }),
    installHandlerCommand,
    doctorCommand,
]
