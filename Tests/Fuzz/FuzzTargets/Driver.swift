import CFuzzerDriver
import Foundation

/// The C entry point type both libFuzzer and `FuzzDriver.main` call.
public typealias FuzzCallback = bl_fuzz_callback

/// The glue every fuzz program shares (docs/reliability.md, "Fuzzing").
///
/// A fuzz program is an ordinary executable whose `main.swift` exports
/// `LLVMFuzzerTestOneInput` and calls `FuzzDriver.main`. Built with
/// `-sanitize=fuzzer,address`, libFuzzer is linked in and `main` hands over
/// to its driver (`LLVMFuzzerRunDriver`, so the executable's own `main`
/// stays); in an ordinary build it runs the files (or the files of the
/// directories) named on its command line once each, to reproduce a crash.
public enum FuzzDriver {
    /// Runs one input through `target` (the body of `LLVMFuzzerTestOneInput`).
    public static func testOneInput(_ data: UnsafePointer<UInt8>, _ size: Int, _ target: FuzzTargets.Target) -> CInt {
        target.run(Array(UnsafeBufferPointer(start: data, count: size)))
        return 0
    }

    public static func main(_ callback: FuzzCallback) -> Never {
        if bl_fuzzer_linked() != 0 {
            var argc = CommandLine.argc
            var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
            exit(bl_fuzzer_run(&argc, &argv, callback))
        }
        let paths = CommandLine.arguments.dropFirst().filter { !$0.hasPrefix("-") }
        if paths.isEmpty {
            let name = CommandLine.arguments.first.map { ($0 as NSString).lastPathComponent } ?? "fuzz"
            FileHandle.standardError.write(
                Data(
                    """
                    usage: \(name) FILE|DIRECTORY...
                    Runs each input once (this build has no libFuzzer; scripts/fuzz builds one that fuzzes).

                    """.utf8))
            exit(64)
        }
        var count = 0
        for input in inputFiles(paths) {
            // One byte more, so that even an empty input has an address.
            let bytes = [UInt8](FileManager.default.contents(atPath: input) ?? Data()) + [0]
            _ = bytes.withUnsafeBufferPointer { callback($0.baseAddress!, $0.count - 1) }
            count += 1
        }
        print("ran \(count) inputs")
        exit(0)
    }

    /// The regular files named, or inside the directories named, in order.
    public static func inputFiles(_ paths: some Sequence<String>) -> [String] {
        var files: [String] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.sorted().filter { !$0.hasPrefix(".") }.map { path + "/" + $0 }
            } else {
                files.append(path)
            }
        }
        return files
    }
}

/// A property of the code under test that an input broke: a crash, so the
/// fuzzer keeps the input (a plain refusal of bad input is not one).
func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition { fatalError("fuzz property broken: " + message(), file: file, line: line) }
}
