// libFuzzer target "jose" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.jose.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.jose)
}

FuzzDriver.main(fuzz)
