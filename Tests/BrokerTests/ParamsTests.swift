import BrokerRPC
import Testing

@testable import Broker
@testable import Engine

/// The strict params reader answers docs/rpc.md's messages, in the order of the reads.
@Suite struct ParamsTests {
    func message(_ body: () throws -> Void) -> String? {
        do { try body() } catch let error as RPCError where error.code == .invalidParams { return error.message } catch {
            return "not -32602: \(error)"
        }
        return nil
    }

    @Test func messages() throws {
        let p = try Params(
            .object([
                "s": .string("x"), "n": .integer(5), "b": .bool(true), "nul": .null, "a": .array([.string("a"), .integer(1)]),
                "o": .object(["k": .string("v"), "z": .integer(1)]), "sa": .array([.string("a"), .string("b")]),
            ]), allowed: ["s", "n", "b", "nul", "a", "o", "sa"])
        #expect(try p.optionalString("s") == "x")
        #expect(try p.optionalString("nul") == nil)
        #expect(try p.optionalString("missing") == nil)
        #expect(message { _ = try p.optionalString("n") } == "'n' must be a string")
        #expect(message { _ = try p.string("missing") } == "'missing' is required")
        #expect(message { _ = try p.string("nul") } == "'nul' is required")
        #expect(try p.bool("b") == true)
        #expect(message { _ = try p.bool("s") } == "'s' must be true or false")
        #expect(try p.int("n") == 5)
        #expect(try p.int("nul") == nil)
        #expect(message { _ = try p.int("b") } == "'b' must be an integer")
        #expect(try p.stringArray("sa") == ["a", "b"])
        #expect(message { _ = try p.stringArray("a") } == "'a' must be an array of strings")
        #expect(message { _ = try p.stringArray("s") } == "'s' must be an array of strings")
        #expect(message { _ = try p.stringObject("o") } == "'o' must be an object of strings")
        #expect(message { _ = try p.stringObject("s") } == "'s' must be an object of strings")
        // The check sees the members in sorted order, before a later member's type is checked.
        #expect(
            message {
                _ = try p.stringObject("o") { name, _ throws(RPCError) in throw RPCError.invalidParams("check \(name)") }
            } == "check k")
        #expect(try p.stringObject("missing") == nil)
        #expect(message { _ = try Params(.object(["x": .null, "b": .null]), allowed: []) } == "unknown parameter 'b'")
        #expect(message { _ = try Params(.array([]), allowed: []) } == "params must be an object of named parameters")
        #expect(try Params(nil, allowed: []).members.isEmpty)
    }
}
