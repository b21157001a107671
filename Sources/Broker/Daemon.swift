import BrokerBrowserLogin
import BrokerCore
import BrokerHTTP
import BrokerOAuth
import BrokerRPC
import BrokerSystem
import BrokerVault
import BrowserLoginProtocol
import CommandLineKit
import DesktopEntry
import Engine
import Synchronization
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The options of `browser-login-broker`.
public struct DaemonOptions: Sendable {
    public var socketPath: String?
    public var stateDirectory: String?
    public var clientDirectories: [String]?
    public var logLevel: Logger.Level = .info
    /// `--log-target`: the journal, stderr lines, or the journal when stderr is journald's stream.
    public var logTarget: LogTarget = .auto
    public var checkConfig = false
    /// `--check-servers`: probe each client's login server and exit.
    public var checkServers = false
    /// `--json` (with `--check-servers`).
    public var json = false
    /// `--no-dbus`: do not own the bus name even when a session bus exists.
    public var dbus = true
    /// How often signed-in sessions are checked with the server (`GET session`).
    public var verifyIntervalMilliseconds: Int64 = 300_000
    /// `--retain-ended`: how long ended attempts are kept (0: for ever).
    public var retentionMilliseconds = BrokerEngine.defaultRetentionMilliseconds
    /// `--http-idle`: seconds the HTTP helper (browser-login-http) lives on without a request.
    public var httpIdleSeconds = 10
    /// `--max-connections`: RPC connections served at once (docs/rpc.md, Limits).
    public var maxConnections = RPCServerConfiguration.defaultMaxConnections
    /// `--config`: broker.conf (default $XDG_CONFIG_HOME/browser-login/broker.conf).
    public var configPath: String?

    public static let command = Command(
        "browser-login-broker",
        options: [
            .value(
                "socket", "PATH",
                "listen here (default $XDG_RUNTIME_DIR/browser-login/broker.sock; a socket passed by systemd in LISTEN_FDS is used first)"
            ),
            .value("state-dir", "DIR", "SQLite state (default $XDG_STATE_HOME/browser-login)"),
            .value(
                "clients-dir", "DIR",
                "read client files from DIR only (repeatable; default $XDG_CONFIG_HOME/browser-login/clients.d, then each $XDG_DATA_DIRS/browser-login/clients.d)",
                repeatable: true),
            .value("log-level", "LEVEL", "error, warning, notice, info (default) or debug"),
            .value(
                "log-target", "TARGET",
                "journal (structured fields; stderr lines with <N> priorities when journald is not running), stderr (lines with <N> priorities, plain words on a terminal), or auto (default): the journal when stderr is the journal stream systemd gave the service ($JOURNAL_STREAM), else plain lines"
            ),
            .value(
                "verify-interval", "S",
                "check each signed-in session with its server every S seconds (default 300); sessions revoked or disabled at the server end within that time"
            ),
            .value(
                "retain-ended", "TIME",
                "keep ended attempts for TIME (default 30d; units s, m, h, d; never: keep them all), then prune them; uncertain attempts are kept until settled"
            ),
            .value(
                "http-idle", "S",
                "end the HTTP helper (browser-login-http, which runs the requests to login servers and providers) after S seconds without one (default 10; 1 to 3600)"
            ),
            .value(
                "max-connections", "N",
                "serve at most N RPC connections (default 512); at the limit the connection idle longest is closed to make room, else new ones get BUSY (32 more for processes with none open)"
            ),
            .value(
                "config", "FILE",
                "the broker's settings (default $XDG_CONFIG_HOME/browser-login/broker.conf, optional): Vault=secret-service or Vault=file; see docs/operations.md"
            ),
            .flag(
                "check-config",
                "validate broker.conf and the client files, print each problem once on standard output, and exit (status 78 when a file is refused)"
            ),
            .flag(
                "check-servers",
                "ask each client's login server whether it speaks the protocol (or read its OAuth provider's metadata), print one line per client, and exit (status 69 when one does not answer); --json for JSON"
            ),
            .flag("json", "with --check-servers: print JSON"),
            .flag("no-dbus", "do not own org.browserlogin.Broker or org.browserlogin.Broker1 on the session bus"),
            .flag("version", "print the version"),
        ],
        description: """
            Serves the broker's JSON-RPC API on a Unix socket: apps start sign-ins,
            the URL handler delivers callbacks, the CLI inspects attempts. Normally
            started by systemd (browser-login-broker.socket) or D-Bus activation.
            """,
        epilogue: """
            With a session bus, the daemon owns org.browserlogin.Broker and implements
            org.freedesktop.Application: Open delivers callback URLs like login.finish.
            It also serves the API on the bus as org.browserlogin.Broker1 (docs/dbus.md).

            Under systemd, logs go to the journal with structured fields (ATTEMPT_ID,
            CLIENT, CODE, MESSAGE_ID): journalctl --user -u browser-login-broker
            ATTEMPT_ID=at_…; otherwise to stderr, one line per event with a journald
            priority prefix.
            Files: state.sqlite in the state directory; secrets live only in the
            Secret Service keyring (schema org.browserlogin.Broker), or, with
            Vault=file in broker.conf, in the file vault (vault/ in the state
            directory), encrypted with a key held in the kernel's user keyring.
            """,
        synopsis: "browser-login-broker [OPTIONS]", title: "browser-login-broker — the browser-login daemon",
        optionsTitle: "Options:")

