"""Settings of the test provider: django-oauth-toolkit (DOT) as an OpenID
Connect provider for the end-to-end tests (Tests/Provider/README.md).

Configuration only: every endpoint is DOT's own. `serve.py` sets the
environment read here before Django starts:

- BL_PROVIDER_DIR: the directory of the SQLite database and the RSA key.
- BL_PROVIDER_ORIGIN: http://127.0.0.1:PORT (the issuer is ORIGIN/o).
- BL_PROVIDER_ACCESS_TTL: access token lifetime in seconds (default 300).
"""

import os

DATA_DIR = os.environ["BL_PROVIDER_DIR"]
ORIGIN = os.environ["BL_PROVIDER_ORIGIN"]
ISSUER = ORIGIN + "/o"
ACCESS_TTL = int(os.environ.get("BL_PROVIDER_ACCESS_TTL", "300"))

with open(os.path.join(DATA_DIR, "oidc-rsa.pem"), encoding="ascii") as key_file:
    OIDC_KEY = key_file.read()

# A test server on loopback: the key signs sessions and CSRF tokens only.
SECRET_KEY = "browser-login-test-provider-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "[::1]", "localhost"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
    "blprovider.apps.BLProviderConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]

ROOT_URLCONF = "blprovider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(DATA_DIR, "provider.sqlite3"),
        "OPTIONS": {"timeout": 20},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Fast password hashing: the test users' passwords are not secrets either.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGIN_URL = "/accounts/login/"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = False

# Warnings and errors to standard error; nothing that carries a token or code.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {"django.request": {"level": "ERROR"}, "oauth2_provider": {"level": "WARNING"}},
}

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": OIDC_KEY,
    # The exact issuer: the same string in discovery, RFC 8414 metadata, the
    # ID token's `iss` and the authorization response's `iss` (RFC 9207).
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OAUTH2_VALIDATOR_CLASS": "blprovider.validators.ClaimsValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Your name",
        "email": "Your email address",
        "offline_access": "Stay signed in",
        "read": "Read your data",
    },
    "DEFAULT_SCOPES": ["openid", "profile", "email"],
    # PKCE (RFC 7636) on every authorization code, S256 only (RFC 9700 §2.1.1).
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    # RFC 9207: `iss` in every authorization response.
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    # Refresh tokens rotate; a superseded one is refused and, replayed, revokes its family.
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
    "ACCESS_TOKEN_EXPIRE_SECONDS": ACCESS_TTL,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    # The consent form every time (so that a test can deny).
    "REQUEST_APPROVAL_PROMPT": "force",
    # Loopback redirects (any port, RFC 8252 §7.3) and the private-use scheme (§7.1).
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https", "com.example.chat"],
    # RFC 8628.
    "OAUTH_DEVICE_VERIFICATION_URI": ORIGIN + "/o/device/",
    "OAUTH_DEVICE_VERIFICATION_URI_COMPLETE": ORIGIN + "/o/device/?user_code={user_code}",
    "DEVICE_FLOW_INTERVAL": 1,
    "OIDC_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": [
        "authorization_code",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:device_code",
    ],
}
