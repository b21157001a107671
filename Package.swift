// swift-tools-version:6.0
// browser-login: a native browser-login broker for Linux desktops.
import PackageDescription

/// One `systemLibrary` target per C library from Debian.
func cLibrary(_ name: String, pkgConfig: String, apt: [String]) -> Target {
    .systemLibrary(name: name, path: "Sources/\(name)", pkgConfig: pkgConfig, providers: [.apt(apt)])
}

/// The libFuzzer targets (Tests/Fuzz/fuzz-<name>, corpus in Tests/Fuzz/corpus/<name>).
let fuzzers = ["strict-json", "rpc-framing", "rpc-message", "callback", "client-file", "server-request", "jose", "webauthn"]

let package = Package(
    name: "browser-login",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "browser-login-broker", targets: ["browser-login-broker"]),
        // The broker's HTTP helper (libexec): the daemon does not link libcurl (HelperTransport).
        .executable(name: "browser-login-http", targets: ["browser-login-http"]),
        .executable(name: "browser-login", targets: ["browser-login"]),
        .library(name: "BrowserLoginProtocol", targets: ["BrowserLoginProtocol"]),
        .library(name: "BrowserLoginAPI", targets: ["BrowserLoginAPI"]),
        .library(name: "BrowserLoginClient", targets: ["BrowserLoginClient"]),
        .executable(name: "browser-login-server", targets: ["browser-login-server"]),
    ],
    targets: [
        cLibrary("CSQLite", pkgConfig: "sqlite3", apt: ["libsqlite3-dev"]),
        // The reference server's PostgreSQL store (libpq).
        cLibrary("CPostgres", pkgConfig: "libpq", apt: ["libpq-dev"]),
        cLibrary("CSecret", pkgConfig: "libsecret-1", apt: ["libsecret-1-dev"]),
        // libcrypto linked: the tests' signer (JOSETests). The programs load it on first use (CCryptoLoader).
        cLibrary("CCrypto", pkgConfig: "libcrypto", apt: ["libssl-dev"]),
        // libcrypto's headers without linking it: BrowserLoginProtocol's LibCrypto loads it with dlopen when a
        // signature check or the file vault first needs it, so a broker that only runs Browser Login sign-ins
        // never maps it (docs/performance.md, round 6).
        .systemLibrary(name: "CCryptoLoader", path: "Sources/CCryptoLoader"),
        // GLib alone: SHA-256 (GChecksum) for every program.
        cLibrary("CGLib", pkgConfig: "glib-2.0", apt: ["libglib2.0-dev"]),
        cLibrary("CCurl", pkgConfig: "libcurl", apt: ["libcurl4-openssl-dev"]),
        cLibrary("CGIO", pkgConfig: "gio-2.0", apt: ["libglib2.0-dev"]),
        cLibrary("CMicroHTTPD", pkgConfig: "libmicrohttpd", apt: ["libmicrohttpd-dev"]),
        // The same library's headers without linking it: the broker's loopback listener loads it with dlopen on
        // first use (dlopen is in glibc's libc), so the daemon maps no libmicrohttpd or GnuTLS until then.
        .systemLibrary(name: "CMicroHTTPDLoader", path: "Sources/CMicroHTTPDLoader"),
        cLibrary("CJansson", pkgConfig: "jansson", apt: ["libjansson-dev"]),
        // The CLI's terminal QR code of a device sign-in's address.
        cLibrary("CQRencode", pkgConfig: "libqrencode", apt: ["libqrencode-dev"]),
        // glibc's <malloc.h> (malloc_trim); part of libc, nothing to install.
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        // memfd_create(2), which the Glibc module leaves out (the journal writer's large entries); part of
        // libc and the kernel's headers, nothing to link or install.
        .systemLibrary(name: "CLinux", path: "Sources/CLinux"),
        // The file vault's key in the kernel's user keyring (docs/operations.md, "The file vault").
        cLibrary("CKeyutils", pkgConfig: "libkeyutils", apt: ["libkeyutils-dev"]),
        // CBOR (RFC 8949): the reference server's passkeys read attestation objects and COSE keys with it.
        cLibrary("CCbor", pkgConfig: "libcbor", apt: ["libcbor-dev"]),
        // Argon2id (RFC 9106): the file vault's passphrase-sealed key (docs/vault.md).
        cLibrary("CArgon2", pkgConfig: "libargon2", apt: ["libargon2-dev"]),

        // Shared by the broker and the reference server.
        .target(name: "BrowserLoginProtocol", dependencies: ["CCryptoLoader", "CGLib", "CJansson"]),
        // The broker's wire API (docs/rpc.md): shared by the daemon, the CLI and client libraries.
        .target(name: "BrowserLoginAPI", dependencies: ["BrowserLoginProtocol"]),
        // The Swift client library of the broker's API (docs/apps/swift.md): async calls over BrokerRPC's client.
        .target(name: "BrowserLoginClient", dependencies: ["BrowserLoginAPI", "BrokerRPC", "SystemSupport"]),
        // One implementation per facility, used by every program: the logger,
        // signals, /proc, XDG and socket paths, subprocesses, service lifecycle, systemd's notification,
        // watchdog, socket-activation and journal protocols (without libsystemd); and the one libcurl wrapper.
        .target(name: "SystemSupport", dependencies: ["CLinux"]),
        .target(name: "CurlSupport", dependencies: ["CCurl"]),
        .target(name: "SQLiteSupport", dependencies: ["CSQLite"]),
        // One libpq connection, its errors and migrations; rows are SQLiteSupport's `Row` values.
        .target(name: "PostgresSupport", dependencies: ["CPostgres", "SQLiteSupport"]),
        // The reference login server.
        .target(
            name: "LoginServer",
            dependencies: [
                "BrowserLoginProtocol", "CommandLineKit", "SQLiteSupport", "SystemSupport", "CMicroHTTPD",
                "CurlSupport",
                // Sign-in with an upstream OpenID provider (docs/server.md): the broker's OAuth, JOSE and HTTP code.
                "BrokerOAuth", "BrokerJOSE", "BrokerHTTP", "BrokerCurl", "BrokerCore",
                "PostgresSupport",
                // Passkeys (docs/server.md): WebAuthn's CBOR.
                "CCbor",
            ]),
        .executableTarget(name: "browser-login-server", dependencies: ["LoginServer"]),
        .target(name: "ScriptedBrowser", dependencies: ["BrowserLoginProtocol", "CurlSupport"]),
        .executableTarget(
            name: "browser-login-demo-agent", dependencies: ["CommandLineKit", "ScriptedBrowser", "SystemSupport"]),
        .testTarget(
            name: "LoginServerTests",
            dependencies: [
                "LoginServer", "ScriptedBrowser", "BrowserLoginProtocol", "BrowserLoginTestSupport", "BrowserLoginTestTraits",
                "PostgresSupport", "SQLiteSupport",
                // The passkey tests' authenticator signs with libcrypto (TestSigner).
                "BrowserLoginTestSigner",
            ]),

        // The broker.
        .target(name: "BrokerCore", dependencies: ["BrowserLoginAPI", "BrowserLoginProtocol"]),
        .target(name: "BrokerStore", dependencies: ["BrokerCore", "SQLiteSupport"]),
        // HTTP through the helper process: no libcurl in the daemon.
        .target(name: "BrokerHTTP", dependencies: ["BrokerCore", "BrowserLoginProtocol", "SystemSupport"]),
        // Browser Login (docs/protocol.md) as a sign-in protocol: its routes, its wire error, the seam's steps.
        .target(name: "BrokerBrowserLogin", dependencies: ["BrokerCore", "BrowserLoginProtocol", "SystemSupport"]),
        // CurlTransport: HTTPTransport over libcurl, run by the helper, the reference server and the tests.
        .target(name: "BrokerCurl", dependencies: ["BrokerCore", "BrowserLoginProtocol", "CurlSupport", "CCurl"]),
        .executableTarget(
            name: "browser-login-http", dependencies: ["BrokerCurl", "BrokerHTTP", "BrokerCore", "CurlSupport", "SystemSupport"]),
        .target(
            name: "BrokerVault",
            dependencies: ["BrokerCore", "CSecret", "BrowserLoginProtocol", "VaultKey", "SystemSupport"]),
        // The file vault's key: the kernel keyring, AES-256-GCM, and its passphrase seal (Argon2id); shared by
        // the broker and `browser-login vault`, without libsecret.
        .target(
            name: "VaultKey", dependencies: ["BrowserLoginProtocol", "CCryptoLoader", "CKeyutils", "CArgon2", "SystemSupport"]),
        // The OAuth 2.0 / OpenID Connect provider's wire (docs/providers.md), over BrokerCore's HTTPTransport.
        .target(name: "BrokerOAuth", dependencies: ["BrokerCore", "BrokerJOSE", "BrowserLoginProtocol"]),
        // ID token (JWS) validation with libcrypto (docs/providers.md): no BrokerCore, so it stays a pure check.
        .target(name: "BrokerJOSE", dependencies: ["CCryptoLoader", "CJansson", "BrowserLoginProtocol"]),
        // The loopback redirect listener of OAuth sign-ins (RFC 8252 §7.3), on libmicrohttpd loaded on first use.
        .target(name: "BrokerLoopback", dependencies: ["CMicroHTTPDLoader", "SystemSupport"]),
        // Test support: runs one vault operation in a child process (private bus, locked keyring).
        .executableTarget(
            name: "vault-probe", dependencies: ["BrokerVault", "BrokerCore", "CMalloc"], path: "Tests/Support/vault-probe"),
        .target(name: "BrokerRPC", dependencies: ["CJansson", "CLinux", "BrowserLoginProtocol", "SystemSupport"]),
        // The declarative command-line parser of the four programs.
        .target(name: "CommandLineKit"),
        // The URL handler's desktop file: plain text and subprocesses, shared by the CLI and the daemon.
        .target(name: "DesktopEntry", dependencies: ["SystemSupport"]),
        // BrokerRPC: the JSON values of the D-Bus API (DBusVariant).
        .target(
            name: "BrokerSystem",
            dependencies: ["BrokerCore", "BrokerRPC", "DesktopEntry", "SystemSupport", "CGIO"]),
        // The engine and the owners of its state (attempts, sessions, background work): no JSON-RPC, no D-Bus,
        // no daemon, and no protocol's wire; the RPC and D-Bus adapters (Broker) depend on it, not the reverse.
        .target(
            name: "Engine",
            dependencies: [
                "BrokerCore", "BrokerStore", "BrokerLoopback", "DesktopEntry",
                "BrowserLoginAPI", "BrowserLoginProtocol", "SystemSupport",
            ]
        ),
        // The daemon: its RPC methods, D-Bus API, configuration and wiring of the protocols into the engine.
        .target(
            name: "Broker",
            dependencies: [
                "Engine", "BrokerCore", "BrokerStore", "BrokerRPC", "BrokerHTTP", "BrokerBrowserLogin", "BrokerVault",
                "BrokerSystem",
                "DesktopEntry", "BrokerOAuth", "BrokerJOSE",
                "BrowserLoginAPI", "BrowserLoginProtocol", "CMalloc", "CommandLineKit", "SQLiteSupport", "SystemSupport",
            ]
        ),

        .executableTarget(name: "browser-login-broker", dependencies: ["Broker", "CommandLineKit"]),
        .executableTarget(
            name: "browser-login",
            dependencies: [
                "BrokerRPC", "BrowserLoginClient", "CommandLineKit", "CQRencode", "DesktopEntry", "SystemSupport",
                // `browser-login vault`: the file vault's passphrase-sealed key.
                "VaultKey",
            ]),

        // Shared by the tests and the benchmarks: temporary directories, processes, private keyrings, and the
        // harness that runs the real daemon, server and CLI (Tests/TestSupport).
        .target(
            name: "BrowserLoginTestSupport", dependencies: ["BrokerRPC", "CurlSupport", "ScriptedBrowser", "SystemSupport"],
            path: "Tests/TestSupport"),
        // The swift-testing trait that runs a blocking test on a thread of its own (tests only: imports Testing).
        .target(name: "BrowserLoginTestTraits", dependencies: ["BrowserLoginTestSupport"], path: "Tests/TestTraits"),
        .testTarget(name: "BrowserLoginProtocolTests", dependencies: ["BrowserLoginProtocol"]),
        // The test provider (django-oauth-toolkit, Tests/Provider) end to end, without the broker.
        .testTarget(
            name: "ProviderTests",
            dependencies: ["BrokerRPC", "BrowserLoginProtocol", "BrowserLoginTestSupport", "BrowserLoginTestTraits"]),
        .testTarget(name: "SystemSupportTests", dependencies: ["SystemSupport", "CurlSupport", "executor-probe"]),
        // Test support: a process that runs on SystemSupport's executors (ExecutorTests).
        .executableTarget(name: "executor-probe", dependencies: ["SystemSupport"], path: "Tests/Support/executor-probe"),
        .testTarget(name: "BrokerRPCTests", dependencies: ["BrokerRPC", "BrowserLoginTestSupport", "BrowserLoginTestTraits"]),
        .testTarget(name: "BrowserLoginAPITests", dependencies: ["BrowserLoginAPI", "BrowserLoginProtocol"]),
        .testTarget(name: "CommandLineKitTests", dependencies: ["CommandLineKit"]),
        // The Swift client library against the real daemon, server and keyring.
        .testTarget(
            name: "BrowserLoginClientTests",
            dependencies: [
                "BrowserLoginClient", "BrokerRPC", "browser-login-broker", "browser-login-http", "browser-login",
                "browser-login-server",
                "browser-login-demo-agent", "BrowserLoginTestSupport", "BrowserLoginTestTraits",
            ]),
        // The in-memory doubles of the unit tests.
        .target(name: "BrokerTestDoubles", dependencies: ["BrokerVault", "BrokerCore"], path: "Tests/BrokerTestDoubles"),
        .testTarget(
            name: "BrokerVaultTests",
            dependencies: [
                "BrokerVault", "BrokerCore", "BrokerTestDoubles", "vault-probe", "BrowserLoginTestSupport",
                "BrowserLoginTestTraits",
            ]),
        .testTarget(
            name: "BrokerHTTPTests",
            dependencies: [
                "BrokerHTTP", "BrokerBrowserLogin", "BrokerCurl", "BrokerCore", "BrowserLoginProtocol",
                "BrowserLoginTestSupport",
                "BrowserLoginTestTraits", "CurlSupport", "browser-login-http",
            ]),
        .testTarget(name: "OAuthTests", dependencies: ["BrokerOAuth", "BrokerCore", "BrowserLoginProtocol"]),
        // Key pairs and signatures made by a linked libcrypto: the ID tokens of JOSETests, the passkeys of LoginServerTests.
        .target(name: "BrowserLoginTestSigner", dependencies: ["BrowserLoginProtocol", "CCrypto"], path: "Tests/TestSigner"),
        .testTarget(name: "JOSETests", dependencies: ["BrokerJOSE", "BrowserLoginProtocol", "BrowserLoginTestSigner"]),
        .testTarget(
            name: "LoopbackTests",
            dependencies: ["BrokerLoopback", "BrowserLoginTestSupport", "BrowserLoginTestTraits", "SystemSupport"]),
        // BrokerSystem: the documented client files (docs/examples/clients) are read with GKeyFile as the daemon reads them.
        .testTarget(
            name: "BrokerCoreTests",
            dependencies: ["BrokerCore", "BrokerStore", "BrokerSystem", "BrokerBrowserLogin", "BrowserLoginProtocol"]),
        .testTarget(
            name: "BrokerTests",
            dependencies: [
                "Broker", "Engine", "BrokerCore", "BrokerVault", "BrokerRPC", "BrokerTestDoubles", "BrokerBrowserLogin",
                // ConformanceTests: the real OAuth client against ScriptedProvider, whose ID tokens TestSigner signs.
                "BrokerOAuth", "BrowserLoginTestSigner",
            ]),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "BrokerRPC", "BrowserLoginProtocol", "ScriptedBrowser", "DesktopEntry", "browser-login-broker",
                "browser-login-http",
                "browser-login", "browser-login-server", "BrowserLoginTestSupport", "BrowserLoginTestTraits",
                // FileVaultTests reads the file vault as the broker does.
                "BrokerVault", "BrokerCore",
                // DPoPAndPARTests makes a DPoP proof with the session's key, as the broker does.
                "BrokerJOSE",
                // JournalTests sends to a real journald with the broker's journal writer; HTTPHelperTests reads /proc.
                "SystemSupport",
            ]
        ),
        .testTarget(
            name: "DesktopIntegrationTests",
            dependencies: [
                "BrokerRPC", "BrowserLoginProtocol", "ScriptedBrowser", "DesktopEntry", "Broker", "Engine", "BrokerSystem",
                "browser-login-broker", "browser-login-http", "browser-login", "browser-login-server", "BrowserLoginTestSupport",
                "BrowserLoginTestTraits",
            ]
        ),

        // Benchmarks (docs/performance.md): `make bench`.
        .executableTarget(
            name: "browser-login-bench",
            dependencies: [
                "BrokerRPC", "BrokerStore", "BrokerCore", "BrokerHTTP", "BrokerBrowserLogin", "BrokerCurl", "BrokerVault",
                "BrowserLoginProtocol",
                "SQLiteSupport", "ScriptedBrowser", "BrowserLoginTestSupport", "SystemSupport", "CMicroHTTPD", "CLinux",
            ],
            path: "Benchmarks/browser-login-bench"
        ),
        // The load-and-abuse run against the real daemon (docs/reliability.md).
        .executableTarget(
            name: "browser-login-load", dependencies: ["BrokerRPC", "ScriptedBrowser", "BrowserLoginTestSupport"],
            path: "Benchmarks/browser-login-load"
        ),

        // Fuzzing (docs/reliability.md): `scripts/fuzz`, `make fuzz`. The targets and their glue are one
        // library, also run by FuzzRegressionTests; each fuzzer is an executable that runs the files named
        // on its command line in this build, and is libFuzzer when built with -sanitize=fuzzer.
        .systemLibrary(name: "CFuzzerDriver", path: "Tests/Fuzz/CFuzzerDriver"),
        .target(
            name: "FuzzTargets",
            dependencies: ["BrowserLoginProtocol", "BrokerJOSE", "BrokerRPC", "BrokerSystem", "LoginServer", "CFuzzerDriver"],
            path: "Tests/Fuzz/FuzzTargets"
        ),
        .testTarget(name: "FuzzRegressionTests", dependencies: ["FuzzTargets", "BrokerRPC", "BrokerSystem"]),
    ] + fuzzers.map { .executableTarget(name: "fuzz-\($0)", dependencies: ["FuzzTargets"], path: "Tests/Fuzz/fuzz-\($0)") },
    swiftLanguageModes: [.v6]
)