    /// `30d`, `12h`, `90m`, `600s` (a bare number is days) in milliseconds;
    /// `never` is 0. Nil when malformed, not positive or over ten years.
    static func retention(_ text: String) -> Int64? {
        if text == "never" { return 0 }
        let units: [Character: Int64] = ["s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000]
        var number = Substring(text)
        var unit: Int64 = 86_400_000
        if let last = text.last, let u = units[last] {
            unit = u
            number = number.dropLast()
        }
        guard !number.isEmpty, number.allSatisfy(\.isASCII), let value = Int64(number), value > 0,
            value <= 3_650 * 86_400_000 / unit
        else { return nil }
        return value * unit
    }

    /// Parses the command line; nil when `--help` or `--version` was answered.
    public static func parse(_ args: [String]) throws(UsageError) -> DaemonOptions? {
        guard case .run(let parsed) = try command.parse(args) else {
            print(command.help)
            return nil
        }
        if parsed.has("version") {
            print("browser-login-broker \(BrokerVersion.string)")
            return nil
        }
        var options = DaemonOptions()
        options.socketPath = parsed["socket"]
        options.stateDirectory = parsed["state-dir"]
        let directories = parsed.all("clients-dir")
        options.clientDirectories = directories.isEmpty ? nil : directories
        if let v = parsed["log-level"] {
            let levels: [String: Logger.Level] = [
                "error": .error, "warning": .warning, "notice": .notice, "info": .info, "debug": .debug,
            ]
            guard let level = levels[v] else { throw UsageError("--log-level takes error, warning, notice, info or debug") }
            options.logLevel = level
        }
        if let v = parsed["log-target"] {
            guard let target = LogTarget(rawValue: v) else { throw UsageError("--log-target takes journal, stderr or auto") }
            options.logTarget = target
        }
        if let v = parsed["verify-interval"] {
            guard let seconds = Double(v), seconds >= 0.1 else {
                throw UsageError("--verify-interval takes a number of seconds (at least 0.1)")
            }
            options.verifyIntervalMilliseconds = Int64(seconds * 1000)
        }
        if let v = parsed["retain-ended"] {
            guard let milliseconds = Self.retention(v) else {
                throw UsageError("--retain-ended takes a time such as 30d, 12h, 90m or 600s, or never")
            }
            options.retentionMilliseconds = milliseconds
        }
        if let v = parsed["http-idle"] {
            guard let seconds = Int(v), (1...3600).contains(seconds) else {
                throw UsageError("--http-idle takes a number of seconds (1 to 3600)")
            }
            options.httpIdleSeconds = seconds
        }
        if let v = parsed["max-connections"] {
            guard let n = Int(v), (1...1_000_000).contains(n) else {
                throw UsageError("--max-connections takes a number of connections (1 to 1000000)")
            }
            options.maxConnections = n
        }
        options.configPath = parsed["config"]
        options.checkConfig = parsed.has("check-config")
        options.checkServers = parsed.has("check-servers")
        options.json = parsed.has("json")
        options.dbus = !parsed.has("no-dbus")
        return options
    }
}

/// Composes the daemon: client files, store, vault, HTTP, engine, RPC
/// server, timers and signals; runs until SIGTERM or SIGINT.
public enum BrokerDaemon {
    public static func run(_ options: DaemonOptions, environment: [String: String]) async -> Int32 {
        LibCrypto.skipSystemConfiguration()
        let logger = Logger(
            label: "browser-login-broker", minimum: options.logLevel,
            handler: options.logTarget.handler(environment: environment))
        let descriptorLimit = raiseDescriptorLimit(logger: logger)
        Systemd.notify("STATUS=reading client files")
        let paths = UserPaths(environment: environment)
        let loaded = ClientFiles.load(directories: options.clientDirectories ?? paths.clientDirectories)
        // --check-config prints each problem once, on standard output (below); a daemon logs them.
        for problem in loaded.problems where !options.checkConfig {
            logger.log(
                problem.severity == .error ? .error : .warning, "client file problem",
                ["file": problem.file, "key": problem.key ?? "-", "problem": problem.message])
        }
        let configPath = options.configPath ?? BrokerConfig.defaultPath(paths)
        let (brokerConfig, configProblems) = BrokerConfig.load(path: configPath, required: options.configPath != nil)
        for problem in configProblems where !options.checkConfig {
            logger.log(
                problem.severity == .error ? .error : .warning, "broker.conf problem",
                ["file": problem.file, "key": problem.key ?? "-", "problem": problem.message])
        }
        if options.checkConfig {
            for problem in configProblems + loaded.problems { print(problem.description) }
            print("\(loaded.clients.count) client(s) valid in \(loaded.files.count) file(s)")
            let refused = (configProblems + loaded.problems).contains { $0.severity == .error }
            return refused ? 78 : 0
        }
        guard let brokerConfig else {
            logger.error(
                "broker.conf is refused; fix it (browser-login-broker --check-config lists the problems)",
                ["file": configPath, "code": "CONFIG_INVALID"])
            return 78
        }
        if options.checkServers {
            return await ServerCheck.run(
                clients: loaded.clients, json: options.json,
                transport: HelperTransport.broker(environment: environment, logger: logger))
        }
        let handlerSchemes = loaded.clients.filter(\.installHandler).compactMap(\.returnURL?.scheme)
        if environment["INVOCATION_ID"] != nil, !handlerSchemes.isEmpty {
            // The hardened service cannot write ~/.local/share/applications or
            // mimeapps.list: register through the user manager, outside the
            // sandbox, with the CLI's own install-handler.
            let arguments =
                ["systemd-run", "--user", "--quiet", "--collect", "--no-ask-password", "--wait", handlerProgram()]
                + ["install-handler"] + handlerSchemes.flatMap { ["--scheme", $0] }
            let result = Subprocess.run(program: "/usr/bin/env", arguments: arguments, environment: environment)
            logger.log(
                result.status == 0 ? .info : .warning, "URL handler registration through systemd-run",
                ["status": "\(result.status)"])
        } else if !handlerSchemes.isEmpty {
            let report = HandlerInstaller(environment: environment).install(
                schemes: handlerSchemes, exec: handlerProgram())
            for step in report.steps { logger.info("URL handler", ["step": step]) }
            for problem in report.problems { logger.warning("URL handler registration problem", ["problem": problem]) }
        }

        let stateDirectory = options.stateDirectory ?? paths.brokerStateDirectory
        do {
            try FileSystem.createDirectories(stateDirectory, mode: 0o700)
        } catch {
            logger.error("cannot create the state directory", ["path": stateDirectory, "error": "\(error)"])
            return 73
        }

        // A socket passed by systemd comes first; the path then only names it in logs.
        let passed = Systemd.listenFileDescriptors().first?.fd
        guard let socketDescription = paths.brokerSocket(option: options.socketPath) ?? passed.map({ "fd:\($0)" })
        else {
            logger.error("XDG_RUNTIME_DIR is not set; pass --socket PATH")
            return 78
        }
        let listen: RPCServerConfiguration.Listen = passed.map { .fileDescriptor($0) } ?? .path(socketDescription)

        let vault: any SecretVault
        var fileVault: FileVault?
        switch brokerConfig.vault {
        case .secretService:
            vault = SecretServiceVault()
        case .file:
            let directory = brokerConfig.vaultDirectory ?? stateDirectory + "/vault"
            do {
                let opened = try FileVault(directory: directory)
                fileVault = opened
                vault = opened
            } catch {
                logger.error("cannot open the file vault", ["path": directory, "error": error.message])
                return 73
            }
        }

        Systemd.notify("STATUS=opening and migrating the state database")
        let transport = HelperTransport.broker(
            environment: environment, logger: logger, idleSeconds: options.httpIdleSeconds)
        if transport.program == nil {
            logger.error(
                "the HTTP helper browser-login-http is not installed; no sign-in can reach a server (reinstall browser-login)",
                ["looked": HelperTransport.candidates().joined(separator: " "), "code": "HELPER_MISSING"])
        }
        let metadataCache = StoreMetadataCache(path: stateDirectory + "/state.sqlite")
        let engine: BrokerEngine
        do {
            engine = try BrokerEngine(
                storePath: stateDirectory + "/state.sqlite", clients: loaded.clients,
                vault: TestFaults.wrapping(vault),
                makeServer: { client in
                    let server: any SignInProtocol
                    if let settings = client.provider {
                        let provider = OAuthProvider(
                            settings: settings, transport: transport, caFile: client.caFile, clock: SystemClock(),
                            cache: metadataCache)
                        server = OAuthSignIn(provider: provider, clock: SystemClock())
                    } else {
                        server = LoginServerClient.signIn(for: client, transport: transport)
                    }
                    return TestFaults.wrapping(server)
                }, callbackReaders: [OAuthCallbacks(), BrowserLoginCallbacks()],
                launcher: ProcessBrowserLauncher(environment: environment, logger: logger), transport: transport,
                logger: logger, socketPath: socketDescription, verifyIntervalMilliseconds: options.verifyIntervalMilliseconds,
                retentionMilliseconds: options.retentionMilliseconds)
        } catch {
            logger.error("cannot open the state database", ["path": stateDirectory, "error": "\(error)"])
            return 74
        }
        let methods = MethodTable(engine: engine, logger: logger)
        let limits = ConnectionLimits(requested: options.maxConnections, descriptorLimit: descriptorLimit)
        if limits.lowered {
            logger.warning(
                "fewer RPC connections than asked: the descriptor limit leaves room for these only",
                [
                    "rpc.max_connections": "\(limits.maxConnections)", "rpc.reserved": "\(limits.reserved)",
                    "requested": "\(options.maxConnections)", "nofile": "\(descriptorLimit)",
                ])
        }
        let rpcLog = RPCEventLog(logger: logger, descriptorLimit: descriptorLimit)
        let activity = Wakeup()
        let server: RPCServer
        do {
            server = try RPCServer(
                configuration: RPCServerConfiguration(
                    listen: listen, maxConnections: limits.maxConnections, reservedConnections: limits.reserved),
                events: { event in
                    activity.signal()
                    rpcLog.record(event)
                },
                fast: { context, method, params in
                    activity.signal()
                    return methods.handleFast(context, method, params)
                },
                handler: { context, method, params async throws(RPCError) in
                    activity.signal()
                    return try await methods.handle(context, method, params)
                })
        } catch {
            logger.error("cannot listen on the socket", ["socket": socketDescription, "error": "\(error)"])
            return 71
        }

        if let fileVault { await openFileVault(fileVault, engine: engine, logger: logger) }

        Systemd.notify("STATUS=recovering unfinished sign-ins")
        do { try await engine.recover() } catch {
            logger.error("start-up recovery failed", ["error": "\(error)"])
        }

        // Started in this order, stopped in the reverse: the RPC server drains first, while the
        // engine's timer still runs; the watchdog pings until the end.
        var services: [ServiceGroup.Entry] = []
        if let usec = Systemd.watchdogMicroseconds() {
            let ping = TimerService {
                Systemd.notify("WATCHDOG=1")
                return .microseconds(usec / 2)
            }
            services.append(.init(ping))
        }
        // The engine's timer sleeps until its next deadline (a wall-clock time, on a CLOCK_REALTIME
        // timerfd that also wakes it when the clock is set), woken early when the engine schedules
        // something sooner; never more often than every 250 ms, so failing work cannot spin. With
        // nothing scheduled it takes no wake-ups.
        let engineTimer = Wakeup()
        engine.setWakeUp { engineTimer.signal() }
        let engineTicks = TimerService.wallClock(
            wakeup: engineTimer, minimumInterval: .milliseconds(BrokerEngine.minimumSleepMilliseconds)
        ) {
            let due = await engine.tick()
            let prune = await engine.nextPrune
            return [due, prune].compactMap { $0 }.min()?.millisecondsSince1970
        }
        // The engine's work items stop after the timer that schedules most of them.
        services.append(.init(engine.work))
        // The loopback listeners' deliveries stop (cancelled, awaited) before the work they submit to.
        services.append(.init(engine.listenerWork))
        services.append(.init(engineTicks))
        let bus = options.dbus ? SessionBusService(engine: engine, methods: methods, logger: logger, activity: activity) : nil
        services.append(
            .init(
                TrimService(
                    server: server, activity: activity, logger: logger,
                    // A retired bus connection is freed after the trim of its quiet period: it counts as
                    // activity, so the next quiet period trims what it held.
                    otherMessages: { (bus?.application.callsArrived ?? 0) + (bus?.application.connectionsRetired ?? 0) },
                    releaseCaches: { await engine.releaseMemory() })))
        if let bus { services.append(.init(bus)) }
        services.append(.init(RPCService(server: server, logger: logger), endsGroup: true))
        logger.notice(
            "serving", ["socket": socketDescription, "clients": "\(loaded.clients.count)", "state": stateDirectory])
        let group = ServiceGroup(services)
        Systemd.notify("READY=1\nSTATUS=serving \(loaded.clients.count) client(s)")

        await group.run { trigger in
            guard case .signal(let signal) = trigger else { return }
            logger.notice("stopping", ["signal": SignalWatcher.name(signal)])
            Systemd.notify("STOPPING=1\nSTATUS=stopping")
        }
        await engine.releaseWaiters()
        logger.notice("stopped")
        return 0
    }

