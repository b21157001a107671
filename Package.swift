// swift-tools-version:6.0
// browser-login: a native browser-login broker for Linux desktops.
import PackageDescription

/// One `systemLibrary` target per C library from Debian.
func cLibrary(_ name: String, pkgConfig: String, apt: [String]) -> Target {
    .systemLibrary(name: name, path: "Sources/\(name)", pkgConfig: pkgConfig, providers: [.apt(apt)])
}

let package = Package(
    name: "browser-login",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "BrowserLoginProtocol", targets: ["BrowserLoginProtocol"]),
    ],
    targets: [
        cLibrary("CSQLite", pkgConfig: "sqlite3", apt: ["libsqlite3-dev"]),
        cLibrary("CSecret", pkgConfig: "libsecret-1", apt: ["libsecret-1-dev"]),
        cLibrary("CCrypto", pkgConfig: "libcrypto", apt: ["libssl-dev"]),
        cLibrary("CCurl", pkgConfig: "libcurl", apt: ["libcurl4-openssl-dev"]),
        cLibrary("CSystemd", pkgConfig: "libsystemd", apt: ["libsystemd-dev"]),
        cLibrary("CGIO", pkgConfig: "gio-2.0", apt: ["libglib2.0-dev"]),
        cLibrary("CMicroHTTPD", pkgConfig: "libmicrohttpd", apt: ["libmicrohttpd-dev"]),
        cLibrary("CJansson", pkgConfig: "jansson", apt: ["libjansson-dev"]),

        // Shared by the broker and the reference server.
        .target(name: "BrowserLoginProtocol", dependencies: ["CCrypto", "CJansson"]),
        .target(name: "SQLiteSupport", dependencies: ["CSQLite"]),

        // The broker.
        .target(name: "BrokerCore", dependencies: ["BrowserLoginProtocol"]),
        .target(name: "BrokerVault", dependencies: ["BrokerCore", "CSecret"]),
        .target(name: "BrokerHTTP", dependencies: ["BrokerCore", "BrowserLoginProtocol", "CCurl"]),
        // Test support: runs one vault operation in a child process (private bus, locked keyring).
        .executableTarget(name: "vault-probe", dependencies: ["BrokerVault", "BrokerCore"], path: "Tests/Support/vault-probe"),

        .testTarget(name: "BrowserLoginProtocolTests", dependencies: ["BrowserLoginProtocol"]),
        .testTarget(name: "BrokerVaultTests", dependencies: ["BrokerVault", "BrokerCore", "vault-probe"]),
        .testTarget(name: "BrokerHTTPTests", dependencies: ["BrokerHTTP", "BrokerCore", "BrowserLoginProtocol"]),
    ],
    swiftLanguageModes: [.v6]
)
