from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the job state receiver)
