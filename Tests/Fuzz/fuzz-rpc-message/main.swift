// libFuzzer target "rpc-message" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.rpcMessage.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.rpcMessage)
}

FuzzDriver.main(fuzz)