    /// The CLI installed next to this executable (`browser-login`), else the name on `PATH`:
    /// the URL handler registered at start-up for clients whose file says `InstallHandler=true`.
    static func handlerProgram() -> String {
        let exe = ProcFS.executable() ?? ""
        let sibling = FileSystem.join(FileSystem.parent(of: exe), "browser-login")
        return !exe.isEmpty && access(sibling, X_OK) == 0 ? sibling : "browser-login"
    }

    /// Raises the soft `RLIMIT_NOFILE` to the hard limit; answers the soft limit now in force.
    static func raiseDescriptorLimit(logger: Logger) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            logger.warning("cannot read the descriptor limit (RLIMIT_NOFILE)", ["errno": "\(errno)"])
            return 1024
        }
        let before = limit.rlim_cur
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) != 0 {
                logger.warning(
                    "cannot raise the descriptor limit (RLIMIT_NOFILE)", ["errno": "\(errno)", "soft": "\(before)"])
            }
        }
        let current = RPCEventLog.currentDescriptorLimit() ?? Int(min(UInt64(before), UInt64(Int32.max)))
        logger.debug(
            "descriptor limit (RLIMIT_NOFILE)",
            ["nofile.soft": "\(current)", "nofile.before": "\(before)", "nofile.hard": "\(limit.rlim_max)"])
        return current
    }
}

