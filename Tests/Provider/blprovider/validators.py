"""The claims of the ID token and userinfo: DOT's documented extension point
(`get_additional_claims`), mapping the Django user to OIDC Core §5.1 claims.
In this form (no request argument) DOT also lists them in discovery's
`claims_supported`; it releases each claim only for its scope
(`oidc_claim_scope`: name and preferred_username with `profile`, email with
`email`)."""

from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsValidator(OAuth2Validator):
    def get_additional_claims(self):
        return {
            "name": lambda request: request.user.get_full_name(),
            "preferred_username": lambda request: request.user.get_username(),
            "email": lambda request: request.user.email,
            # The seed's user "unverified" has an address its provider did not verify.
            "email_verified": lambda request: not request.user.get_username().startswith("unverified"),
        }
