// libFuzzer target "server-request" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.serverRequest.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.serverRequest)
}

FuzzDriver.main(fuzz)
