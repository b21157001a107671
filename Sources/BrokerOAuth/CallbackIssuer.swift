/// What RFC 9207 (and so the mix-up defence of RFC 9700 §4.4) says of an
/// authorization response's `iss` parameter, for one provider's metadata.
/// Shared by the broker's callback and the reference server's upstream
/// sign-in, so that both decide alike.
public enum CallbackIssuerCheck: Sendable, Equatable {
    /// `iss` is the provider's issuer, or is absent and not promised.
    case accepted
    /// `iss` names another issuer: the response is not this provider's.
    case mismatch(got: String, expected: String)
    /// The provider promises `iss` (`authorization_response_iss_parameter_supported`)
    /// and the response lacks it (RFC 9207 §2.4: refuse a code response; an
    /// error response with the right `state` may still end its attempt —
    /// OAUTH.md §2, issue 31 — as it can never exchange).
    case missing
}

extension ProviderMetadata {
    /// Checks a callback's `iss` (nil when absent) against this metadata's
    /// issuer, byte for byte. For an issuer template (`{tenantid}`, Entra)
    /// a present `iss` names the user's tenant and is not compared: the ID
    /// token's `iss` is checked against the template instead.
    public func checkCallbackIssuer(_ callbackIssuer: String?, issuerIsTemplate: Bool) -> CallbackIssuerCheck {
        guard let callbackIssuer else { return issParameterSupported ? .missing : .accepted }
        if issuerIsTemplate || callbackIssuer.utf8.elementsEqual(issuer.utf8) { return .accepted }
        return .mismatch(got: callbackIssuer, expected: issuer)
    }
}
