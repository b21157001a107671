import Foundation
import Testing

@testable import BrowserLoginProtocol

struct StrictJSONCase: Sendable, CustomTestStringConvertible {
    let body: String
    let error: StrictJSONError?
    var testDescription: String { body.isEmpty ? "(empty body)" : body }
}

private func valid(_ body: String) -> StrictJSONCase { StrictJSONCase(body: body, error: nil) }
private func invalid(_ body: String, _ error: StrictJSONError) -> StrictJSONCase {
    StrictJSONCase(body: body, error: error)
}

/// Bodies decoded as `RevokeByProofRequest` (`{"attemptId", "recoveryKey"}`).
let strictJSONCases: [StrictJSONCase] = [
    valid(#"{"attemptId":"a1","recoveryKey":"k1"}"#),
    valid(#" {"recoveryKey":"k1", "attemptId":"a1"} "#),
    valid(#"{"attemptId":"a1","recoveryKey":"k1","extra":{"x":[1,2]},"more":null}"#),
    valid("{\"attemptId\":\"a1\",\"recoveryKey\":\"k1\"}\n"),
    valid(#"{"attemptId":"a\u0031","recoveryKey":"k1"}"#),
    valid(#"{"attemptId":"a1","recoveryKey":"k1","café":1,"caf\u00e9s":2,"Kelvin":"\u212A"}"#),

    invalid(#"{"attemptId":"a1","recoveryKey":"k1","attemptId":"a2"}"#, .duplicateMember),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","recoveryKey":"k1"}"#, .duplicateMember),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","\u0061ttemptId":"a2"}"#, .duplicateMember),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","extra":{"x":1,"x":2}}"#, .duplicateMember),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","extra":[{"y":{"z":1,"z":1}}]}"#, .duplicateMember),
    // Names jansson tells apart but Swift strings do not (canonical equivalence):
    // U+212A KELVIN SIGN for "K", and a decomposed "é", as a duplicate or alone.
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","recoveryKey":"k2"}"#, .duplicateMember),
    invalid("{\"attemptId\":\"a1\",\"recovery\u{212A}ey\":\"k2\"}", .duplicateMember),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1","extra":[{"café":1,"café":2}]}"#, .duplicateMember),
    invalid("{\"attemptId\":\"a1\",\"recoveryKey\":\"k1\",\"cafe\u{301}\":1}", .duplicateMember),
    invalid(#"[{"attemptId":"a1","recoveryKey":"k1"}]"#, .notAnObject),
    invalid("[]", .notAnObject),
    invalid("", .notJSON),
    invalid("   ", .notJSON),
    invalid("null", .notJSON),
    invalid("\"text\"", .notJSON),
    invalid("42", .notJSON),
    invalid("{", .notJSON),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1"}x"#, .notJSON),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1"}{}"#, .notJSON),
    invalid(#"{"attemptId":"a1","recoveryKey":"k1",}"#, .notJSON),
    invalid(#"{'attemptId':'a1','recoveryKey':'k1'}"#, .notJSON),
    invalid(#"{"attemptId":"a\u0000","recoveryKey":"k1"}"#, .notJSON),
    invalid(#"{"recoveryKey":"k1"}"#, .invalidMembers("missing 'attemptId'")),
    invalid(#"{}"#, .invalidMembers("missing 'attemptId'")),
    invalid(#"{"attemptId":7,"recoveryKey":"k1"}"#, .invalidMembers("wrong type at 'attemptId'")),
    invalid(#"{"attemptId":"a1","recoveryKey":["k1"]}"#, .invalidMembers("wrong type at 'recoveryKey'")),
    invalid(#"{"attemptId":null,"recoveryKey":"k1"}"#, .invalidMembers("null at 'attemptId'")),
    invalid(#"{"AttemptId":"a1","recoveryKey":"k1"}"#, .invalidMembers("missing 'attemptId'")),
]

@Suite struct StrictJSONTests {
    @Test(arguments: strictJSONCases)
    func decode(_ c: StrictJSONCase) {
        do {
            let value = try StrictJSON.decode(RevokeByProofRequest.self, from: Data(c.body.utf8))
            #expect(c.error == nil)
            #expect(value == RevokeByProofRequest(attemptId: "a1", recoveryKey: "k1"))
        } catch {
            #expect(error == c.error)
        }
    }

    @Test func nestedMembersAreNamedByPath() {
        let body = #"{"session":{"sessionId":"s"},"receipt":{}}"#
        #expect(throws: StrictJSONError.invalidMembers("missing 'session.accessToken'")) {
            try StrictJSON.decode(ExchangeResponse.self, from: Data(body.utf8))
        }
    }

    @Test func aBadTimestampIsAnInvalidMember() {
        let body = #"{"state":"pending","expiresAt":"2026-11-30T16:20:38Z"}"#
        #expect(throws: StrictJSONError.invalidMembers("invalid value at 'expiresAt'")) {
            try StrictJSON.decode(StatusResponse.self, from: Data(body.utf8))
        }
    }

    @Test func anUnknownEnumValueIsAnInvalidMember() {
        let body =
            #"{"clientId":"c","returnUrl":"myapp://a/cb","codeChallenge":"x","codeChallengeMethod":"plain","recoveryChallenge":"y","ephemeral":false}"#
        #expect(throws: StrictJSONError.invalidMembers("invalid value at 'codeChallengeMethod'")) {
            try StrictJSON.decode(CreateAttemptRequest.self, from: Data(body.utf8))
        }
    }

    @Test func errorsNeverRepeatAValue() {
        let body = #"{"attemptId":"SECRETVALUE","recoveryKey":12}"#
        do {
            _ = try StrictJSON.decode(RevokeByProofRequest.self, from: Data(body.utf8))
            Issue.record("accepted")
        } catch {
            #expect(!error.description.contains("SECRETVALUE"))
        }
    }

    @Test func validateObjectAlone() throws {
        try StrictJSON.validateObject(Data("{}".utf8))
        try StrictJSON.validateObject(Data(#"{"a":{"b":[{"c":1},{"c":1}]}}"#.utf8))
        #expect(throws: StrictJSONError.duplicateMember) { try StrictJSON.validateObject(Data(#"{"a":1,"a":1}"#.utf8)) }
    }
}
