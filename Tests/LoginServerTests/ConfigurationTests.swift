import Testing
@testable import LoginServer
