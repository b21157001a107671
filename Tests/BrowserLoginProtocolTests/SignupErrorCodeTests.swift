import BrowserLoginProtocol
import Foundation
import Testing

/// The reference server's sign-up gate codes (docs/protocol.md §6.6, §9).
@Suite struct SignupErrorCodeTests {
    @Test(arguments: [
        (ServerErrorCode.invitationRequired, "INVITATION_REQUIRED"), (.invitationInvalid, "INVITATION_INVALID"),
        (.waitlisted, "WAITLISTED"), (.domainNotAllowed, "DOMAIN_NOT_ALLOWED"),
    ])
    func theGateCodesAreForbidden(_ code: ServerErrorCode, _ raw: String) throws {
        #expect(code.rawValue == raw)
        #expect(code.httpStatus == 403)
        #expect(try JSONDecoder().decode(ServerErrorCode.self, from: Data("\"\(raw)\"".utf8)) == code)
    }
}