/// The RPC server as a service: when it stops (or fails), the daemon stops.
struct RPCService: Service {
    let server: RPCServer
    let logger: Logger

    func run() async {
        do { try await server.run() } catch {
            logger.error("the RPC server failed", ["error": "\(error)"])
        }
    }

    func shutdown() { server.shutdown() }
}

/// The session-bus face of the daemon: `Open` goes to the same path as
/// `login.finish`, and the API `org.browserlogin.Broker1` (BusAPI.swift) is
/// served on the same connection. URIs are callback URLs, which are
/// secrets: only the outcome (attempt id, state or error code) is logged.
/// Without a session bus, `run()` returns at once and the daemon goes on without it.
struct SessionBusService: Service {
    let application: DBusApplication
    private let opened = AsyncStream.makeStream(of: [String].self)
    let engine: BrokerEngine
    let api: BusAPI
    let logger: Logger

    /// `activity` is signalled as each API call arrives (the idle trim's wake-up).
    init(engine: BrokerEngine, methods: MethodTable, logger: Logger, activity: Wakeup? = nil) {
        self.engine = engine
        self.logger = logger
        let input = opened.continuation
        let api = BusAPI(methods: methods, engine: engine, logger: logger)
        self.api = api
        var service = api.service
        service.arrived = { activity?.signal() }
        application = DBusApplication(
            busName: DesktopEntry.applicationId, objectPath: DesktopEntry.objectPath, api: service,
            open: { uris in input.yield(uris) },
            events: { event in
                switch event {
                case .noSessionBus(let detail):
                    logger.notice("no session bus; running without D-Bus activation", ["detail": detail])
                case .nameAcquired(let name): logger.info("owning the bus name", ["dbus.name": name])
                case .nameLost(let name):
                    logger.notice("the bus name is owned elsewhere or the bus went away", ["dbus.name": name])
                case .registrationFailed(let detail): logger.warning("D-Bus registration failed", ["detail": detail])
                case .busClosed: logger.warning("the session bus closed; reconnecting when it is back", [:])
                case .activated: logger.info("activated over D-Bus")
                case .actionRefused: logger.info("D-Bus ActivateAction refused: the broker has no actions")
                case .keyringChanged: engine.vaultMayHaveChanged()
                case .keyringWatched(let watching): engine.vaultWatched(watching)
                case .connectionRenewed(let largest):
                    logger.info(
                        "D-Bus: moved to a fresh bus connection to give back the read buffer of a large message",
                        ["dbus.message.bytes": "\(largest)"])
                case .connectionRenewalSkipped(let reason):
                    logger.notice("D-Bus: kept the bus connection after a large message", ["reason": reason])
                case .connectionRetired:
                    logger.debug("D-Bus: the previous bus connection is closed")
                    activity?.signal()
                }
            })
        api.attach(application)
    }

