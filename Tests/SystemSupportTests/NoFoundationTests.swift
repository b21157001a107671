import Foundation
import Testing

/// The resident daemon links no Foundation (docs/performance.md): with the Swift runtime linked statically, one
/// `import Foundation` in any module of its closure would bring all of swift-corelibs-foundation and its ICU data
/// back into `browser-login-broker`. The CLI, the reference server and the tests may import it.
@Suite struct NoFoundationTests {
    static let daemonModules = [
        "Broker", "BrokerCore", "BrokerStore", "BrokerHTTP", "BrokerVault", "BrokerOAuth", "BrokerJOSE", "BrokerLoopback",
        "BrokerRPC", "BrokerSystem", "BrowserLoginAPI", "BrowserLoginProtocol", "SystemSupport", "CurlSupport",
        "SQLiteSupport", "DesktopEntry", "CommandLineKit", "browser-login-broker",
    ]

    @Test func noModuleOfTheDaemonImportsFoundation() throws {
        var sources = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { sources = sources.deletingLastPathComponent() }
        sources.appendPathComponent("Sources")
        var offenders: [String] = []
        var checked = 0
        for module in Self.daemonModules {
            let directory = sources.appendingPathComponent(module).path
            let files = FileManager.default.enumerator(atPath: directory)?.compactMap { $0 as? String } ?? []
            for file in files where file.hasSuffix(".swift") {
                checked += 1
                let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
                for line in text.split(separator: "\n") {
                    let words = line.split(separator: " ")
                    if let index = words.firstIndex(of: "import"), index + 1 < words.count,
                        words[index + 1].hasPrefix("Foundation")
                    {
                        offenders.append("\(module)/\(file)")
                    }
                }
            }
        }
        #expect(checked > 100)
        #expect(offenders == [])
    }
}
