from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the job state receiver)
