// libFuzzer target "client-file" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.clientFile.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.clientFile)
}

FuzzDriver.main(fuzz)
