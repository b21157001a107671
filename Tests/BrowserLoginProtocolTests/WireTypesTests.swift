import Foundation
import Testing

@testable import BrowserLoginProtocol

private let t1 = Timestamp(rfc3339: "2026-11-30T16:20:38.123Z")!
private let t2 = Timestamp(rfc3339: "2026-11-30T16:22:38.123Z")!
private let t3 = Timestamp(rfc3339: "2026-12-30T16:20:38.000Z")!
private let t0 = Timestamp(rfc3339: "2026-11-30T09:00:00.001Z")!
private let account = Account(userId: "u_1", email: "ada@example.com", displayName: "Ada Lovelace")
private let receipt = Receipt(
    attemptId: "att_1", sessionId: "ses_1", issuedAt: t1, tokenDigest: "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU")

/// One wire body: JSON written by hand from docs/protocol.md's member lists, and
/// the value it must decode to. Encoding the value must give the same JSON
/// object back (same member names, same values, nothing more).
struct WireCase: Sendable, CustomTestStringConvertible {
    let name: String
    let json: String
    let check: @Sendable (String) throws -> Void
    var testDescription: String { name }

    init<T: Codable & Equatable & Sendable>(_ name: String, _ value: T, _ json: String) {
        self.name = name
        self.json = json
        self.check = { json in
            let data = Data(json.utf8)
            let decoded = try StrictJSON.decode(T.self, from: data)
            #expect(decoded == value)
            let encoded = try JSONEncoder.protocolEncoder.encode(value)
            let expectedObject = try JSONSerialization.jsonObject(with: data) as? NSDictionary
            let encodedObject = try JSONSerialization.jsonObject(with: encoded) as? NSDictionary
            #expect(expectedObject != nil)
            #expect(encodedObject == expectedObject, "\(String(decoding: encoded, as: UTF8.self))")
        }
    }
}

