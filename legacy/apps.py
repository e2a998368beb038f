from django.apps import AppConfig


class LegacyConfig(AppConfig):
    name = "legacy"
    verbose_name = "Legacy /api/v1 protocol"
