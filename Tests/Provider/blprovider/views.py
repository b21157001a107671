"""The protected resource and a test-only inspection route."""

from django.contrib.auth import get_user_model
from django.http import JsonResponse
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken
from oauth2_provider.views.generic import ProtectedResourceMetadataView


class Me(ProtectedResourceMetadataView):
    """GET /api/me: DOT checks the bearer token (401 with an RFC 6750
    `WWW-Authenticate: Bearer error="invalid_token"` challenge otherwise)."""

    def get(self, request, *args, **kwargs):
        user = request.resource_owner
        return JsonResponse({"user": user.get_username(), "email": user.email, "name": user.get_full_name()})


def token_counts(request):
    """GET /test/tokens?user=NAME: the user's live access tokens (not expired)
    and refresh tokens (not revoked), so a test can see a revocation at the
    provider. Counts only, never a token."""
    user = get_user_model().objects.filter(username=request.GET.get("user", "")).first()
    if user is None:
        return JsonResponse({"error": "no such user"}, status=404)
    access = AccessToken.objects.filter(user=user, expires__gt=timezone.now()).count()
    refresh = RefreshToken.objects.filter(user=user, revoked__isnull=True).count()
    return JsonResponse({"user": user.get_username(), "access": access, "refresh": refresh})
