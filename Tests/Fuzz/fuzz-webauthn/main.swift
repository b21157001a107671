// libFuzzer target "webauthn" (docs/reliability.md, "Fuzzing"); the entry is FuzzTargets.webauthn.
import FuzzTargets

@_cdecl("LLVMFuzzerTestOneInput") public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDriver.testOneInput(data, size, FuzzTargets.webauthn)
}

FuzzDriver.main(fuzz)
