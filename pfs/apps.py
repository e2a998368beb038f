from django.apps import AppConfig


class PfsConfig(AppConfig):
    name = "pfs"
