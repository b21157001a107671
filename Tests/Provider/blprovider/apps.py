from django.apps import AppConfig


class BLProviderConfig(AppConfig):
    name = "blprovider"
    default_auto_field = "django.db.models.BigAutoField"
