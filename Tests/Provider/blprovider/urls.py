"""DOT mounted at /o/ (its documented prefix: the issuer is ORIGIN/o), the
RFC 8414 metadata at the root too (`/.well-known/oauth-authorization-server/o`,
the issuer's path appended), Django's login form, the protected resource and
the test-only token counts."""

from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider import urls as oauth2_urls

from . import views

urlpatterns = [
    path("o/", include(oauth2_urls)),
    path("", include((oauth2_urls.metadata_urlpatterns, "root-metadata"))),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("api/me", views.Me.as_view(), name="api-me"),
    path("test/tokens", views.token_counts, name="test-tokens"),
]