    /// Owning the bus name runs on its own thread; each opened URI is delivered in a child task. When the bus
    /// stops, the API's calls still in flight are cancelled and waited for.
    func run() async {
        do { try await api.startBroadcasting() } catch {
            logger.warning("cannot broadcast the broker's changes on the session bus", ["error": "\(error)"])
        }
        await withDiscardingTaskGroup { group in
            group.addTask {
                await application.run()
                opened.continuation.finish()
            }
            for await uris in opened.stream {
                for uri in uris { group.addTask { await deliver(uri) } }
            }
        }
        await api.calls.drain()
    }

    func shutdown() { application.shutdown() }

    private func deliver(_ uri: String) async {
        do {
            let attempt = try await engine.finish(url: uri)
            logger.notice(
                "callback delivered over D-Bus", ["attempt.id": attempt.attemptId, "attempt.state": attempt.state.rawValue])
        } catch let error as BrokerError {
            logger.warning(
                "callback over D-Bus refused", ["error.code": error.code.rawValue, "attempt.id": error.attemptId ?? "-"])
        } catch {
            logger.warning("callback over D-Bus failed", ["error.type": "\(type(of: error))"])
        }
    }
}

/// The connection limits the descriptor limit allows: `maxConnections` plus
/// `reserved` connections, and `descriptorReserve` descriptors kept for
/// everything else (the listener, SQLite and its journal, libcurl's sockets,
/// the vault's D-Bus connection, logs), so that RPC connections can never
/// take the descriptors a sign-in needs.
struct ConnectionLimits: Equatable {
    static let descriptorReserve = 64
    var maxConnections: Int
    var reserved: Int
    /// The descriptor limit forced fewer than asked.
    var lowered: Bool

