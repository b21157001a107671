// libFuzzer target "callback" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.callbackURL.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.callbackURL)
}

FuzzDriver.main(fuzz)
