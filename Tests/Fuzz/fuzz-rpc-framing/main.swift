// libFuzzer target "rpc-framing" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.rpcFraming.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.rpcFraming)
}

FuzzDriver.main(fuzz)
