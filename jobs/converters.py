"""The `jobname` URL converter: job names as seed 004 allows them (with '.' and capitals), which
Django's `slug` refuses. Registered once, here; jobs/urls.py and jobs/routing.py import it."""

from django.urls import register_converter


class JobNameConverter:
    # Looser than the name rule (jobs/spec.py) so an odd name reaches the view and gets its 404.
    regex = r"[A-Za-z0-9][A-Za-z0-9._-]*"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobNameConverter, "jobname")
