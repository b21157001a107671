import BrokerRPC
import BrokerSystem
import Foundation
import FuzzTargets
import Testing

/// Every input a fuzzer ever crashed on (`Tests/Fuzz/regressions/<target>/`)
/// and the seed corpus (`Tests/Fuzz/corpus/<target>/`), run once through the
/// same entry points as the fuzzers, in the ordinary build (docs/reliability.md).
@Suite struct FuzzRegressionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz").path

    @Test(arguments: FuzzTargets.all.map(\.name))
    func crashInputsAndSeedsRunClean(_ name: String) throws {
        let target = try #require(FuzzTargets.named(name))
        let seeds = FuzzDriver.inputFiles([Self.root + "/corpus/" + name])
        #expect(!seeds.isEmpty, "target \(name) has no seed corpus")
        for input in FuzzDriver.inputFiles([Self.root + "/regressions/" + name]) + seeds {
            target.run([UInt8](try Data(contentsOf: URL(fileURLWithPath: input))))
        }
    }

    /// Found by fuzz-rpc-framing (Tests/Fuzz/regressions/rpc-framing/leading-whitespace-*),
    /// in Sources/BrokerRPC/Framing.swift: while the framing was being detected,
    /// whitespace that arrived in a piece of its own was dropped, but whitespace that
    /// arrived with the first message was kept in it, so the first message (and whether
    /// it was over the size limit) depended on how the stream was split into reads.
    @Test func framingDetectionDropsLeadingWhitespaceHoweverItArrives() {
        let stream = Array("\r!{}\n{}\n".utf8)
        var whole = RPCFrameDecoder()
        let atOnce = whole.feed(stream)
        var split = RPCFrameDecoder()
        let inPieces = split.feed(stream.prefix(1)) + split.feed(stream.dropFirst())
        #expect(atOnce == inPieces)
    }

    /// The client-file fuzz entry (`ClientFiles.parse(contents:file:)`) reads
    /// a file as the daemon's loader does: same client, same problems.
    @Test func clientFileParsingFromBytesIsTheLoadersParsing() throws {
        let directory = (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/fuzz-client-files-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (i, input) in FuzzDriver.inputFiles([Self.root + "/corpus/client-file"]).enumerated() {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: input)))
            let path = directory + "/c\(i).conf"
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let loaded = ClientFiles.load(directories: [directory])
            let parsed = ClientFiles.parse(contents: bytes, file: path)
            #expect(loaded.clients == (parsed.client.map { [$0] } ?? []), "\(input)")
            #expect(loaded.problems.map(\.description) == parsed.problems.map(\.description), "\(input)")
            try FileManager.default.removeItem(atPath: path)
        }
    }

    @Test func everyCorpusAndRegressionDirectoryNamesATarget() throws {
        for kind in ["corpus", "regressions"] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: Self.root + "/" + kind)) ?? []
            for name in names { #expect(FuzzTargets.named(name) != nil, "\(kind)/\(name) names no fuzz target") }
        }
    }
}
