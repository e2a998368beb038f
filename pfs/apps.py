from django.apps import AppConfig


class PfsConfig(AppConfig):
    name = "pfs"
    verbose_name = "PFS storage"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the job state receiver)