    init(requested: Int, descriptorLimit: Int) {
        let available = max(2, descriptorLimit - Self.descriptorReserve)
        let wanted = RPCServerConfiguration.defaultReservedConnections
        let fits = requested + wanted <= available
        reserved = fits ? wanted : min(wanted, available / 16)
        maxConnections = fits ? requested : max(1, available - reserved)
        lowered = maxConnections < requested
    }
}

/// Logs the RPC server's events: the ones an operator must see (out of
/// descriptors, connections refused or closed at the limits, slow readers
/// dropped) at warning or notice — at most one line per kind every 10 s,
/// with how many were not logged — and the rest at debug.
final class RPCEventLog: Sendable {
    private let logger: Logger
    private let descriptorLimit: Int
    private let kinds = Mutex(LogRateLimit(interval: 10_000_000_000))

    init(logger: Logger, descriptorLimit: Int) {
        self.logger = logger
        self.descriptorLimit = descriptorLimit
    }

    func record(_ event: RPCServerEvent) {
        switch event {
        case .acceptFailed(let error) where error == .tooManyOpenFiles || error == .tooManyOpenFilesInSystem:
            limited(
                "emfile", .warning,
                error == .tooManyOpenFiles
                    ? "cannot accept RPC connections: the broker is out of file descriptors; accepting paused for 100 ms"
                    : "cannot accept RPC connections: the system is out of file descriptors; accepting paused for 100 ms",
                ["errno": "\(error)", "nofile": "\(Self.currentDescriptorLimit() ?? descriptorLimit)"])
        case .acceptFailed(let error):
            limited(
                "accept", .warning, "cannot accept an RPC connection; accepting paused for 100 ms",
                ["errno": "\(error)"])
        case .connectionRefusedBusy(let peer, let open):
            limited(
                "busy", .warning,
                "RPC connection limit reached and no connection idle: a new connection was answered BUSY and closed",
                ["rpc.open": "\(open)", "peer.pid": "\(peer.pid)"])
        case .connectionRefusedProcessLimit(let peer, let held):
            limited(
                "process", .warning,
                "an RPC peer process holds as many connections as one process may, none idle: its new connection was answered BUSY and closed",
                ["rpc.per_process": "\(held)", "peer.pid": "\(peer.pid)"])
        case .idleConnectionEvicted(let id, let peer):
            limited(
                "evicted", .notice, "RPC connection limit reached: closed the connection idle longest to make room",
                ["rpc.connection": "\(id)", "peer.pid": "\(peer.pid)"])
        case .slowReaderDropped(let id, let peer, let unsent, let total, let reason):
            let why =
                switch reason {
                case .outputBudgetSpent:
                    "dropped an RPC connection that does not read its replies: the output budget of all connections is spent"
                case .outputProcessBudgetSpent:
                    "dropped an RPC connection that does not read its replies: its process is over the output budget of one process"
                default: "dropped an RPC connection that does not read its replies: over its own output cap"
                }
            limited(
                "slow", .warning, why,
                [
                    "rpc.connection": "\(id)", "peer.pid": "\(peer.pid)", "rpc.unsent.bytes": "\(unsent)",
                    "rpc.unsent.total.bytes": "\(total)",
                ])
        default:
            // Describing an event takes reflection: only when it is logged (two per connection).
            if logger.minimum >= .debug { logger.debug("rpc event", ["event": "\(event)"]) }
        }
    }

