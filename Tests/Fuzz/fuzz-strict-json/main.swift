// libFuzzer target "strict-json" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.strictJSON.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.strictJSON)
}

FuzzDriver.main(fuzz)
