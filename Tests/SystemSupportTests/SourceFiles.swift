import Foundation

/// The project's `Sources`, for the tests that read its code for a rule.
enum SourceFiles {
    /// `Sources`, or one of its directories (`"Engine"`): three levels above this file.
    static func directory(_ below: String = "") -> String {
        var sources = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { sources = sources.deletingLastPathComponent() }
        let root = sources.appendingPathComponent("Sources")
        return (below.isEmpty ? root : root.appendingPathComponent(below)).path
    }

    /// The Swift files under `directory` (paths relative to it).
    static func swiftFiles(in directory: String) -> [String] {
        (FileManager.default.enumerator(atPath: directory)?.compactMap { $0 as? String } ?? []).filter {
            $0.hasSuffix(".swift")
        }
    }

    /// Every line of every Swift file under `Sources` that `breaks` the rule, as
    /// `Sources/FILE:LINE: text`, and how many files were read.
    static func lines(breaking breaks: (_ file: String, _ line: Substring) -> Bool) throws -> (
        files: Int, offenders: [String]
    ) {
        let root = directory()
        let files = swiftFiles(in: root)
        var offenders: [String] = []
        for file in files {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where breaks(file, line) {
                offenders.append("Sources/\(file):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        return (files.count, offenders)
    }
}
