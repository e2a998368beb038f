"""First-run setup: the default datacenter (local processes), its default quota, a first (admin) user and
the example packages in that user's home: what a first job needs."""

import secrets
import shutil
from argparse import ArgumentParser

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from accounts.models import Datacenter
from pfs.paths import home
from quotas.models import Quota


class Command(BaseCommand):
    help = "Create the default datacenter and quota, and a first admin user if there is no user yet."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="", help="Default: a random one, printed once.")

    def handle(self, *args: str, username: str, password: str, **options: object) -> None:
        dc, created = Datacenter.objects.get_or_create(
            name=settings.DEFAULT_DATACENTER,
            defaults={"backend": Datacenter.Backend.LOCAL, "description": "Jobs run as processes on this server"},
        )
        if created:
            self.stdout.write(f"created datacenter '{dc.name}' (local processes)")
        Quota.objects.get_or_create(datacenter=dc, user=None)
        user_model = get_user_model()
        if user_model.objects.exists():
            return
        password = password or secrets.token_urlsafe(12)
        user = user_model.objects.create_superuser(username=username, email="", password=password)
        self._copy_examples(user, dc)
        line = "=" * 64
        self.stdout.write(self.style.SUCCESS(
            f"{line}\n  Log in at {settings.SITE_URL}/login/\n  username: {username}\n  password: {password}\n"
            f"  (shown once; change it in the admin, or: python manage.py changepassword {username})\n"
            f"  An example package is in your storage: /pfs/{dc.name}/home/{username}/examples/fit_a_line\n{line}"))

    def _copy_examples(self, user: User, dc: Datacenter) -> None:
        target = home(user, dc.name).child("examples").disk
        for example in ("fit_a_line", "collective"):
            src = settings.BASE_DIR / "examples" / example
            if src.is_dir() and not (target / example).exists():
                shutil.copytree(src, target / example)