    /// The soft `RLIMIT_NOFILE` now (it may have been lowered from outside since start-up).
    static func currentDescriptorLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return Int(min(UInt64(limit.rlim_cur), UInt64(Int32.max)))
    }

    private func limited(_ kind: String, _ level: Logger.Level, _ message: String, _ metadata: [String: String]) {
        // The clock is read under the lock: events of one kind come from several I/O queues at once.
        let suppressed = kinds.withLock { $0.admit(kind, now: monotonicNanoseconds()) }
        guard let suppressed else { return }
        var metadata = metadata
        if suppressed > 0 { metadata["suppressed"] = "\(suppressed)" }
        logger.log(level, message, metadata)
    }
}

/// At most one log line per kind every `interval` nanoseconds, counting the ones not logged.
struct LogRateLimit: Sendable {
    let interval: UInt64
    private var kinds: [String: (lastLogged: UInt64, suppressed: Int)] = [:]

    init(interval: UInt64) { self.interval = interval }

    /// nil: not logged (counted); else logged now, with the number not logged since the last line.
    /// A `now` older than the last line (read before it by another thread) counts as within the interval:
    /// the time since is never computed by a subtraction that could go below zero (a trap: it stopped the
    /// broker when two I/O queues closed idle connections to make room at the same moment).
    mutating func admit(_ kind: String, now: UInt64) -> Int? {
        if let entry = kinds[kind], now < entry.lastLogged || now - entry.lastLogged < interval {
            kinds[kind]?.suppressed += 1
            return nil
        }
        defer { kinds[kind] = (now, 0) }
        return kinds[kind]?.suppressed ?? 0
    }
}

extension HelperTransport {
    /// The broker's transport: the HTTP helper, ended after `idleSeconds` without a request. Proxies: the
    /// environment's (read by libcurl in the helper, as curl does) when it names one, else the desktop's
    /// (GIO, asked here); loopback never.
    static func broker(environment: [String: String], logger: Logger, idleSeconds: Int = 10) -> HelperTransport {
        let log: @Sendable (String, [String: String]) -> Void = { message, metadata in logger.warning(message, metadata) }
        guard !DesktopProxyResolver.environmentNamesProxy(environment) else {
            return HelperTransport(environment: environment, idleSeconds: idleSeconds, log: log)
        }
        let desktop = DesktopProxyResolver(logger: logger)
        return HelperTransport(
            environment: environment, idleSeconds: idleSeconds, proxyLookup: { origin in desktop.proxy(forOrigin: origin) },
            log: log)
    }
}
