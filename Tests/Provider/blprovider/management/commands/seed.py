"""`manage.py seed`: the test users and applications, made or brought back to
their seeded state (idempotent: run on every start)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from oauth2_provider.models import get_application_model

USERS = [
    # username, password, email, first name, last name
    ("alice", "alice-password", "alice@example.com", "Alice", "Example"),
    ("bob", "bob-password", "bob@example.com", "Bob", "Example"),
    # For the reference server's upstream sign-in: no address, and an address not verified (validators.py).
    ("nomail", "nomail-password", "", "No", "Mail"),
    ("unverified", "unverified-password", "unverified@example.com", "Un", "Verified"),
]

LOOPBACK_AND_SCHEME = "http://127.0.0.1/callback http://[::1]/callback com.example.chat:/callback"


def applications(model):
    """Public clients (no secret, PKCE). DOT gives an application one grant
    type, so the device flow has an application of its own."""
    return [
        {
            "client_id": "chat-desktop",
            "name": "Example Chat",
            "client_type": model.CLIENT_PUBLIC,
            "authorization_grant_type": model.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": LOOPBACK_AND_SCHEME,
            "algorithm": model.RS256_ALGORITHM,
            "skip_authorization": False,
        },
        {
            "client_id": "chat-device",
            "name": "Example Chat (device)",
            "client_type": model.CLIENT_PUBLIC,
            "authorization_grant_type": model.GRANT_DEVICE_CODE,
            "redirect_uris": "",
            "algorithm": model.RS256_ALGORITHM,
            "skip_authorization": False,
        },
        {
            # The reference server's upstream sign-in (docs/server.md): a
            # confidential web client whose callback is the server's route.
            "client_id": "login-server",
            "name": "Browser Login server",
            "client_type": model.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": model.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1/browser-login/browser/upstream/callback/dot",
            "algorithm": model.RS256_ALGORITHM,
            "skip_authorization": False,
            "client_secret": "login-server-secret",
        },
        {
            # The same as a public client (no secret: PKCE alone).
            "client_id": "login-server-public",
            "name": "Browser Login server (public)",
            "client_type": model.CLIENT_PUBLIC,
            "authorization_grant_type": model.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1/browser-login/browser/upstream/callback/public",
            "algorithm": model.RS256_ALGORITHM,
            "skip_authorization": False,
        },
    ]


class Command(BaseCommand):
    help = "Creates the test users and applications (idempotent)."

    def handle(self, *args, **options):
        users = get_user_model()
        for username, password, email, first, last in USERS:
            user, _ = users.objects.get_or_create(username=username)
            user.email, user.first_name, user.last_name = email, first, last
            if not user.check_password(password):
                user.set_password(password)
            user.save()
        model = get_application_model()
        for fields in applications(model):
            app, _ = model.objects.get_or_create(
                client_id=fields["client_id"],
                defaults={"client_type": fields["client_type"], "authorization_grant_type": fields["authorization_grant_type"]},
            )
            secret = fields.pop("client_secret", "")
            for key, value in fields.items():
                setattr(app, key, value)
            app.client_secret = secret
            app.hash_client_secret = False
            app.save()
