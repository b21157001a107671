import Testing

@testable import LoginServer

/// An attempt's `prompt` and `loginHint` on an upstream provider's
/// authorization request (UpstreamSignIn.swift `SignInHints`).
@Suite struct SignInHintsTests {
    @Test func theHintsAreAddedAndReplaceParametersOfTheSameName() {
        let url = "https://id.example.com/authorize?client_id=x&prompt=consent&scope=openid%20email&state=s"
        #expect(SignInHints().applied(to: url) == url)
        #expect(
            SignInHints(prompt: "login", loginHint: "Ada+work@example.com").applied(to: url)
                == "https://id.example.com/authorize?client_id=x&scope=openid%20email&state=s&prompt=login"
                + "&login_hint=Ada%2Bwork%40example.com")
        // Only the parameters set are replaced; a name written percent-encoded is the same name.
        #expect(
            SignInHints(prompt: "login").applied(to: "https://id.example.com/a?login_hint=keep&%70rompt=none")
                == "https://id.example.com/a?login_hint=keep&prompt=login")
        #expect(
            SignInHints(loginHint: "o'neil&x=1@example.com").applied(to: "https://id.example.com/a")
                == "https://id.example.com/a?login_hint=o%27neil%26x%3D1%40example.com")
    }
}