let wireCases: [WireCase] = [
    // §5.1
    WireCase(
        "create request",
        CreateAttemptRequest(
            clientId: "notes-desktop", returnUrl: "com.example.notes:/callback",
            codeChallenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGMSJw8-cM",
            recoveryChallenge: "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"),
        #"""
        {"clientId": "notes-desktop", "returnUrl": "com.example.notes:/callback",
         "codeChallenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGMSJw8-cM", "codeChallengeMethod": "S256",
         "recoveryChallenge": "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU", "ephemeral": false}
        """#),
    WireCase(
        "create response",
        CreateAttemptResponse(
            attemptId: "att_1", authorizeUrl: "https://login.example.com/browser-login/browser/login?attempt=att_1",
            expiresAt: t2, issuer: "https://login.example.com"),
        #"""
        {"attemptId": "att_1", "authorizeUrl": "https://login.example.com/browser-login/browser/login?attempt=att_1",
         "expiresAt": "2026-11-30T16:22:38.123Z", "issuer": "https://login.example.com"}
        """#),
    // §5.2
    WireCase(
        "exchange request", ExchangeRequest(code: "code_1", codeVerifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        #"{"code": "code_1", "codeVerifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"}"#),
    WireCase(
        "exchange response",
        ExchangeResponse(
            session: IssuedSession(
                sessionId: "ses_1", accessToken: "at_1", accessTokenExpiresAt: t2, refreshToken: "rt_1", expiresAt: t3,
                authenticatedAt: t0, authMethod: "passkey", account: account),
            receipt: receipt),
        #"""
        {"session": {"sessionId": "ses_1", "accessToken": "at_1", "accessTokenExpiresAt": "2026-11-30T16:22:38.123Z",
                     "refreshToken": "rt_1", "expiresAt": "2026-12-30T16:20:38.000Z",
                     "authenticatedAt": "2026-11-30T09:00:00.001Z", "authMethod": "passkey",
                     "account": {"userId": "u_1", "email": "ada@example.com", "displayName": "Ada Lovelace"}},
         "receipt": {"attemptId": "att_1", "sessionId": "ses_1", "issuedAt": "2026-11-30T16:20:38.123Z",
                     "tokenDigest": "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"}}
        """#),
    // §5.3–5.5
    WireCase("recovery request", RecoveryRequest(recoveryKey: "rk_1"), #"{"recoveryKey": "rk_1"}"#),
    WireCase(
        "status pending", StatusResponse(state: .pending, expiresAt: t2),
        #"{"state": "pending", "expiresAt": "2026-11-30T16:22:38.123Z"}"#),
    WireCase(
        "status completed",
        StatusResponse(state: .completed, expiresAt: t2, receipt: receipt, sessionExpiresAt: t3, sessionRevoked: false),
        #"""
        {"state": "completed", "expiresAt": "2026-11-30T16:22:38.123Z",
         "receipt": {"attemptId": "att_1", "sessionId": "ses_1", "issuedAt": "2026-11-30T16:20:38.123Z",
                     "tokenDigest": "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"},
         "sessionExpiresAt": "2026-12-30T16:20:38.000Z", "sessionRevoked": false}
        """#),
    WireCase("cancel response", StateResponse(state: "cancelled"), #"{"state": "cancelled"}"#),
    WireCase("acknowledge response", StateResponse(state: "acknowledged"), #"{"state": "acknowledged"}"#),
    // §5.6–5.8
    WireCase(
        "session info", SessionInfoResponse(sessionId: "ses_1", expiresAt: t3, account: account),
        #"""
        {"sessionId": "ses_1", "expiresAt": "2026-12-30T16:20:38.000Z",
         "account": {"userId": "u_1", "email": "ada@example.com", "displayName": "Ada Lovelace"}}
        """#),
    WireCase("refresh request", RefreshRequest(refreshToken: "rt_1"), #"{"refreshToken": "rt_1"}"#),
    WireCase(
        "refresh response",
        RefreshResponse(accessToken: "at_2", accessTokenExpiresAt: t2, refreshToken: "rt_2", expiresAt: t3),
        #"""
        {"accessToken": "at_2", "accessTokenExpiresAt": "2026-11-30T16:22:38.123Z", "refreshToken": "rt_2",
         "expiresAt": "2026-12-30T16:20:38.000Z"}
        """#),
    WireCase(
        "revoke by proof", RevokeByProofRequest(attemptId: "att_1", recoveryKey: "rk_1"),
        #"{"attemptId": "att_1", "recoveryKey": "rk_1"}"#),
    WireCase("revoke response", RevokeResponse(revoked: true), #"{"revoked": true}"#),
    // §6
    WireCase(
        "describe",
        DescribeResponse(
            attemptId: "att_1", appName: "Notes", clientId: "notes-desktop", policy: .confirm, state: .pending,
            expiresAt: t2),
        #"""
        {"attemptId": "att_1", "appName": "Notes", "clientId": "notes-desktop", "policy": "confirm",
         "state": "pending", "expiresAt": "2026-11-30T16:22:38.123Z", "prompt": null, "loginHint": null}
        """#),
    WireCase(
        "describe with prompt and loginHint",
        DescribeResponse(
            attemptId: "att_1", appName: "Notes", clientId: "notes-desktop", policy: .confirm, state: .pending,
            expiresAt: t2, prompt: "login", loginHint: "ada@example.com"),
        #"""
        {"attemptId": "att_1", "appName": "Notes", "clientId": "notes-desktop", "policy": "confirm",
         "state": "pending", "expiresAt": "2026-11-30T16:22:38.123Z", "prompt": "login", "loginHint": "ada@example.com"}
        """#),
    WireCase(
        "authorize continue", AuthorizeRequest(decision: .continue, expectedSessionId: "bs_1"),
        #"{"decision": "continue", "expectedSessionId": "bs_1"}"#),
    WireCase(
        "authorize automatic", AuthorizeRequest(decision: .automatic, expectedSessionId: "bs_1"),
        #"{"decision": "automatic", "expectedSessionId": "bs_1"}"#),
    WireCase(
        "authorize response",
        AuthorizeResponse(
            callbackUrl: "com.example.notes:/callback?code=c1&attempt=att_1&iss=https%3A%2F%2Flogin.example.com"),
        #"{"callbackUrl": "com.example.notes:/callback?code=c1&attempt=att_1&iss=https%3A%2F%2Flogin.example.com"}"#),
    // §8
    WireCase("account (GET /api/me)", account, #"{"userId": "u_1", "email": "ada@example.com", "displayName": "Ada Lovelace"}"#),
    WireCase(
        "notes",
        NotesResponse(notes: [Note(id: "n1", text: "hello", createdAt: t1), Note(id: "n2", text: "", createdAt: t2)]),
        #"""
        {"notes": [{"id": "n1", "text": "hello", "createdAt": "2026-11-30T16:20:38.123Z"},
                   {"id": "n2", "text": "", "createdAt": "2026-11-30T16:22:38.123Z"}]}
        """#),
    WireCase("empty notes", NotesResponse(notes: []), #"{"notes": []}"#),
    WireCase("create note", CreateNoteRequest(text: "hello"), #"{"text": "hello"}"#),
    WireCase(
        "note", Note(id: "n1", text: "hello", createdAt: t1),
        #"{"id": "n1", "text": "hello", "createdAt": "2026-11-30T16:20:38.123Z"}"#),
    // §4 error body
    WireCase(
        "error body", ErrorBody(code: .attemptExpired, message: "the attempt has expired"),
        #"{"error": {"code": "ATTEMPT_EXPIRED", "message": "the attempt has expired"}}"#),
    WireCase(
        "error body with an unknown code", ErrorBody(code: ServerErrorCode("SOMETHING_NEW"), message: "m"),
        #"{"error": {"code": "SOMETHING_NEW", "message": "m"}}"#),
]

@Suite struct WireTypesTests {
    @Test(arguments: wireCases)
    func roundTrip(_ c: WireCase) throws {
        try c.check(c.json)
    }

    @Test func encoderIsStableAndDoesNotEscapeSlashes() throws {
        let data = try JSONEncoder.protocolEncoder.encode(RevokeByProofRequest(attemptId: "a/b", recoveryKey: "k"))
        #expect(String(decoding: data, as: UTF8.self) == #"{"attemptId":"a/b","recoveryKey":"k"}"#)
        let status = try JSONEncoder.protocolEncoder.encode(StatusResponse(state: .expired, expiresAt: t2))
        #expect(String(decoding: status, as: UTF8.self) == #"{"expiresAt":"2026-11-30T16:22:38.123Z","state":"expired"}"#)
    }

    @Test func createRequestRequiresEveryMember() {
        let full: [String: String] = [
            "clientId": #""c""#, "returnUrl": #""myapp://a/cb""#, "codeChallenge": #""x""#,
            "codeChallengeMethod": #""S256""#, "recoveryChallenge": #""y""#, "ephemeral": "false",
        ]
        for omitted in full.keys.sorted() {
            let members = full.filter { $0.key != omitted }.map { "\"\($0.key)\":\($0.value)" }
            let body = "{" + members.joined(separator: ",") + "}"
            #expect(throws: StrictJSONError.invalidMembers("missing '\(omitted)'")) {
                try StrictJSON.decode(CreateAttemptRequest.self, from: Data(body.utf8))
            }
        }
    }

    @Test func statesAndPolicies() {
        #expect(ServerAttemptState.allCases.map(\.rawValue) == ["pending", "authorized", "completed", "cancelled", "expired"])
        #expect(ClientPolicy.allCases.map(\.rawValue) == ["confirm", "automatic"])
        #expect(CodeChallengeMethod.s256.rawValue == "S256")
        #expect(AuthorizeDecision.continue.rawValue == "continue")
    }

    /// §5.3: receipt, sessionExpiresAt and sessionRevoked are present exactly when completed.
    @Test(arguments: ServerAttemptState.allCases)
    func statusCompletedMembers(_ state: ServerAttemptState) {
        let bare = StatusResponse(state: state, expiresAt: t2)
        let full = StatusResponse(state: state, expiresAt: t2, receipt: receipt, sessionExpiresAt: t3, sessionRevoked: true)
        let partial = StatusResponse(state: state, expiresAt: t2, receipt: receipt)
        #expect(bare.isWellFormed == (state != .completed))
        #expect(full.isWellFormed == (state == .completed))
        #expect(!partial.isWellFormed)
    }
}

/// Every code docs/protocol.md lists (§4, §5, §6, §8) with its status.
let specErrorCodes: [(String, Int)] = [
    ("INVALID_REQUEST", 400), ("PAYLOAD_TOO_LARGE", 413), ("NATIVE_ONLY", 403), ("RATE_LIMITED", 429),
    ("CLIENT_UNKNOWN", 404), ("RETURN_URL_NOT_REGISTERED", 400), ("INVALID_GRANT", 400),
    ("ATTEMPT_NOT_AUTHORIZED", 409), ("ATTEMPT_ALREADY_EXCHANGED", 409), ("ATTEMPT_EXPIRED", 410),
    ("ATTEMPT_CANCELLED", 410), ("ATTEMPT_UNKNOWN", 404), ("AUTH_USER_DISABLED", 403), ("PROOF_INVALID", 403),
    ("ATTEMPT_ACTIVE", 409), ("SESSION_REVOKED", 401), ("SESSION_EXPIRED", 401), ("TOKEN_EXPIRED", 401),
    ("UNAUTHENTICATED", 401), ("ORIGIN_MISMATCH", 403), ("SESSION_CHANGED", 409), ("POLICY_MISMATCH", 400),
    ("LOGIN_REQUIRED", 401), ("BROWSER_MISMATCH", 403),
]

@Suite struct ServerErrorCodeTests {
    @Test(arguments: specErrorCodes)
    func httpStatus(_ raw: String, _ status: Int) throws {
        let code = ServerErrorCode(raw)
        #expect(code.httpStatus == status)
        let decoded = try JSONDecoder().decode(ServerErrorCode.self, from: Data("\"\(raw)\"".utf8))
        #expect(decoded == code)
        #expect(String(decoding: try JSONEncoder().encode(code), as: UTF8.self) == "\"\(raw)\"")
    }

    @Test func theNamedConstantsAreTheSpecsSpelling() {
        let named: [ServerErrorCode] = [
            .invalidRequest, .payloadTooLarge, .nativeOnly, .rateLimited, .clientUnknown, .returnURLNotRegistered,
            .invalidGrant, .attemptNotAuthorized, .attemptAlreadyExchanged, .attemptExpired, .attemptCancelled,
            .attemptUnknown, .authUserDisabled, .proofInvalid, .attemptActive, .sessionRevoked, .sessionExpired,
            .tokenExpired, .unauthenticated, .originMismatch, .sessionChanged, .policyMismatch, .loginRequired,
            .browserMismatch,
        ]
        #expect(named.map(\.rawValue) == specErrorCodes.map(\.0))
    }

    @Test func projectCodesAndUnknownCodes() {
        #expect(ServerErrorCode.notFound.httpStatus == 404)
        #expect(ServerErrorCode.methodNotAllowed.httpStatus == 405)
        #expect(ServerErrorCode.otpInvalid.httpStatus == 400)
        #expect(ServerErrorCode.otpExpired.httpStatus == 400)
        #expect(ServerErrorCode.otpMaxAttempts.httpStatus == 400)
        #expect(ServerErrorCode.internalError.httpStatus == 500)
        #expect(ServerErrorCode("SOMETHING_NEW").httpStatus == 500)
        #expect(ServerErrorCode("invalid_request") != .invalidRequest)
    }
}
