import Foundation
import Testing

/// The resident daemon links no Foundation (docs/performance.md): with the Swift runtime linked statically, one
/// `import Foundation` in any module of its closure would bring all of swift-corelibs-foundation and its ICU data
/// back into `browser-login-broker`. The CLI, the reference server and the tests may import it.
@Suite struct NoFoundationTests {
    static let daemonModules = [
        "Broker", "Engine", "BrokerCore", "BrokerStore", "BrokerHTTP", "BrokerVault", "BrokerOAuth", "BrokerJOSE",
        "BrokerLoopback", "BrokerBrowserLogin",
        "BrokerRPC", "BrokerSystem", "BrowserLoginAPI", "BrowserLoginProtocol", "SystemSupport", "CurlSupport",
        "SQLiteSupport", "DesktopEntry", "CommandLineKit", "browser-login-broker",
    ]

    /// Each Swift file of `module` with the modules it imports.
    static func imports(of module: String) throws -> [(file: String, modules: [String])] {
        let directory = SourceFiles.directory(module)
        return try SourceFiles.swiftFiles(in: directory).map { file in
            let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            let modules = text.split(separator: "\n").compactMap { line -> String? in
                let words = line.split(separator: " ")
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count else { return nil }
                return String(words[index + 1])
            }
            return ("\(module)/\(file)", modules)
        }
    }

    @Test func noModuleOfTheDaemonImportsFoundation() throws {
        var offenders: [String] = []
        var checked = 0
        for module in Self.daemonModules {
            for (file, modules) in try Self.imports(of: module) {
                checked += 1
                if modules.contains(where: { $0.hasPrefix("Foundation") }) { offenders.append(file) }
            }
        }
        #expect(checked > 100)
        #expect(offenders == [])
    }

    /// docs/architecture.md: the engine and the owners of its state know no JSON-RPC, no D-Bus, no daemon and
    /// no protocol's wire; the adapters depend on the engine, not the reverse. SwiftPM lets a module import a
    /// module built before it even when its target does not name it, so the rule is checked here too.
    @Test func theEngineImportsNoAdapterAndNoProtocol() throws {
        let forbidden: Set = [
            "Broker", "BrokerRPC", "BrokerSystem", "BrokerHTTP", "BrokerBrowserLogin", "BrokerOAuth", "BrokerJOSE",
            "BrokerVault", "BrokerCurl",
            "CGIO", "CJansson", "CSecret", "CCurl",
        ]
        let files = try Self.imports(of: "Engine")
        #expect(files.count > 10)
        let offenders = files.flatMap { file, modules in modules.filter(forbidden.contains).map { "\(file): \($0)" } }
        #expect(offenders == [])
    }

    /// Issue 29: the engine drives every protocol through the seam and never names one: no protocol's wire
    /// types or errors, no protocol's type (a downcast), no parsing of a protocol's callback. Comments and
    /// string literals aside, its code names none of these.
    @Test func theEngineNamesNoProtocol() throws {
        let directory = SourceFiles.directory("Engine")
        let files = SourceFiles.swiftFiles(in: directory)
        let named = [
            "LoginServer", "ServerErrorCode", "StatusResponse", "CreateAttempt", "ExchangeRequest", "ExchangeResponse",
            "RefreshResponse", "Callback(parsing", "OAuth", "Provider", "BrowserLogin",
        ]
        var offenders: [String] = []
        for file in files {
            let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                // The shared modules (`BrowserLoginProtocol`: URLs, crypto, JSON) are imported by name.
                if line.hasPrefix("import ") { continue }
                var code = String(line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
                // String literals are messages for people, not code.
                code = code.split(separator: "\"", omittingEmptySubsequences: false).enumerated()
                    .filter { $0.offset % 2 == 0 }.map(\.element).joined()
                if let word = named.first(where: { code.contains($0) }) {
                    offenders.append("Engine/\(file):\(number + 1): \(word)")
                }
            }
        }
        #expect(files.count > 10)
        #expect(offenders == [])
    }
}
